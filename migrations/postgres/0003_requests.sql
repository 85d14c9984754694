-- The request log, for a gateway whose store is PostgreSQL: the columns of the SQLite log's
-- `requests` table (src/store/log/sqlite.rs), and `seq`, the insertion order (SQLite's rowid),
-- which breaks ties between rows of the same millisecond. Rows are pruned by `ts_ms` past
-- `[store] retention_days`. (0002 is taken by another change.)

CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    seq BIGSERIAL NOT NULL,
    ts_ms BIGINT NOT NULL,
    key_name TEXT,
    endpoint TEXT NOT NULL,
    requested_model TEXT,
    served_model TEXT,
    channel TEXT,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    attempts TEXT NOT NULL,
    stream BOOLEAN NOT NULL,
    total_ms BIGINT NOT NULL,
    ttfb_ms BIGINT,
    input_tokens BIGINT,
    output_tokens BIGINT,
    tokens_per_s DOUBLE PRECISION,
    translation TEXT,
    session TEXT,
    affinity TEXT,
    prompt_tokens BIGINT,
    trimmed_turns BIGINT
);

CREATE INDEX requests_ts ON requests (ts_ms);
