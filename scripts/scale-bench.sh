#!/usr/bin/env bash
# What one Redis node and one PostgreSQL server sustain of the gateway's own shared-state
# operations, on this machine: redis-benchmark running the budget admission script (the one in
# src/spend/redis.rs, with keys of its shape) and plain GET/SET for scale; pgbench running
# switchyard_admit + switchyard_settle (migration 0005), one request's worth per transaction.
# Each on one hot scope (every request of one key) and spread over 1000 scopes. docs/scale.md
# quotes its output.
#
#   scripts/scale-bench.sh             # 100k Redis ops per run, 10 s per pgbench run
#   N=50000 SECS=5 scripts/scale-bench.sh
#
# Needs: redis-benchmark, redis-cli, pgbench, psql; Redis on 127.0.0.1:6379 and PostgreSQL on
# 127.0.0.1:5432 (trust auth). A scratch database is made and dropped; Redis keys go under a
# fresh prefix and are deleted.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-100000}
SECS=${SECS:-10}
CONNS=${CONNS:-32}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
prefix="sy-scale-$$"
db="sy_scale_$$"
work=$(mktemp -d)
cleanup() {
  redis-cli --scan --pattern "$prefix:*" | xargs -r -n 500 redis-cli del >/dev/null || true
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The final figure of redis-benchmark -q ("...: 79051.38 requests per second, p50=...").
rps() { tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1; }

echo "# Redis ($(redis-server --version | awk '{print $3}')), $N operations, $CONNS connections"
printf '%-44s %12s\n' operation ops/s
for cmd in "SET $prefix:k v" "GET $prefix:k"; do
  printf '%-44s %12s\n' "${cmd%% *}" "$(redis-benchmark -q -n "$N" -c "$CONNS" $cmd | rps)"
done
python3 - "$work/admit.lua" <<'PY'
import re, sys
src = open("src/spend/redis.rs").read()
open(sys.argv[1], "w").write(re.search(r'const ADMIT: &str = r#"(.*?)"#;', src, re.S).group(1))
PY
sha=$(redis-cli script load "$(cat "$work/admit.lua")")
admit() { # scope pattern -> ops/s of the admission script on that scope
  local b="$prefix:{$1}"
  redis-benchmark -q -n "$N" -c "$CONNS" -r 100000000 \
    EVALSHA "$sha" 6 "$b:meta" "$b:holds" "$b:expiry" "$b:window" "$b:spent:m202612" "$b:wtokens" \
    __rand_int__ 10 10 600000 1000000000000 -1 100000000 -1 86400000 | rps
}
printf '%-44s %12s\n' "budget+rpm admission, one hot key" "$(admit key:hot)"
printf '%-44s %12s\n' "budget+rpm admission, random keys" "$(admit 'key:__rand_int__')"

echo
echo "# PostgreSQL ($(psql "$PG/postgres" -tAc 'SHOW server_version')), ${SECS} s, $CONNS clients"
psql "$PG/postgres" -qc "CREATE DATABASE $db" >/dev/null
psql "$PG/$db" -q -f migrations/postgres/0005_meters.sql >/dev/null
cat >"$work/request.sql" <<'SQL'
\set id random(1, 9000000000000000)
\set s random(1, :scopes)
SELECT * FROM switchyard_admit('key:' || :s, :id, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'm202612', 10, 10, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 600000, 1000000000000, -1, 100000000, -1);
SELECT switchyard_settle('key:' || :s, :id, 'm202612', 10, 10);
SQL
printf '%-44s %12s\n' operation "requests/s"
for scopes in 1 1000; do
  out=$(pgbench -n -c "$CONNS" -j 2 -T "$SECS" -D scopes="$scopes" -f "$work/request.sql" "$PG/$db" 2>&1)
  tps=$(awk '/^tps = / {print int($3)}' <<<"$out")
  printf '%-44s %12s\n' "admit + settle, $([ "$scopes" = 1 ] && echo 'one hot key' || echo "$scopes keys")" "$tps"
done
