#!/usr/bin/env bash
# What semantic routing adds end to end: the same wrk load through one gateway to a plain model
# (`bench`) and to a router (`auto`) over it, in one run, with the local MiniLM embedder (or,
# without SWITCHYARD_EMBED_MODEL_DIR, the hashed fallback). Gateway on CPU 0, mock and wrk on
# CPU 1, as bench/load.sh.
#
#   SWITCHYARD_EMBED_MODEL_DIR=/path/to/minilm bench/semantic.sh
#   DURATION=5 CONCURRENCY="1 4" bench/semantic.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5}
CONCURRENCY=${CONCURRENCY:-"1 4"}
MOCK_PORT=${MOCK_PORT:-18181}
GW_PORT=${GW_PORT:-18180}
# shellcheck source=bench/common.sh
. bench/common.sh

if [ -n "${SWITCHYARD_EMBED_MODEL_DIR:-}" ]; then
  embedder="{ kind = \"local\", model_dir = \"$SWITCHYARD_EMBED_MODEL_DIR\" }"
else
  embedder='{ kind = "hashed" }'
  echo "SWITCHYARD_EMBED_MODEL_DIR not set: measuring the hashed fallback" >&2
fi

taskset -c 1 "$BIN" --log-level error mock --port "$MOCK_PORT" --text "ok" --chunks 1 >/dev/null &
pids+=($!)
gateway_toml bench bench-big
cat >>"$work/bench.toml" <<TOML
[[routers]]
model = "auto"
embedder = $embedder
[[routers.instances]]
name = "hard"
model = "bench-big"
examples = ["write a python function", "debug this stack trace", "prove this theorem"]
[[routers.instances]]
name = "easy"
model = "bench"
catchall = true
TOML
taskset -c 0 "$BIN" --log-level error serve --config "$work/bench.toml" >/dev/null &
pids+=($!)
wait_port "$MOCK_PORT"
wait_port "$GW_PORT"
sleep 1 # the local model loads at start

for model in bench auto; do
  cat >"$work/post_$model.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"$model","messages":[{"role":"user","content":"Why does my Rust code not compile? It says borrowed value does not live long enough."}]}'
LUA
done

run() { # lua conns -> "rps p50_us p99_us"
  local out
  out=$(taskset -c 1 wrk -t1 -c"$2" -d"${DURATION}s" --latency -s "$1" "http://127.0.0.1:$GW_PORT/v1/chat/completions")
  if grep -q "Non-2xx" <<<"$out"; then echo "errors: $out" >&2; fi
  echo "$(awk '/^Requests\/sec:/ {print $2}' <<<"$out") $(to_us "$(awk '$1 == "50%" {print $2}' <<<"$out")") $(to_us "$(awk '$1 == "99%" {print $2}' <<<"$out")")"
}

printf '%5s | %10s %9s %9s | %10s %9s %9s | %12s\n' conns "plain rps" "p50 us" "p99 us" "auto rps" "p50 us" "p99 us" "added p50us"
for c in $CONCURRENCY; do
  read -r pr p5 p9 < <(run "$work/post_bench.lua" "$c")
  read -r ar a5 a9 < <(run "$work/post_auto.lua" "$c")
  awk -v c="$c" -v pr="$pr" -v p5="$p5" -v p9="$p9" -v ar="$ar" -v a5="$a5" -v a9="$a9" 'BEGIN {
    printf "%5d | %10.0f %9.0f %9.0f | %10.0f %9.0f %9.0f | %12.0f\n", c, pr, p5, p9, ar, a5, a9, a5 - p5
  }'
done
