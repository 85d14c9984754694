#!/usr/bin/env bash
# The console's request log at scale: fills the SQLite request log with ROWS rows (default
# 1,000,000; spread over 30 days, 4 keys, 6 models, 5 channels, 1 in 20 failed over, 1 in 10
# test traffic), starts the gateway on it, and times `GET /admin/requests` (what the log page
# calls) for the first page, a deep page (the cursor of the row 90 % of the way back), and
# filtered first and deep pages; and `GET /admin/stats` (the performance page) over an hour and
# over 7 days. Each figure is the median of REPEAT calls, in ms, measured
# with curl against a release build.
#
#   bash bench/console_log.sh                 # 1M rows (about a minute to fill)
#   ROWS=10000 bash bench/console_log.sh      # the CI size
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
REPEAT=${REPEAT:-7}
GW_PORT=${GW_PORT:-18930}
ADMIN=bench-admin-token-0123456789

if [ -z "${SWITCHYARD_BIN:-}" ]; then cargo build --release --quiet; fi
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT

cat >"$work/gw.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
admin_token = "$ADMIN"

[log]
sqlite_path = "$work/log.db"

[[keys]]
name = "bench"
key = "sk-bench-key-000000"

[[channels]]
name = "mock"
provider = "mock"
models = ["m"]
TOML

start() {
  "$BIN" serve --config "$work/gw.toml" >"$work/gw.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do
    curl -sf "http://127.0.0.1:$GW_PORT/healthz" >/dev/null && return 0
    sleep 0.05
  done
  echo "the gateway did not start" >&2; cat "$work/gw.log" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# The gateway makes the schema (and its indexes); the rows go in while it is stopped.
start; stop
fill_started=$SECONDS
python3 - "$work/log.db" "$ROWS" <<'PY'
import random, sqlite3, sys, time
path, n = sys.argv[1], int(sys.argv[2])
db = sqlite3.connect(path)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=OFF")
now = int(time.time() * 1000)
span = 30 * 86_400_000
keys = ["team-a", "team-b", "ci", "batch"]
models = ["gpt-4o", "gpt-4o-mini", "claude-sonnet", "gemini-pro", "auto", "llama"]
channels = ["openai", "azure", "anthropic", "gemini", "vllm"]
rnd = random.Random(7)
ok = '[{"channel":"%s","model":"%s","status":200,"reason":"ok","latency_ms":%d}]'
fo = ('[{"channel":"%s","model":"%s","status":500,"reason":"server_error","latency_ms":%d},'
      '{"channel":"%s","model":"%s","status":200,"reason":"ok","latency_ms":%d}]')
def rows():
    for i in range(n):
        ts = now - span + (span * i) // n
        m, ch = rnd.choice(models), rnd.choice(channels)
        failed = i % 20 == 0
        att = fo % (rnd.choice(channels), m, 30, ch, m, 400) if failed else ok % (ch, m, 400)
        yield (f"req_{ts:x}{i:06x}", ts, rnd.choice(keys), "chat.completions", m, m, ch,
               200, "ok", att, i % 3 == 0, 450, 120, 50, 200, 40.0, 2 if failed else 1,
               1 if i % 10 == 0 else 0, 1200)
db.executemany(
    "INSERT INTO requests (id, ts_ms, key_name, endpoint, requested_model, served_model, channel,"
    " status, outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens,"
    " tokens_per_s, attempt_count, test, cost_micros)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows())
db.commit()
db.execute("ANALYZE")
db.close()
PY
echo "filled $ROWS rows in $((SECONDS - fill_started)) s ($(du -h "$work/log.db" | cut -f1))"
start

# The median of REPEAT timed calls of a path (a log query unless it starts with /), in ms.
timed() {
  local q=$1 t=()
  [ "${q:0:1}" = / ] || q="/admin/requests?$q"
  for _ in $(seq 1 "$REPEAT"); do
    t+=("$(curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $ADMIN" \
      "http://127.0.0.1:$GW_PORT$q")")
  done
  printf '%s\n' "${t[@]}" | sort -n | awk '{ a[NR] = $1 } END { printf "%.1f", a[int((NR + 1) / 2)] * 1000 }'
}

# The cursor of the row 90 % of the way back: the last row of a page that ends there.
deep=$(python3 - "$work/log.db" "$ROWS" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
n = int(sys.argv[2])
ts, rowid, rid = db.execute(
    "SELECT ts_ms, rowid, id FROM requests ORDER BY ts_ms DESC, rowid DESC LIMIT 1 OFFSET ?",
    (int(n * 0.9),)).fetchone()
print(f"{ts}-{rowid} {rid}")
PY
)
deep_id=${deep#* }
deep=${deep% *}
count=$(curl -s -H "Authorization: Bearer $ADMIN" "http://127.0.0.1:$GW_PORT/admin/requests?limit=50&before=$deep" \
  | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["data"]))')
[ "$count" = 50 ] || { echo "the deep page has $count rows, not 50" >&2; exit 1; }

printf '%-44s %10s\n' "GET /admin/requests (limit=50), $ROWS rows" "median ms"
printf '%-44s %10s\n' "first page" "$(timed 'limit=50')"
printf '%-44s %10s\n' "deep page (90 % back)" "$(timed "limit=50&before=$deep")"
printf '%-44s %10s\n' "first page, hide_test" "$(timed 'limit=50&hide_test=true')"
printf '%-44s %10s\n' "first page, key=ci" "$(timed 'limit=50&key=ci')"
printf '%-44s %10s\n' "deep page, key=ci" "$(timed "limit=50&key=ci&before=$deep")"
printf '%-44s %10s\n' "first page, channel=vllm&failed_over" "$(timed 'limit=50&channel=vllm&failed_over=true')"
printf '%-44s %10s\n' "one request by id" "$(timed "id=$deep_id")"
printf '%-44s %10s\n' "GET /admin/stats, last hour" "$(timed '/admin/stats?window=3600')"
printf '%-44s %10s\n' "GET /admin/stats, last 7 days (100k newest)" "$(timed '/admin/stats?window=604800')"
