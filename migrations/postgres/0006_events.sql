-- Routing events (every one, folded or not, for GET /admin/events; the payload as sent), the
-- webhook outbox (one row per event and webhook: delivered at least once, a lease so one
-- replica delivers it), each delivery attempt, and a webhook's failing streak. Only adds.
CREATE TABLE events (
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    ts_ms BIGINT NOT NULL,
    request_id TEXT,
    folded_into TEXT,
    payload TEXT NOT NULL
);
CREATE INDEX events_ts ON events (ts_ms);

CREATE TABLE outbox (
    event_id TEXT NOT NULL,
    webhook TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_ms BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL DEFAULT 0,
    leased_by TEXT,
    created_ms BIGINT NOT NULL,
    last_status BIGINT,
    PRIMARY KEY (event_id, webhook)
);
-- Due rows are leased per webhook, so a failing one's backlog is never scanned for another.
CREATE INDEX outbox_due ON outbox (state, webhook, next_ms);

CREATE TABLE deliveries (
    event_id TEXT NOT NULL,
    webhook TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    ts_ms BIGINT NOT NULL,
    status BIGINT,
    latency_ms BIGINT NOT NULL,
    error TEXT,
    replica TEXT NOT NULL,
    PRIMARY KEY (event_id, webhook, attempt)
);
CREATE INDEX deliveries_hook ON deliveries (webhook, ts_ms);

CREATE TABLE webhook_state (
    name TEXT PRIMARY KEY,
    failing_since_ms BIGINT,
    disabled_ms BIGINT
);

-- A settle that answers the period's spend after it (for budget threshold events): the
-- scope's row, locked by switchyard_settle, stays locked until this call's transaction
-- commits, so the spend read is this settle's own. switchyard_settle stays for rollback.
CREATE FUNCTION switchyard_settle_spent(
    p_scope TEXT, p_id BIGINT, p_period TEXT, p_cost BIGINT, p_tokens BIGINT
) RETURNS BIGINT
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM switchyard_settle(p_scope, p_id, p_period, p_cost, p_tokens);
    RETURN (SELECT spent FROM meter_spend WHERE scope = p_scope AND period = p_period);
END
$$;
