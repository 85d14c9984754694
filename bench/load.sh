#!/usr/bin/env bash
# Load benchmark: the gateway in front of `switchyard mock`, and the mock hit directly, in one run.
# Pinned with taskset: the gateway on CPU 0 (GW_CPU); the mock and the load generator (wrk) on CPU 1.
# Prints requests/s and p50/p99 latency for both, and what the gateway adds.
#
#   bench/load.sh                       # defaults: 10 s per run, concurrency 1 16 64
#   DURATION=5 CONCURRENCY="1 32" bench/load.sh
#
# Needs: wrk (apt-get install wrk), taskset (util-linux). Loopback only; stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
CONCURRENCY=${CONCURRENCY:-"1 16 64"}
MOCK_PORT=${MOCK_PORT:-18081}
GW_PORT=${GW_PORT:-18080}
# CPU for the gateway. GW_CPU=1 puts it beside the mock and wrk: no cross-core wake-ups, which
# separates the gateway's own cost from the VM's cost of waking an idle core.
GW_CPU=${GW_CPU:-0}
# shellcheck source=bench/common.sh
. bench/common.sh

taskset -c 1 "$BIN" --log-level error mock --port "$MOCK_PORT" \
  --text "The quick brown fox jumps over the lazy dog, twice over." --chunks 8 >/dev/null &
pids+=($!)

gateway_toml bench
taskset -c "$GW_CPU" "$BIN" --log-level error serve --config "$work/bench.toml" >/dev/null &
gw_pid=$!
pids+=($gw_pid)
wait_port "$MOCK_PORT"
wait_port "$GW_PORT"

for stream in false true; do
  cat >"$work/post_$stream.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"bench","stream":$stream,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say something about foxes."}]}'
LUA
done


# The gateway's CPU time so far, in clock ticks: user and system (the kernel's share: syscalls,
# and on a VM the cost of waking a core that went idle, which dwarfs the gateway's own work when
# it waits on a load generator or mock on another core).
cpu_ticks() { awk '{print $14, $15}' "/proc/$gw_pid/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

run() { # url lua conns -> "rps p50_us p99_us requests"
  local out
  out=$(taskset -c 1 wrk -t1 -c"$3" -d"${DURATION}s" --latency -s "$2" "$1")
  local rps p50 p99 errs n
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx or 3xx responses:/ {print $5} /Socket errors/ {print "socket-errors"}' <<<"$out")
  if [ -n "$errs" ]; then echo "errors in run against $1: $errs" >&2; echo "$out" >&2; fi
  echo "$rps $(to_us "$p50") $(to_us "$p99") $n"
}

# The last columns: the gateway's CPU per request, steadier than rps on a noisy VM (compare
# builds by it), and its own time per request as its overhead histogram says (the mean over the
# run), to set beside the added latency measured from outside.
printf '%-10s %5s | %10s %9s %9s | %10s %9s %9s | %12s %12s %8s %11s %9s %9s %11s\n' \
  mode conns "direct rps" "p50 us" "p99 us" "gw rps" "p50 us" "p99 us" "added p50us" "added p99us" "rps ratio" "gw cpu us/r" "user" "sys" "own us/r"
for stream in false true; do
  mode=$([ "$stream" = true ] && echo stream || echo non-stream)
  for c in $CONCURRENCY; do
    read -r drps dp50 dp99 _ < <(run "http://127.0.0.1:$MOCK_PORT/v1/chat/completions" "$work/post_$stream.lua" "$c")
    read -r os0 on0 < <(own_time "$GW_PORT" "$stream")
    read -r u0 k0 < <(cpu_ticks)
    read -r grps gp50 gp99 gn < <(run "http://127.0.0.1:$GW_PORT/v1/chat/completions" "$work/post_$stream.lua" "$c")
    read -r u1 k1 < <(cpu_ticks)
    read -r os1 on1 < <(own_time "$GW_PORT" "$stream")
    awk -v m="$mode" -v c="$c" -v dr="$drps" -v d5="$dp50" -v d9="$dp99" -v gr="$grps" -v g5="$gp50" -v g9="$gp99" \
      -v user="$(( (u1 - u0) * TICK_US ))" -v sys="$(( (k1 - k0) * TICK_US ))" \
      -v n="$gn" -v os="$os0 $os1" -v on="$on0 $on1" 'BEGIN {
      split(os, s); split(on, k); own = (k[2] > k[1]) ? (s[2] - s[1]) / (k[2] - k[1]) * 1e6 : 0
      printf "%-10s %5d | %10.0f %9.0f %9.0f | %10.0f %9.0f %9.0f | %12.0f %12.0f %8.2f %11.1f %9.1f %9.1f %11.1f\n", m, c, dr, d5, d9, gr, g5, g9, g5 - d5, g9 - d9, gr / dr, (user + sys) / n, user / n, sys / n, own
    }'
  done
done
