#!/usr/bin/env bash
# What webhooks cost a request: every request fails over (tier 1 refuses connections, its
# breaker off, so each one is a `model.failover` event; folded as configured by default), the
# same gateway on one SQLite store with no webhook (`none`), a webhook whose receiver is dead
# (connection refused: every delivery fails and is retried), and one whose receiver is slow
# (answers after 4 s, near the 5 s timeout), one after the other in one run.
# FOLD=0 turns folding off: every failover is then its own delivery, the worst case.
# Pinned as bench/load.sh is: the gateway on CPU 0, the mock, receiver and wrk on CPU 1.
# Prints, per mode, requests/s and p50 at 1 connection and at $CONNS, the gateway's CPU per
# request, what each adds over `none`, and the events delivered or attempted meanwhile.
#
#   bench/events.sh                      # 10 s per run
#   DURATION=5 CONNS=32 bench/events.sh
#
# Needs: wrk, taskset, python3.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
CONNS=${CONNS:-32}
MOCK_PORT=${MOCK_PORT:-18281}
GW_PORT=${GW_PORT:-18280}
DEAD_PORT=${DEAD_PORT:-18282}
SLOW_PORT=${SLOW_PORT:-18283}
ADMIN=bench-admin-token-0000
# shellcheck source=bench/common.sh
. bench/common.sh

taskset -c 1 "$BIN" --log-level error mock --port "$MOCK_PORT" \
  --text "The quick brown fox jumps over the lazy dog, twice over." --chunks 8 >/dev/null &
pids+=($!)
wait_port "$MOCK_PORT"

# The slow receiver: answers every delivery after 4 s, many at once.
cat >"$work/slow.py" <<'PY'
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        time.sleep(4)
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
taskset -c 1 python3 "$work/slow.py" "$SLOW_PORT" &
pids+=($!)
wait_port "$SLOW_PORT"

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"bench","max_tokens":64,"messages":[{"role":"user","content":"Say something about foxes."}]}'
LUA

config() { # mode -> $work/bench.toml
  rm -f "$work"/store.db*
  gateway_toml bench
  sed -i "s/^\[server\]$/&\nadmin_token = \"$ADMIN\"/" "$work/bench.toml"
  cat >>"$work/bench.toml" <<TOML
priority = 2

[[channels]]
name = "dead-tier"
provider = "openai"
base_url = "http://127.0.0.1:$DEAD_PORT/v1"
models = ["bench"]
priority = 1
circuit_breaker = { enabled = false }

[server.retry_budget]
ratio = 1.0

[store]
url = "sqlite://$work/store.db"

[events]
allow_private_targets = true
fold_seconds = ${FOLD:-10}
TOML
  case "$1" in
    dead) port=$DEAD_PORT ;;
    slow) port=$SLOW_PORT ;;
    *) return ;;
  esac
  printf '\n[[webhooks]]\nname = "ops"\nurl = "http://127.0.0.1:%s/hooks"\nsecret = "whsec_%s"\nevents = ["*"]\n' \
    "$port" "$(head -c 24 /dev/zero | tr '\0' 'w' | base64)" >>"$work/bench.toml"
}

attempts() { # the webhook's delivery attempts recorded so far
  curl -s -H "Authorization: Bearer $ADMIN" "http://127.0.0.1:$GW_PORT/admin/webhooks/ops/deliveries?limit=1000" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("data", [])))' 2>/dev/null || echo 0
}

# Modes alternate, ROUNDS times (the figures are noisy on a shared 2-core machine): the medians.
ROUNDS=${ROUNDS:-3}
: >"$work/rows"
for round in $(seq 1 "$ROUNDS"); do
for mode in none dead slow; do
  config "$mode"
  taskset -c 0 "$BIN" --log-level error serve --config "$work/bench.toml" >/dev/null &
  gw=$!
  wait_port "$GW_PORT"
  taskset -c 1 wrk -t1 -c4 -d2s -s "$work/post.lua" "http://127.0.0.1:$GW_PORT/v1/chat/completions" >/dev/null
  read -r r1 p1 _ < <(wrk_post 1)
  t0=$(cpu_ticks "$gw")
  read -r rn pn n < <(wrk_post "$CONNS")
  t1=$(cpu_ticks "$gw")
  cpu=$(awk -v t="$(( (t1 - t0) * TICK_US ))" -v n="$n" 'BEGIN {printf "%.1f", t / n}')
  seen=$( [ "$mode" = none ] && echo 0 || attempts )
  echo "$mode $r1 $p1 $rn $pn $cpu $seen $round" >>"$work/rows"
  kill "$gw"
  wait "$gw" 2>/dev/null || true
done
done

python3 - "$work/rows" "$CONNS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for mode in ("none", "dead", "slow"):
    got = [list(map(float, r[1:7])) for r in rows if r[0] == mode]
    med[mode] = [statistics.median(c) for c in zip(*got)]
c = sys.argv[2]
print(f"{'mode':5} | {'rps c=1':>9} {'p50 us':>9} | {'rps c='+c:>9} {'p50 us':>9} {'cpu us/req':>11} | {'added p50 us':>13} {'added cpu us':>13} | {'attempts':>9}")
for mode, m in med.items():
    b = med["none"]
    print(f"{mode:5} | {m[0]:9.0f} {m[1]:9.0f} | {m[2]:9.0f} {m[3]:9.0f} {m[4]:11.1f} | {m[1]-b[1]:13.0f} {m[4]-b[4]:13.1f} | {m[5]:9.0f}")
print(f"(medians of {len(rows) // 3} rounds; attempts: delivery attempts recorded during a round)")
PY
