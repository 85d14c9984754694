-- Teams (src/spend/postgres.rs): a request admitted at every level of its chain (an end user,
-- its key, its team up to the organisation) in one call, and the end users each team counts,
-- at most a bound of them, the longest idle forgotten. Expand only.

ALTER TABLE meter_scopes ADD COLUMN users BIGINT NOT NULL DEFAULT 0;

CREATE TABLE meter_users (
    team TEXT NOT NULL,
    scope TEXT NOT NULL,
    seen_ms BIGINT NOT NULL,
    PRIMARY KEY (team, scope)
);

CREATE INDEX meter_users_seen ON meter_users (team, seen_ms);

-- Every level at once: their rows locked in the order of their names (so two admissions
-- never wait on each other in a cycle), expired holds and aged admissions swept, every limit
-- of every level checked, and the hold taken at all of them if all have room. Arrays are per
-- level; a limit of -1 is none. p_team names the team whose end user the first level is ('':
-- none), counted among at most p_max_users. Returns one row per level when admitted
-- (refused 0, the level's budget and used), or the one refusing level's row as
-- switchyard_admit gives it.
CREATE FUNCTION switchyard_admit_all(
    p_scopes TEXT[], p_id BIGINT, p_now BIGINT, p_periods TEXT[], p_ask BIGINT, p_tokens BIGINT,
    p_expires BIGINT, p_budgets BIGINT[], p_concs BIGINT[], p_rpms BIGINT[], p_tpms BIGINT[],
    p_team TEXT, p_max_users BIGINT
) RETURNS TABLE (level INTEGER, refused INTEGER, cap BIGINT, used BIGINT, wait_ms BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    n INTEGER := array_length(p_scopes, 1);
    v_reserved BIGINT[] := '{}';
    v_holds BIGINT[] := '{}';
    v_admitted BIGINT[] := '{}';
    v_wtok BIGINT[] := '{}';
    v_spent BIGINT[] := '{}';
    v_r BIGINT; v_h BIGINT; v_a BIGINT; v_w BIGINT;
    v_m BIGINT;
    v_n BIGINT;
    v_oldest BIGINT;
    v_scope TEXT;
    v_new BOOLEAN;
    v_gone TEXT[];
    i INTEGER;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    FOR v_scope IN SELECT DISTINCT s FROM unnest(p_scopes || p_team) s WHERE s <> '' ORDER BY s
    LOOP
        INSERT INTO meter_scopes (scope) VALUES (v_scope)
            ON CONFLICT (scope) DO UPDATE SET scope = EXCLUDED.scope;
    END LOOP;
    FOR i IN 1..n LOOP
        SELECT s.reserved, s.holds, s.admitted, s.wtok INTO v_r, v_h, v_a, v_w
            FROM meter_scopes s WHERE s.scope = p_scopes[i];
        WITH gone AS (DELETE FROM meter_holds WHERE scope = p_scopes[i] AND expires_ms < p_now
                      RETURNING micros)
            SELECT coalesce(sum(micros), 0), count(*) INTO v_m, v_n FROM gone;
        v_reserved[i] := greatest(v_r - v_m, 0);
        v_holds[i] := greatest(v_h - v_n, 0);
        WITH aged AS (DELETE FROM meter_window WHERE scope = p_scopes[i]
                      AND ts_ms <= p_now - 60000 RETURNING tokens)
            SELECT coalesce(sum(tokens), 0), count(*) INTO v_m, v_n FROM aged;
        v_wtok[i] := greatest(v_w - v_m, 0);
        v_admitted[i] := greatest(v_a - v_n, 0);
        v_spent[i] := 0;
        IF p_budgets[i] >= 0 THEN
            SELECT coalesce(max(spent), 0) INTO v_m
                FROM meter_spend WHERE scope = p_scopes[i] AND period = p_periods[i];
            v_spent[i] := v_m;
        END IF;
        UPDATE meter_scopes SET reserved = v_reserved[i], holds = v_holds[i],
            admitted = v_admitted[i], wtok = v_wtok[i] WHERE scope = p_scopes[i];
    END LOOP;
    FOR i IN 1..n LOOP
        IF p_budgets[i] >= 0 AND v_spent[i] + v_reserved[i] + greatest(p_ask, 1) > p_budgets[i] THEN
            RETURN QUERY SELECT i, 1, p_budgets[i], v_spent[i] + v_reserved[i], 0::BIGINT;
            RETURN;
        ELSIF p_concs[i] >= 0 AND v_holds[i] >= p_concs[i] THEN
            RETURN QUERY SELECT i, 4, p_concs[i], v_holds[i], 1000::BIGINT;
            RETURN;
        ELSIF (p_rpms[i] >= 0 AND v_admitted[i] >= p_rpms[i])
            OR (p_tpms[i] >= 0 AND v_admitted[i] > 0 AND v_wtok[i] + p_tokens > p_tpms[i]) THEN
            SELECT min(ts_ms) INTO v_oldest FROM meter_window WHERE scope = p_scopes[i];
            IF p_rpms[i] >= 0 AND v_admitted[i] >= p_rpms[i] THEN
                RETURN QUERY SELECT i, 2, p_rpms[i], v_admitted[i],
                    coalesce(v_oldest + 60000 - p_now, 1000);
            ELSE
                RETURN QUERY SELECT i, 3, p_tpms[i], v_wtok[i],
                    coalesce(v_oldest + 60000 - p_now, 1000);
            END IF;
            RETURN;
        END IF;
    END LOOP;
    FOR i IN 1..n LOOP
        INSERT INTO meter_holds (scope, id, micros, expires_ms)
            VALUES (p_scopes[i], p_id, p_ask, p_expires);
        IF p_rpms[i] >= 0 OR p_tpms[i] >= 0 THEN
            INSERT INTO meter_window (scope, id, ts_ms, tokens)
                VALUES (p_scopes[i], p_id, p_now, p_tokens);
            UPDATE meter_scopes SET admitted = admitted + 1, wtok = wtok + p_tokens
                WHERE scope = p_scopes[i];
        END IF;
        UPDATE meter_scopes SET reserved = reserved + p_ask, holds = holds + 1
            WHERE scope = p_scopes[i];
        RETURN QUERY SELECT i, 0, p_budgets[i],
            CASE WHEN p_budgets[i] >= 0 THEN v_spent[i] + v_reserved[i] + p_ask ELSE 0 END,
            0::BIGINT;
    END LOOP;
    IF p_team <> '' THEN
        -- The end user seen now; a new one past the bound forgets the longest idle (their rows
        -- sort after the team's, which this admission holds, so no one holding them waits here).
        INSERT INTO meter_users (team, scope, seen_ms) VALUES (p_team, p_scopes[1], p_now)
            ON CONFLICT (team, scope) DO UPDATE SET seen_ms = EXCLUDED.seen_ms
            RETURNING (xmax = 0) INTO v_new;
        IF v_new THEN
            UPDATE meter_scopes SET users = users + 1 WHERE scope = p_team RETURNING users INTO v_n;
            IF v_n > p_max_users THEN
                WITH gone AS (
                    DELETE FROM meter_users WHERE team = p_team AND scope IN (
                        SELECT u.scope FROM meter_users u WHERE u.team = p_team
                            AND u.scope <> p_scopes[1] ORDER BY u.seen_ms LIMIT v_n - p_max_users)
                    RETURNING scope)
                    SELECT coalesce(array_agg(scope), '{}') INTO v_gone FROM gone;
                DELETE FROM meter_holds WHERE scope = ANY(v_gone);
                DELETE FROM meter_window WHERE scope = ANY(v_gone);
                DELETE FROM meter_spend WHERE scope = ANY(v_gone);
                DELETE FROM meter_scopes WHERE scope = ANY(v_gone);
                UPDATE meter_scopes SET users = users - array_length(v_gone, 1)
                    WHERE scope = p_team AND array_length(v_gone, 1) > 0;
            END IF;
        END IF;
    END IF;
END
$$;

-- One admission's holds settled at every level: the rows locked in name order first (as the
-- admission locks them), then each settled as switchyard_settle does. Returns each level's
-- period spend after the charge (null: none).
CREATE FUNCTION switchyard_settle_all(
    p_scopes TEXT[], p_id BIGINT, p_periods TEXT[], p_costs BIGINT[], p_tokens BIGINT
) RETURNS TABLE (level INTEGER, spent BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    i INTEGER;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM 1 FROM meter_scopes s WHERE s.scope = ANY(p_scopes) ORDER BY s.scope FOR UPDATE;
    FOR i IN 1..array_length(p_scopes, 1) LOOP
        PERFORM switchyard_settle(p_scopes[i], p_id, p_periods[i], p_costs[i], p_tokens);
        RETURN QUERY SELECT i, (SELECT m.spent FROM meter_spend m
            WHERE m.scope = p_scopes[i] AND m.period = p_periods[i]);
    END LOOP;
END
$$;

-- Each ledger row names the key's team and the request's end user, for usage by either.
ALTER TABLE ledger ADD COLUMN team TEXT;
ALTER TABLE ledger ADD COLUMN end_user TEXT;
