# Shared by the bench scripts (sourced, not run): tools check, release build, a scratch dir and
# the processes started into it, cleaned up on exit, and a wait for a port to open.

KEY=sk-bench-key-000000

command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }
command -v taskset >/dev/null || { echo "taskset not found (util-linux)" >&2; exit 1; }

# SWITCHYARD_BIN measures a build made elsewhere (an older commit, for a before/after pair).
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  cargo build --release --quiet
fi
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 did not open" >&2
  exit 1
}

# wrk latency "123.45us" / "1.20ms" / "1.00s" -> microseconds
to_us() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /s$/) print n * 1000000; else print n
  }'
}

# Writes $work/bench.toml: the gateway on $GW_PORT with the bench key, one openai channel to the
# mock on $MOCK_PORT serving the models given as arguments; $LOG_EXTRA goes into [log]. Scripts
# append their own tables.
gateway_toml() {
  local models
  models=$(printf '"%s", ' "$@")
  cat >"$work/bench.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"

[log]
sqlite_path = "$work/bench.db"
${LOG_EXTRA:-}

[[keys]]
name = "bench"
key = "$KEY"

[[channels]]
name = "mock"
provider = "openai"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
api_keys = ["sk-upstream-bench"]
models = [${models%, }]
TOML
}

# The gateway on port $1's own time as it reports it (switchyard_overhead_seconds, stream=$2):
# "sum_seconds count" so far; two readings around a run give its mean per request.
own_time() {
  curl -s "http://127.0.0.1:$1/metrics" | awk -v s="$2" '
    index($1, "switchyard_overhead_seconds_sum{stream=\"" s "\"}") == 1 { sum = $2 }
    index($1, "switchyard_overhead_seconds_count{stream=\"" s "\"}") == 1 { n = $2 }
    END { printf "%s %s\n", sum + 0, n + 0 }'
}

# Microseconds per request between two own_time readings ("sum count" each).
own_us() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y); d = y[2] - x[2]; printf "%.1f", (d > 0 ? (y[1] - x[1]) / d * 1e6 : 0) }'; }

# A process's CPU so far, in clock ticks of TICK_US microseconds (user + system).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# wrk on CPU 1 for $DURATION s at $1 connections, POSTing $work/post.lua to the gateway's chat
# completions on $GW_PORT: "rps p50_us requests" (any non-2xx is printed to stderr).
wrk_post() {
  local out
  out=$(taskset -c 1 wrk -t1 -c"$1" -d"${DURATION}s" --latency -s "$work/post.lua" "http://127.0.0.1:$GW_PORT/v1/chat/completions")
  if grep -q 'Non-2xx' <<<"$out"; then echo "errors: $out" >&2; fi
  echo "$(awk '/^Requests\/sec:/ {print $2}' <<<"$out") $(to_us "$(awk '$1 == "50%" {print $2}' <<<"$out")") $(awk '/requests in/ {print $1}' <<<"$out")"
}
