-- The request log's `route_reason`: how the first try was chosen (`{strategy}.{why}`, e.g.
-- `latency.fastest`, `session.bound`). Expand-only: a gateway one migration behind still
-- writes its rows (the column stays null).

ALTER TABLE requests ADD COLUMN route_reason TEXT;

-- The ledger's `cache_saved_micros`: what the provider's prompt cache saved on the attempt (the
-- cost with every prompt token at the input rate, less the cost charged).
ALTER TABLE ledger ADD COLUMN cache_saved_micros BIGINT NOT NULL DEFAULT 0;

-- The request log's `cache`: what the response cache did with the request (`hit`, `miss`,
-- `bypass`; null without a cache).
ALTER TABLE requests ADD COLUMN cache TEXT;
