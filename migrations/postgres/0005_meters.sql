-- Budgets and rate limits every replica shares (src/spend/postgres.rs): one lock row per scope
-- (a key or a channel), the holds of requests in flight with their deadlines, the admissions
-- of the last minute (rpm, tpm), and what each scope spent per budget period. Expand only.

CREATE TABLE meter_scopes (
    scope TEXT PRIMARY KEY
);

CREATE TABLE meter_holds (
    scope TEXT NOT NULL,
    id BIGINT NOT NULL,
    micros BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (scope, id)
);

CREATE TABLE meter_window (
    scope TEXT NOT NULL,
    id BIGINT NOT NULL,
    ts_ms BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    PRIMARY KEY (scope, id)
);

CREATE INDEX meter_window_ts ON meter_window (scope, ts_ms);

CREATE TABLE meter_spend (
    scope TEXT NOT NULL,
    period TEXT NOT NULL,
    spent BIGINT NOT NULL,
    PRIMARY KEY (scope, period)
);
