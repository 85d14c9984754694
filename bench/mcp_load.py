"""Load for bench/mcp.sh: one MCP session, then N tools/call of `echo`, C at a time, and what
they took; with a process id, the CPU that process spent meanwhile (every thread's, from
/proc/<pid>/task/*/schedstat, in ns).

    python mcp_load.py URL KEY TOOL N C ACCEPT [PID]

TOOL `@chat` sends chat completions (model `m`) to URL instead, the baseline a tool call is
compared with.

Prints one JSON line: p50 and p99 in µs, requests per second, and the process's CPU per call.
"""

import asyncio
import glob
import json
import socket
import sys
import time

import httpx

url, key, tool, n, conc, accept = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
pid = sys.argv[7] if len(sys.argv) > 7 else None


def cpu_ns():
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(f).read().split()[0])
        except OSError:
            pass
    return total


async def main():
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    # Without TCP_NODELAY httpx's request waits ~40 ms on the server's delayed ACK.
    nodelay = httpx.AsyncHTTPTransport(limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    async with httpx.AsyncClient(timeout=30, transport=nodelay) as c:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
        chat = tool == "@chat"
        r = await c.post(url, headers=headers, json=init) if not chat else None
        if r is not None:
            r.raise_for_status()
        if r is not None and "mcp-session-id" in r.headers:  # a stateless server keeps none
            headers["mcp-session-id"] = r.headers["mcp-session-id"]
        if not chat:
            await c.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        headers["accept"] = accept
        latencies = []

        async def one(i):
            body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": tool, "arguments": {"text": "hello"}}}
            if chat:  # the baseline: a chat completion through the same gateway
                body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
            t = time.perf_counter()
            r = await c.post(url, headers=headers, json=body)
            text = r.text
            latencies.append(time.perf_counter() - t)
            assert r.status_code == 200 and '"hello"' in text, (r.status_code, text[:200])

        async def run(count, start):
            nxt = iter(range(start, start + count))

            async def worker():
                for i in nxt:
                    await one(i)

            await asyncio.gather(*(worker() for _ in range(conc)))

        await run(200, 1)  # warm up: connections, the lists, the allocator
        latencies.clear()
        # What the process spends idle (its timers, the prober, the log writer's ticks), to
        # take out of what it spends under load.
        idle0 = cpu_ns() if pid else 0
        await asyncio.sleep(2)
        idle_rate = (cpu_ns() - idle0) / 2 if pid else 0
        before = cpu_ns() if pid else 0
        t0 = time.perf_counter()
        await run(n, 1000)
        wall = time.perf_counter() - t0
        spent = cpu_ns() - before if pid else 0
        net = spent - idle_rate * wall
    latencies.sort()
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e6
    print(json.dumps({"n": n, "c": conc, "p50_us": round(q(0.5)), "p99_us": round(q(0.99)),
                      "rps": round(n / wall), "cpu_us_per_call": round(spent / n / 1000, 1) if pid else None,
                      "net_cpu_us_per_call": round(net / n / 1000, 1) if pid else None,
                      "idle_cpu_ms_per_s": round(idle_rate / 1e6, 2) if pid else None}))


asyncio.run(main())
