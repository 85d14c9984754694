#!/usr/bin/env bash
# What admission and settle cost per request: the same gateway in front of `switchyard mock`
# with a priced channel and no limits (`none`), then with a key budget + rpm + max_concurrency
# counted in memory, in Redis ([state] url), and in a PostgreSQL store (against `pg-none`, the
# same store without limits: its request log and ledger go to PostgreSQL too), one after the
# other in one run.
# Pinned as bench/load.sh is: the gateway on CPU 0, the mock and wrk on CPU 1. Prints, per
# mode, requests/s, p50 and the gateway's own time at 1 connection, requests/s and p50 at
# $CONNS, the gateway's CPU per request, and what each adds over `none`.
#
#   bench/budgets.sh                     # 10 s per run
#   DURATION=5 CONNS=32 bench/budgets.sh
#
# Needs: wrk, taskset, and Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (trust
# auth) as .ci/run leaves them; a scratch database is made and dropped.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
CONNS=${CONNS:-32}
MOCK_PORT=${MOCK_PORT:-18181}
GW_PORT=${GW_PORT:-18180}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
# shellcheck source=bench/common.sh
. bench/common.sh

db="sy_bench_$$"
psql "$PG/postgres" -qc "CREATE DATABASE $db" >/dev/null
trap 'cleanup; psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
master=$(head -c 32 /dev/zero | tr '\0' 'k' | base64)

taskset -c 1 "$BIN" --log-level error mock --port "$MOCK_PORT" \
  --text "The quick brown fox jumps over the lazy dog, twice over." --chunks 8 >/dev/null &
pids+=($!)
wait_port "$MOCK_PORT"

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"bench","max_tokens":64,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say something about foxes."}]}'
LUA

config() { # mode -> $work/bench.toml
  gateway_toml bench
  echo 'price = { input = 1, output = 1 }' >>"$work/bench.toml"
  if [ "$1" = pg-none ] || [ "$1" = postgres ]; then
    printf '\n[store]\nurl = "%s/%s"\nmaster_key = "%s"\n' "$PG" "$db" "$master" >>"$work/bench.toml"
  fi
  if [ "$1" = none ] || [ "$1" = pg-none ]; then return; fi
  sed -i "s/^key = \"$KEY\"$/&\nbudget = { usd = 1000000, period = \"month\" }\nrpm = 100000000\nmax_concurrency = 100000/" "$work/bench.toml"
  case "$1" in
    redis) printf '\n[state]\nurl = "redis://127.0.0.1:6379"\nprefix = "sy-bench-%s"\n' "$$" >>"$work/bench.toml" ;;
  esac
}

# "own us": the gateway's own time per request at c=1 as its overhead histogram says; its
# "added own us" is to be set beside "added p50 us" (the histogram moves with the latency).
printf '%-9s | %9s %9s %9s | %9s %9s %11s | %13s %13s %13s\n' mode "rps c=1" "p50 us" "own us" "rps c=$CONNS" "p50 us" "cpu us/req" "added p50 us" "added cpu us" "added own us"
for mode in none memory redis pg-none postgres; do
  config "$mode"
  taskset -c 0 "$BIN" --log-level error serve --config "$work/bench.toml" >/dev/null &
  gw=$!
  wait_port "$GW_PORT"
  taskset -c 1 wrk -t1 -c4 -d2s -s "$work/post.lua" "http://127.0.0.1:$GW_PORT/v1/chat/completions" >/dev/null
  o0=$(own_time "$GW_PORT" false)
  read -r r1 p1 _ < <(wrk_post 1)
  own=$(own_us "$o0" "$(own_time "$GW_PORT" false)")
  t0=$(cpu_ticks "$gw")
  read -r rn pn n < <(wrk_post "$CONNS")
  t1=$(cpu_ticks "$gw")
  cpu=$(awk -v t="$(( (t1 - t0) * TICK_US ))" -v n="$n" 'BEGIN {printf "%.1f", t / n}')
  # Each mode against its baseline: the same log backend without limits.
  if [ "$mode" = none ] || [ "$mode" = pg-none ]; then base_p1=$p1; base_cpu=$cpu; base_own=$own; fi
  awk -v m="$mode" -v r1="$r1" -v p1="$p1" -v rn="$rn" -v pn="$pn" -v cpu="$cpu" -v bp="$base_p1" -v bc="$base_cpu" \
    -v own="$own" -v bo="$base_own" 'BEGIN {
    printf "%-9s | %9.0f %9.0f %9.1f | %9.0f %9.0f %11.1f | %13.0f %13.1f %13.1f\n", m, r1, p1, own, rn, pn, cpu, p1 - bp, cpu - bc, own - bo
  }'
  kill "$gw"
  wait "$gw" 2>/dev/null || true
done
