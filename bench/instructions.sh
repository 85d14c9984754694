#!/usr/bin/env bash
# Instructions the gateway spends per proxied request, counted by callgrind: repeatable on a
# noisy VM where rps and CPU time swing by 15 %. Runs N1 and N2 sequential keep-alive requests
# through the gateway (under valgrind) in front of `switchyard mock` and divides the difference
# in total instructions by N2 - N1, so start-up cost cancels out. Give several binaries to
# compare builds (e.g. one built from the previous commit) in one run.
#
#   bench/instructions.sh                                  # this tree's release build
#   bench/instructions.sh /tmp/base/release/switchyard target/release/switchyard
#   STREAM=1 N1=100 N2=400 bench/instructions.sh
#   SESSION=1 bench/instructions.sh     # every request in one session (affinity, in memory)
#   TRIM=1 bench/instructions.sh        # the key trims: every request is counted (and fits)
#   LIMITS=priced bench/instructions.sh; LIMITS=memory bench/instructions.sh   # what a key's
#   LIMITS=team bench/instructions.sh    # that key in a three-level team (compare with memory)

#                                        # budget, rpm and max_concurrency add (in memory)
#   MOCK_BIN=/tmp/base/switchyard bench/instructions.sh A B   # one mock for every build, so
#                                        # each gateway gets the very same upstream answers
#   METRICS=0 bench/instructions.sh      # [metrics] enabled = false: what counting costs
#   HOT=1 bench/instructions.sh          # only the request path: what runs on the runtime's
#                                        # worker threads (not the log writer's, not the span
#                                        # exporter's thread)
#   CG_KEEP=/tmp/cg bench/instructions.sh  # keep each run's callgrind output there, for
#                                        # callgrind_annotate (per function, inclusive)
#   TRACING=1 bench/instructions.sh      # every request traced, spans exported to a local sink
#                                        # (a Python OTLP/HTTP receiver answering 200); the
#                                        # export thread's instructions are counted too
#   STRATEGY=latency bench/instructions.sh  # two channels in one tier (both in front of the mock),
#                                        # chosen by `[routing] default_strategy`: compare with
#                                        # STRATEGY=weighted for what measuring and choosing cost
#   CACHE=hit bench/instructions.sh      # [cache] on, every request the same: all but the first
#   CACHE=miss bench/instructions.sh     # are hits; `miss`: each request differs (its `seed`),
#                                        # so each is looked up, misses, and is kept
#   BEDROCK=key bench/instructions.sh    # a `bedrock` channel (Converse) in front of the Bedrock
#   BEDROCK=sigv4 bench/instructions.sh  # mock, with a Bedrock API key or signing every request
#                                        # with SigV4: `sigv4 - key` is what signing adds (the
#                                        # mock needs botocore: SWITCHYARD_PY, as the SDK tests)
#
# Needs: valgrind, python3. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

N1=${N1:-100}
N2=${N2:-600}
STREAM=${STREAM:-0}
SESSION=${SESSION:-0}
TRIM=${TRIM:-0}
LIMITS=${LIMITS:-none}
METRICS=${METRICS:-1}
TRACING=${TRACING:-0}
BEDROCK=${BEDROCK:-}
STRATEGY=${STRATEGY:-}
CACHE=${CACHE:-}
SINK_PORT=${SINK_PORT:-18092}
GW_PORT=${GW_PORT:-18090}
MOCK_PORT=${MOCK_PORT:-18091}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
if [ "$#" -eq 0 ]; then
  cargo build --release --quiet
  set -- "${CARGO_TARGET_DIR:-target}/release/switchyard"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/client.py" <<'PY'
import http.client, json, sys
n, port, stream, session = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench-key-000000"}
if session:
    headers["x-session-id"] = "bench-session"
c = http.client.HTTPConnection("127.0.0.1", port)
vary = sys.argv[5] == "miss" if len(sys.argv) > 5 else False
base = {"model": "bench", "stream": stream, "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say something about foxes."}]}
body = json.dumps(base)
for i in range(n):
    if vary:
        # Another request each time (the same size): every lookup misses.
        body = json.dumps(dict(base, seed=int(port) * 10**7 + i + n * 1000))
    c.request("POST", "/v1/chat/completions", body, headers)
    r = c.getresponse()
    data = r.read()
    assert r.status == 200, (r.status, data)
PY

cat >"$work/gw.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
[log]
sqlite_path = "$work/log.db"
[[keys]]
name = "bench"
key = "sk-bench-key-000000"
[[channels]]
name = "mock"
provider = "openai"
base_url = "http://127.0.0.1:$MOCK_PORT/v1"
api_keys = ["sk-upstream-bench"]
models = ["bench"]
TOML
if [ -n "$BEDROCK" ]; then
  auth='credentials = [{ key = "bench-bedrock-api-key" }]'
  [ "$BEDROCK" = sigv4 ] && auth='aws = { access_key_id = "AKIABENCH00000001", secret_access_key = "bench-secret" }'
  sed -i '/^\[\[channels\]\]$/,$d' "$work/gw.toml"
  printf '[[channels]]\nname = "bedrock"\nprovider = "bedrock"\nregion = "us-east-1"\nbase_url = "http://127.0.0.1:%s"\n%s\nmodels = [{ name = "bench", upstream = "amazon.nova-pro-v1:0" }]\n' \
    "$MOCK_PORT" "$auth" >>"$work/gw.toml"
fi
if [ "$LIMITS" != none ]; then
  # A key budget, rpm and max_concurrency, and a priced channel, counted in memory (LIMITS=memory;
  # LIMITS=priced prices the channel only, the baseline for what admission and settle add).
  echo 'price = { input = 1, output = 1 }' >>"$work/gw.toml"
    if [ "$LIMITS" = memory ] || [ "$LIMITS" = team ]; then
    sed -i 's/^key = "sk-bench-key-000000"$/&\nbudget = { usd = 1000000 }\nrpm = 100000000\nmax_concurrency = 100000/' "$work/gw.toml"
  fi
  if [ "$LIMITS" = team ]; then
    # The same key in a sub-team of a team of an organisation, each level with limits: all
    # four held and settled in one step (compare with LIMITS=memory).
    sed -i 's/^key = "sk-bench-key-000000"$/&\nteam = "sub"/' "$work/gw.toml"
    printf '[[teams]]\nname = "org"\nbudget = { usd = 1000000 }\n[[teams]]\nname = "team"\nparent = "org"\nbudget = { usd = 1000000 }\nrpm = 100000000\n[[teams]]\nname = "sub"\nparent = "team"\nmax_concurrency = 100000\n' >>"$work/gw.toml"
  fi
fi
if [ "$METRICS" = 0 ]; then
  printf '[metrics]\nenabled = false\n' >>"$work/gw.toml"
fi
if [ -n "$CACHE" ]; then
  printf '[cache]\nenabled = true\n' >>"$work/gw.toml"
fi
if [ -n "$STRATEGY" ]; then
  printf '[[channels]]\nname = "mock2"\nprovider = "openai"\nbase_url = "http://127.0.0.1:%s/v1"\napi_keys = ["sk-upstream-bench2"]\nmodels = ["bench"]\n[routing]\ndefault_strategy = "%s"\n' \
    "$MOCK_PORT" "$STRATEGY" >>"$work/gw.toml"
fi
if [ "$TRACING" = 1 ]; then
  printf '[telemetry]\notlp_endpoint = "http://127.0.0.1:%s"\n' "$SINK_PORT" >>"$work/gw.toml"
  cat >"$work/sink.py" <<'PY'
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
PY
  python3 "$work/sink.py" "$SINK_PORT" &
  sink=$!
  trap 'kill $sink 2>/dev/null; rm -rf "$work"' EXIT
fi
if [ "$TRIM" = 1 ]; then
  sed -i 's/^key = "sk-bench-key-000000"$/&\ntrim = true/' "$work/gw.toml"
  printf '[[models]]\nname = "bench"\ncontext_window = 128000\nmax_output_tokens = 4096\n' >>"$work/gw.toml"
fi

wait_port() {
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "port $1 did not open" >&2
  exit 1
}

total() { # bin requests -> instructions of the whole gateway process
  # A fresh request log each run: a log left by the run before made the next start (and so
  # the later binaries of one invocation) pay for its rows, ~15k instructions a request.
  rm -rf "$work"/log.db*
  if [ -n "$BEDROCK" ]; then
    "${SWITCHYARD_PY:-python3}" tests/mocks/bedrock.py --port "$MOCK_PORT" --access-key AKIABENCH00000001 \
      --secret-key bench-secret --api-key bench-bedrock-api-key \
      --text "The quick brown fox jumps over the lazy dog, twice over." >/dev/null &
  else
    "${MOCK_BIN:-$1}" --log-level error mock --port "$MOCK_PORT" \
      --text "The quick brown fox jumps over the lazy dog, twice over." --chunks 8 >/dev/null &
  fi
  local mock=$!
  local only=()
  [ "${HOT:-0}" = 1 ] && only=(--toggle-collect='*multi_thread::worker::run*')
  valgrind --tool=callgrind "${only[@]}" --callgrind-out-file="$work/cg.out" \
    "$1" --log-level error serve --config "$work/gw.toml" >/dev/null 2>"$work/vg.log" &
  local gw=$!
  wait_port "$MOCK_PORT"
  wait_port "$GW_PORT"
  python3 "$work/client.py" 20 "$GW_PORT" "$STREAM" "$SESSION" "$CACHE" # warm-up: pools, caches
  python3 "$work/client.py" "$2" "$GW_PORT" "$STREAM" "$SESSION" "$CACHE"
  kill -TERM "$gw"
  wait "$gw" || true
  kill "$mock"
  wait "$mock" 2>/dev/null || true
  if [ -n "${CG_KEEP:-}" ]; then
    mkdir -p "$CG_KEEP" && cp "$work/cg.out" "$CG_KEEP/$(basename "$1")-metrics$METRICS-tracing$TRACING${BEDROCK:+-bedrock$BEDROCK}-$2.out"
  fi
  awk '/^(summary|totals):/ {print $2; exit}' "$work/cg.out"
}

printf '%-60s %s\n' binary "instructions/request ($([ "$STREAM" = 1 ] && echo stream || echo non-stream), metrics=$METRICS tracing=$TRACING${BEDROCK:+ bedrock=$BEDROCK}${STRATEGY:+ strategy=$STRATEGY}${CACHE:+ cache=$CACHE})"
for bin in "$@"; do
  a=$(total "$bin" "$N1")
  b=$(total "$bin" "$N2")
  printf '%-60s %d\n' "$bin" $(((b - a) / (N2 - N1)))
done
