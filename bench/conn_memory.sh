#!/usr/bin/env bash
# What an open client connection holds in the gateway: N keep-alive connections opened and left
# idle, then one non-stream request on each (200 at a time), the gateway's RSS read after each
# stage. A warm-up pass of 200 connections first (served, then closed), so the figures are
# memory kept per connection rather than what the first requests warmed (pools, caches, the
# log writer). While the N connections idle, one request on a fresh connection is timed: a
# gateway holding many idle clients must still answer at once.
#
#   bench/conn_memory.sh              # CONNS=2000
#   CONNS=10000 bench/conn_memory.sh  # issue 22's 10,000 idle connections
#
# Loopback only; stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-2000}
MOCK_PORT=${MOCK_PORT:-18291}
GW_PORT=${GW_PORT:-18290}
# shellcheck source=bench/common.sh
. bench/common.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

taskset -c 1 "$BIN" --log-level error mock --port "$MOCK_PORT" >/dev/null &
pids+=($!)
gateway_toml bench
taskset -c 0 "$BIN" --log-level error serve --config "$work/bench.toml" >/dev/null &
gw=$!
pids+=($gw)
wait_port "$MOCK_PORT"
wait_port "$GW_PORT"

cat >"$work/conns.py" <<'PY'
import asyncio, re, sys, time
n, port, pid, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rss():
    return int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1))
body = b'{"model":"bench","stream":false,"messages":[{"role":"user","content":"hi"}]}'
req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
async def one(r, w, sem):
    async with sem:
        w.write(req)
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        await r.readexactly(int(re.search(rb"content-length: (\d+)", head, re.I).group(1)))
async def main():
    base = rss()
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]
    await asyncio.sleep(1)
    idle = rss()
    t0 = time.perf_counter()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    await one(r, w, asyncio.Semaphore(1))
    fresh_ms = (time.perf_counter() - t0) * 1000
    w.close()
    sem = asyncio.Semaphore(200)
    await asyncio.gather(*(one(r, w, sem) for r, w in conns))
    await asyncio.sleep(1)
    used = rss()
    print(f"{n:6d} | {base / 1024:9.1f} | {(idle - base) / n:9.1f} | {(used - base) / n:12.1f} | {fresh_ms:9.2f}")
    for _, w in conns:
        w.close()
    await asyncio.sleep(1)
asyncio.run(main())
PY

python3 "$work/conns.py" 200 "$GW_PORT" "$gw" "$KEY" >/dev/null
printf '%6s | %9s | %9s | %12s | %9s\n' conns "RSS MB" "idle KiB" "served KiB" "fresh ms"
python3 "$work/conns.py" "$CONNS" "$GW_PORT" "$gw" "$KEY"
