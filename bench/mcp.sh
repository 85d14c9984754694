#!/usr/bin/env bash
# What the MCP gateway costs a tool call: one FastMCP server (tests/mcp/servers.py, the official
# SDK's), called directly and through the gateway's /mcp, one after the other in one run. The
# gateway (release build) on CPU 0; the server and the load (bench/mcp_load.py, httpx) on CPU 1.
# Prints, at 1 and at $CONC calls in flight, with the client reading event streams and JSON
# only: p50 and p99 direct and through the gateway, what the gateway adds, and the gateway's
# own CPU per call (every thread's, the log writer's included): as measured, and net of what
# the gateway spends idle (its timers, the prober; measured for 2 s before each run); and, as
# the baseline, the same for a chat completion through the same gateway at the same
# concurrency (a mock channel that answers in 3 ms, about what the MCP server takes).
#
#   bench/mcp.sh                 # 3000 calls per run
#   N=1000 CONC=4 bench/mcp.sh
#
# Then the gateway alone, at a rate the Python server cannot give: the mock's own MCP server
# (Rust, JSON answers) loaded by wrk for $DURATION s at $WRK_CONNS connections, direct and
# through the gateway, and a chat completion to the mock through the same gateway beside it:
# requests per second, p50, and the gateway's CPU per call (net of idle).
#
# Needs: taskset, wrk, the MCP SDK's Python (SWITCHYARD_MCP_PY; tests/mcp/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-3000}
CONC=${CONC:-8}
DURATION=${DURATION:-10}
WRK_CONNS=${WRK_CONNS:-32}
PY=${SWITCHYARD_MCP_PY:-/var/tmp/switchyard-mcp-venv/bin/python}
KEY=sk-bench-key-000000
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  cargo build --release --quiet --bin switchyard
fi
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}

work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT

# A stateless server that answers as JSON: the quickest the SDK serves, so the run measures
# the gateway, not the server.
taskset -c 1 "$PY" tests/mcp/servers.py --name docs --json >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "^PORT " "$work/server.log" && break; sleep 0.1; done
port=$(sed -n 's/^PORT //p' "$work/server.log")
direct="http://127.0.0.1:$port/mcp"

taskset -c 1 "$BIN" --log-level error mock --port 0 >"$work/mock.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "listening on" "$work/mock.log" && break; sleep 0.1; done
mock=$(grep -o 'http://[0-9.:]*' "$work/mock.log" | head -1)

cat >"$work/gw.toml" <<TOML
[server]
listen = "127.0.0.1:0"

[log]
sqlite_path = "$work/log.db"

[[keys]]
name = "bench"
key = "$KEY"
mcp = { servers = ["docs", "mock"], tools = ["*"] }

# The baseline: a chat completion whose upstream takes about what the MCP server does.
[[channels]]
name = "m"
provider = "mock"
models = ["m"]
mock = { text = "hello", chunks = 1, ttft_ms = 3 }

[[mcp_servers]]
name = "docs"
url = "$direct"

[[mcp_servers]]
name = "mock"
url = "$mock/mcp"

[[channels]]
name = "fast"
provider = "openai"
base_url = "$mock/v1"
api_keys = ["sk-mock"]
models = ["fast"]
TOML
taskset -c 0 "$BIN" --log-level error serve --config "$work/gw.toml" >"$work/gw.log" 2>&1 &
gw=$!
pids+=($gw)
for _ in $(seq 1 100); do grep -q "switchyard listening on" "$work/gw.log" && break; sleep 0.1; done
gateway="$(grep -o 'switchyard listening on http://[0-9.:]*' "$work/gw.log" | head -1 | sed 's/.* //')/mcp"

run() { taskset -c 1 "$PY" bench/mcp_load.py "$@"; }
printf '%-6s %-6s %9s %9s %9s %9s %9s %8s %10s %10s %9s\n' conc accept "direct50" "gw50" "added50" "direct99" "gw99" "rps(gw)" "cpu/call" "net/call" "idle/s"
for c in 1 "$CONC"; do
  for accept in "text/event-stream" "application/json"; do
    d=$(run "$direct" "" echo "$N" "$c" "application/json, text/event-stream")
    g=$(run "$gateway" "$KEY" docs__echo "$N" "$c" "$accept" "$gw")
    if [ "$accept" = "application/json" ]; then
      k=$(run "${gateway%/mcp}/v1/chat/completions" "$KEY" @chat "$N" "$c" "application/json" "$gw")
    else
      k=null
    fi
    python3 - "$d" "$g" "$c" "$accept" "$k" <<'PY'
import json, sys
d, g, k = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[5])
accept = "sse" if "event-stream" in sys.argv[4] else "json"
print(f"{sys.argv[3]:<6} {accept:<6} {d['p50_us']:>7}µs {g['p50_us']:>7}µs {g['p50_us'] - d['p50_us']:>7}µs "
      f"{d['p99_us']:>7}µs {g['p99_us']:>7}µs {g['rps']:>8} {g['cpu_us_per_call']:>8}µs {g['net_cpu_us_per_call']:>8}µs "
      f"{g['idle_cpu_ms_per_s']:>6}ms")
if k:
    print(f"{sys.argv[3]:<6} {'chat':<6} {'':>9} {k['p50_us']:>7}µs {'':>9} {'':>9} {k['p99_us']:>7}µs {k['rps']:>8} "
          f"{k['cpu_us_per_call']:>8}µs {k['net_cpu_us_per_call']:>8}µs {k['idle_cpu_ms_per_s']:>6}ms")
PY
  done
done

# ---- the gateway alone: the mock's MCP server, wrk ------------------------------------------
session() { # url, key: a session's id (none for the stateless mock)
  curl -s -D - -o /dev/null -X POST "$1" -H "authorization: Bearer $2" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}' |
    tr -d '\r' | sed -n 's/^mcp-session-id: //Ip'
}
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
wrk_lua() { # body, session id
  local sid_line=""
  [ -n "${2:-}" ] && sid_line="wrk.headers[\"mcp-session-id\"] = \"$2\""
  cat >"$work/req.lua" <<LUA
wrk.method = "POST"
wrk.body = '$1'
wrk.headers["content-type"] = "application/json"
wrk.headers["accept"] = "application/json"
wrk.headers["authorization"] = "Bearer $KEY"
$sid_line
LUA
}
load() { # label, url, body, session
  wrk_lua "$3" "${4:-}"
  taskset -c 1 wrk -t1 -c"$WRK_CONNS" -d2s -s "$work/req.lua" "$2" >/dev/null # warm up
  local idle0 idle1 before after out
  idle0=$(cpu_ns "$gw"); sleep 2; idle1=$(cpu_ns "$gw")
  before=$(cpu_ns "$gw")
  out=$(taskset -c 1 wrk -t1 -c"$WRK_CONNS" -d"${DURATION}s" --latency -s "$work/req.lua" "$2")
  after=$(cpu_ns "$gw")
  python3 - "$1" "$out" "$before" "$after" "$idle0" "$idle1" "$DURATION" <<'PY'
import re, sys
label, out, before, after, i0, i1, dur = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:8])
reqs = int(re.search(r"(\d+) requests in", out).group(1))
p50 = re.search(r"50%\s+(\S+)", out).group(1)
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
net = (after - before) - (i1 - i0) / 2 * dur
print(f"{label:<28} {reqs / dur:>9.0f} req/s  p50 {p50:>8}  gateway CPU {(after - before) / reqs / 1000:>6.1f} µs/call, "
      f"net of idle {net / reqs / 1000:>6.1f} µs" + (f"  NON-2xx {errs.group(1)}" if errs else ""))
PY
}
echo
echo "the gateway alone: wrk -c$WRK_CONNS for ${DURATION}s, the mock's MCP server (Rust) behind it"
call='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"mock__echo","arguments":{"text":"hello"}}}'
direct_call='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'
chat='{"model":"fast","messages":[{"role":"user","content":"hello"}]}'
load "direct: tools/call" "$mock/mcp" "$direct_call"
load "gateway: tools/call" "$gateway" "$call" "$(session "$gateway" "$KEY")"
load "gateway: chat completion" "${gateway%/mcp}/v1/chat/completions" "$chat"
