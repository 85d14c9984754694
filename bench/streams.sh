#!/usr/bin/env bash
# Many long-lived streams at once: N concurrent clients, each streaming a ~1 s answer (20 chunks
# 50 ms apart after a 100 ms first token) through the gateway, against the mock hit directly in
# the same run. Reports streams/s, time per stream (vs the 1.05 s the mock takes), errors, the
# gateway's resident memory at full load and its CPU use.
#
#   bench/streams.sh                    # STREAMS="500 2000", 15 s each
#   STREAMS="4000" DURATION=20 bench/streams.sh
#   STREAMS=10000 TTFT_MS=100 CHUNK_MS=500 DURATION=30 bench/streams.sh   # a slower cadence (a
#                                       # chunk every 500 ms for 10 s), so the direct run keeps up
#   UPSTREAM_HTTP2=1 STREAMS=10000 …    # the channel on HTTP/2: one upstream connection, not
#                                       # 10,000 (which, with the clients', pass 20,000 files)
#
# "KiB/stream" is the gateway's resident memory at full load less its memory before the load,
# divided by the streams open.
#
# Gateway on CPU 0; mock and wrk on CPU 1. Loopback only; stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

STREAMS=${STREAMS:-"500 2000"}
DURATION=${DURATION:-15}
TTFT_MS=${TTFT_MS:-100}
CHUNK_MS=${CHUNK_MS:-50}
CHUNKS=${CHUNKS:-20}
MOCK_PORT=${MOCK_PORT:-18083}
GW_PORT=${GW_PORT:-18082}
# shellcheck source=bench/common.sh
. bench/common.sh
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

taskset -c 1 "$BIN" --log-level error mock --port "$MOCK_PORT" --ttft-ms "$TTFT_MS" --chunk-ms "$CHUNK_MS" --chunks "$CHUNKS" \
  --text "Streams stay open for about a second, one small chunk every fifty milliseconds, like tokens." >/dev/null &
pids+=($!)
LOG_EXTRA="queue_capacity = 65536" gateway_toml bench
# The upstream side over HTTP/2 (h2c): a few connections instead of a socket a stream, so
# 10,000 streams fit this machine's 20,000 open files.
[ "${UPSTREAM_HTTP2:-0}" = 1 ] && echo "http2 = true" >>"$work/bench.toml"
taskset -c 0 "$BIN" --log-level error serve --config "$work/bench.toml" >/dev/null &
gw=$!
pids+=($gw)
wait_port "$MOCK_PORT"
wait_port "$GW_PORT"

cat >"$work/s.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"bench","stream":true,"messages":[{"role":"user","content":"Tell me a long story."}]}'
LUA

to_ms() {
  awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) print n / 1000; else if (v ~ /ms$/) print n; else if (v ~ /s$/) print n * 1000; else print n }'
}
hz=$(getconf CLK_TCK)

run() { # url conns -> "streams/s p50_ms p99_ms errors"
  local out
  out=$(taskset -c 1 wrk -t1 -c"$2" -d"${DURATION}s" --timeout 30s --latency -s "$work/s.lua" "$1")
  local rps p50 p99 errs
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx or 3xx responses:/ {n += $5} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' <<<"$out")
  echo "$rps $(to_ms "$p50") $(to_ms "$p99") $errs"
}

printf '%7s | %11s %8s %8s %6s | %11s %8s %8s %6s | %10s %10s %9s\n' \
  streams "direct s/s" "p50 ms" "p99 ms" errors "gw s/s" "p50 ms" "p99 ms" errors "gw RSS MB" "KiB/stream" "gw CPU %"
for n in $STREAMS; do
  read -r drps dp50 dp99 derr < <(run "http://127.0.0.1:$MOCK_PORT/v1/chat/completions" "$n")
  idle=$(awk '/^VmRSS:/ {print $2}' "/proc/$gw/status")
  t0=$(cpu_ticks "$gw")
  # Sample the gateway's memory while the load is at full height.
  ( sleep $((DURATION / 2)); awk '/^VmRSS:/ {print $2}' "/proc/$gw/status" >"$work/rss" ) &
  sampler=$!
  read -r grps gp50 gp99 gerr < <(run "http://127.0.0.1:$GW_PORT/v1/chat/completions" "$n")
  wait "$sampler"
  t1=$(cpu_ticks "$gw")
  rss=$(cat "$work/rss")
  awk -v n="$n" -v dr="$drps" -v d5="$dp50" -v d9="$dp99" -v de="$derr" -v gr="$grps" -v g5="$gp50" -v g9="$gp99" -v ge="$gerr" \
      -v rss="$rss" -v idle="$idle" -v dt="$((t1 - t0))" -v hz="$hz" -v dur="$DURATION" 'BEGIN {
    printf "%7d | %11.0f %8.0f %8.0f %6d | %11.0f %8.0f %8.0f %6d | %10.1f %10.1f %9.0f\n", n, dr, d5, d9, de, gr, g5, g9, ge, rss / 1024, (rss - idle) / n, 100 * dt / hz / dur
  }'
done
