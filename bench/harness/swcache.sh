# A target for the shared harness (../shared/bench): copy it into the harness copy's targets.d/
# and add `swcache` to TARGETS (docs/benchmarks.md, "The response cache").
# Our gateway with the response cache on: oha sends one request again and again, so all but
# the first are hits.
target_port_swcache() { echo 19110; }

target_cmd_swcache() {
  local cfg=${TMPDIR:-/tmp}/bench-swcache-$1.toml
  cat > "$cfg" <<TOML
[server]
listen = "127.0.0.1:$1"

[log]
sqlite_path = "${TMPDIR:-/tmp}/bench-swcache-$1.db"

[cache]
enabled = true

[[keys]]
name = "bench"
key = "sk-bench"

[[channels]]
name = "mock"
provider = "openai"
base_url = "$UPSTREAM_BASE"
api_keys = ["sk-upstream"]
models = ["mock-model"]
TOML
  echo "env RUST_LOG=warn ${PROJECT:?set PROJECT to the switchyard checkout}/target/release/switchyard serve --config $cfg"
}

target_headers_swcache() { echo "Authorization: Bearer sk-bench"; }
