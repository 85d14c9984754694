#!/usr/bin/env bash
# What the MCP gateway costs a tool call: one FastMCP server (tests/mcp/servers.py, the official
# SDK's), called directly and through the gateway's /mcp, one after the other in one run. The
# gateway (release build) on CPU 0; the server and the load (bench/mcp_load.py, httpx) on CPU 1.
# Prints, at 1 and at $CONC calls in flight, with the client reading event streams (the answer
# relayed as the server streamed it) and JSON only (the stream read to its answer): p50 and p99
# direct and through the gateway, what the gateway adds, and the gateway's own CPU per call
# (every thread's, the log writer's included).
#
#   bench/mcp.sh                 # 3000 calls per run
#   N=1000 CONC=4 bench/mcp.sh
#
# Needs: taskset, the MCP SDK's Python (SWITCHYARD_MCP_PY; tests/mcp/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-3000}
CONC=${CONC:-8}
PY=${SWITCHYARD_MCP_PY:-/var/tmp/switchyard-mcp-venv/bin/python}
KEY=sk-bench-key-000000
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  cargo build --release --quiet --bin switchyard
fi
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}

work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT

taskset -c 1 "$PY" tests/mcp/servers.py --name docs >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "^PORT " "$work/server.log" && break; sleep 0.1; done
port=$(sed -n 's/^PORT //p' "$work/server.log")
direct="http://127.0.0.1:$port/mcp"

cat >"$work/gw.toml" <<TOML
[server]
listen = "127.0.0.1:0"

[log]
sqlite_path = "$work/log.db"

[[keys]]
name = "bench"
key = "$KEY"
mcp = { servers = ["docs"], tools = ["*"] }

[[channels]]
name = "m"
provider = "mock"
models = ["m"]

[[mcp_servers]]
name = "docs"
url = "$direct"
TOML
taskset -c 0 "$BIN" --log-level error serve --config "$work/gw.toml" >"$work/gw.log" 2>&1 &
gw=$!
pids+=($gw)
for _ in $(seq 1 100); do grep -q "switchyard listening on" "$work/gw.log" && break; sleep 0.1; done
gateway="$(grep -o 'http://[0-9.:]*' "$work/gw.log" | head -1)/mcp"

run() { taskset -c 1 "$PY" bench/mcp_load.py "$@"; }
printf '%-6s %-12s %9s %9s %9s %9s %9s %9s %12s\n' conc accept "direct50" "gw50" "added50" "direct99" "gw99" "rps(gw)" "gw cpu/call"
for c in 1 "$CONC"; do
  for accept in "text/event-stream" "application/json"; do
    d=$(run "$direct" "" echo "$N" "$c" "application/json, $accept")
    g=$(run "$gateway" "$KEY" docs__echo "$N" "$c" "$accept" "$gw")
    python3 - "$d" "$g" "$c" "$accept" <<'PY'
import json, sys
d, g = json.loads(sys.argv[1]), json.loads(sys.argv[2])
accept = "sse" if "event-stream" in sys.argv[4] else "json"
print(f"{sys.argv[3]:<6} {accept:<12} {d['p50_us']:>7}µs {g['p50_us']:>7}µs {g['p50_us'] - d['p50_us']:>7}µs "
      f"{d['p99_us']:>7}µs {g['p99_us']:>7}µs {g['rps']:>9} {g['cpu_us_per_call']:>10}µs")
PY
  done
done
