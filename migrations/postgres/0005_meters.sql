-- Budgets and rate limits every replica shares (src/spend/postgres.rs): one row per scope (a key
-- or a channel) holding its running counts, locked by each admission; the holds of requests in
-- flight with their deadlines; the admissions of the last minute (rpm, tpm); and what each
-- scope spent per budget period. Expand only.

CREATE TABLE meter_scopes (
    scope TEXT PRIMARY KEY,
    -- Over the scope's rows in meter_holds: their micros summed, and how many.
    reserved BIGINT NOT NULL DEFAULT 0,
    holds BIGINT NOT NULL DEFAULT 0,
    -- Over its rows in meter_window: how many, and their tokens summed.
    admitted BIGINT NOT NULL DEFAULT 0,
    wtok BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE meter_holds (
    scope TEXT NOT NULL,
    id BIGINT NOT NULL,
    micros BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (scope, id)
);

CREATE INDEX meter_holds_expiry ON meter_holds (scope, expires_ms);

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

-- Both functions commit asynchronously: a PostgreSQL crash can forget the last fraction of a
-- second of holds and settles (holds expire anyway; every charge stays in the ledger, which is
-- written durably), and in exchange a scope's row lock is not held across a disk flush.
--
-- One scope's admission in one round trip: the scope's row locked (the upsert returns its
-- counts as last committed), expired holds and aged admissions removed from the counts, every
-- limit checked, and the hold taken if all have room. A limit of -1 is none. Returns the
-- refusing limit (0: admitted; 1 budget, 2 rpm, 3 tpm, 4 concurrency), its value, what is
-- used of it, and ms until it has room. The cost is independent of how many holds and
-- admissions the scope has.
CREATE FUNCTION switchyard_admit(
    p_scope TEXT, p_id BIGINT, p_now BIGINT, p_period TEXT, p_ask BIGINT, p_tokens BIGINT,
    p_expires BIGINT, p_budget BIGINT, p_conc BIGINT, p_rpm BIGINT, p_tpm BIGINT
) RETURNS TABLE (refused INTEGER, cap BIGINT, used BIGINT, wait_ms BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    v_reserved BIGINT;
    v_holds BIGINT;
    v_admitted BIGINT;
    v_wtok BIGINT;
    v_m BIGINT;
    v_n BIGINT;
    v_spent BIGINT := 0;
    v_oldest BIGINT;
    v_refused INTEGER := 0;
    v_cap BIGINT := p_budget;
    v_used BIGINT;
    v_wait BIGINT := 0;
BEGIN
    -- The scope's row is held until commit: not waiting for the WAL flush there lets
    -- admissions to one scope follow each other at memory speed (see the comment below).
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO meter_scopes (scope) VALUES (p_scope)
        ON CONFLICT (scope) DO UPDATE SET scope = EXCLUDED.scope
        RETURNING meter_scopes.reserved, meter_scopes.holds, meter_scopes.admitted,
            meter_scopes.wtok
        INTO v_reserved, v_holds, v_admitted, v_wtok;
    WITH gone AS (DELETE FROM meter_holds WHERE scope = p_scope AND expires_ms < p_now
                  RETURNING micros)
        SELECT coalesce(sum(micros), 0), count(*) INTO v_m, v_n FROM gone;
    v_reserved := greatest(v_reserved - v_m, 0);
    v_holds := greatest(v_holds - v_n, 0);
    WITH aged AS (DELETE FROM meter_window WHERE scope = p_scope AND ts_ms <= p_now - 60000
                  RETURNING tokens)
        SELECT coalesce(sum(tokens), 0), count(*) INTO v_m, v_n FROM aged;
    v_wtok := greatest(v_wtok - v_m, 0);
    v_admitted := greatest(v_admitted - v_n, 0);
    IF p_budget >= 0 THEN
        SELECT coalesce(max(spent), 0) INTO v_spent
            FROM meter_spend WHERE scope = p_scope AND period = p_period;
    END IF;
    v_used := v_spent + v_reserved;
    IF p_budget >= 0 AND v_used + greatest(p_ask, 1) > p_budget THEN
        v_refused := 1;
    ELSIF p_conc >= 0 AND v_holds >= p_conc THEN
        v_refused := 4; v_cap := p_conc; v_used := v_holds; v_wait := 1000;
    ELSIF (p_rpm >= 0 AND v_admitted >= p_rpm)
        OR (p_tpm >= 0 AND v_admitted > 0 AND v_wtok + p_tokens > p_tpm) THEN
        SELECT min(ts_ms) INTO v_oldest FROM meter_window WHERE scope = p_scope;
        v_wait := coalesce(v_oldest + 60000 - p_now, 1000);
        IF p_rpm >= 0 AND v_admitted >= p_rpm THEN
            v_refused := 2; v_cap := p_rpm; v_used := v_admitted;
        ELSE
            v_refused := 3; v_cap := p_tpm; v_used := v_wtok;
        END IF;
    END IF;
    IF v_refused = 0 THEN
        INSERT INTO meter_holds (scope, id, micros, expires_ms)
            VALUES (p_scope, p_id, p_ask, p_expires);
        v_reserved := v_reserved + p_ask;
        v_holds := v_holds + 1;
        v_used := v_used + p_ask;
        IF p_rpm >= 0 OR p_tpm >= 0 THEN
            INSERT INTO meter_window (scope, id, ts_ms, tokens)
                VALUES (p_scope, p_id, p_now, p_tokens);
            v_admitted := v_admitted + 1;
            v_wtok := v_wtok + p_tokens;
        END IF;
    END IF;
    UPDATE meter_scopes SET reserved = v_reserved, holds = v_holds, admitted = v_admitted,
        wtok = v_wtok WHERE scope = p_scope;
    RETURN QUERY SELECT v_refused, v_cap, v_used, v_wait;
END
$$;

-- A hold settled: gone from the counts (if its deadline has not swept it already), its
-- admission's tokens made the real count, its cost added to the period's spend. Locks the
-- scope's row first, as an admission does, so the two never wait on each other in a cycle.
CREATE FUNCTION switchyard_settle(
    p_scope TEXT, p_id BIGINT, p_period TEXT, p_cost BIGINT, p_tokens BIGINT
) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    v_m BIGINT;
    v_t BIGINT;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM 1 FROM meter_scopes WHERE scope = p_scope FOR UPDATE;
    DELETE FROM meter_holds WHERE scope = p_scope AND id = p_id RETURNING micros INTO v_m;
    UPDATE meter_window w SET tokens = p_tokens FROM (
        SELECT tokens AS before FROM meter_window WHERE scope = p_scope AND id = p_id
    ) b WHERE w.scope = p_scope AND w.id = p_id RETURNING b.before INTO v_t;
    IF v_m IS NOT NULL OR v_t IS NOT NULL THEN
        UPDATE meter_scopes SET
            reserved = greatest(reserved - coalesce(v_m, 0), 0),
            holds = greatest(holds - CASE WHEN v_m IS NULL THEN 0 ELSE 1 END, 0),
            wtok = greatest(wtok + p_tokens - coalesce(v_t, p_tokens), 0)
        WHERE scope = p_scope;
    END IF;
    IF p_cost > 0 AND p_period <> '' THEN
        INSERT INTO meter_spend (scope, period, spent) VALUES (p_scope, p_period, p_cost)
            ON CONFLICT (scope, period) DO UPDATE SET spent = meter_spend.spent + EXCLUDED.spent;
    END IF;
END
$$;
