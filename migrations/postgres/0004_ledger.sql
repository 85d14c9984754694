-- The ledger (one row per upstream attempt, written in the same transaction as its request's
-- row), the price versions its rows name, and each request's summed cost. Expand only.

ALTER TABLE requests ADD COLUMN cost_micros BIGINT;

CREATE TABLE ledger (
    request_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    ts_ms BIGINT NOT NULL,
    key_name TEXT,
    channel TEXT NOT NULL,
    credential TEXT,
    model TEXT NOT NULL,
    upstream_model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    reasoning_tokens BIGINT NOT NULL,
    cost_micros BIGINT NOT NULL,
    price_version TEXT,
    outcome TEXT NOT NULL,
    estimated BOOLEAN NOT NULL,
    first_choice_micros BIGINT,
    PRIMARY KEY (request_id, attempt)
);

CREATE INDEX ledger_ts ON ledger (ts_ms);

CREATE TABLE prices (
    version TEXT PRIMARY KEY,
    rates TEXT NOT NULL,
    first_seen_ms BIGINT NOT NULL
);
