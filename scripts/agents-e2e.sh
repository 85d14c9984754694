#!/usr/bin/env bash
# Four coding agents, run headless through Switchyard exactly as their users run them:
# Codex CLI (Responses API), Claude Code (Anthropic Messages), Gemini CLI (Gemini) and Aider
# (Chat Completions). Claude Code also calls an MCP server's tool with the gateway as its MCP
# server. Each does one plain turn and one shell round trip (the model calls the
# agent's shell tool, the agent runs it, the model answers the result; Aider, which has no
# tools, runs the shell block the model suggests). Every request first hits a dead primary
# channel (connection refused) and fails over to the mock before the first token. Claude Code's
# `/context` and Gemini CLI's image prompt count tokens first; no call may be answered 404.
#
#   scripts/agents-e2e.sh                      # installs the pinned agents once, then runs
#   SWITCHYARD_AGENTS_DIR=/path scripts/agents-e2e.sh
#
# Installs from the npm registry and PyPI only (about 1.6 GB, cached in $SWITCHYARD_AGENTS_DIR,
# default /var/tmp/switchyard-agents); at run time only 127.0.0.1 is used, with every agent's
# telemetry, update checks and retries switched off. Exits non-zero if any agent fails.
# Notes on each agent's switches and request shapes: docs/agents-notes.md.
set -euo pipefail
cd "$(dirname "$0")/.."

CODEX_VERSION=0.171.0
CLAUDE_VERSION=2.1.332
GEMINI_VERSION=0.61.0
AIDER_VERSION=0.86.2
DIR="${SWITCHYARD_AGENTS_DIR:-/var/tmp/switchyard-agents}"
KEY=sk-agents-e2e-key
ADMIN=agents-e2e-admin-token
MARK=SHELL_OK_42

# ---- install (once) ----------------------------------------------------------------------
npm_bin="$DIR/npm/node_modules/.bin"
stamp="$DIR/.installed-$CODEX_VERSION-$CLAUDE_VERSION-$GEMINI_VERSION-$AIDER_VERSION"
if [ ! -f "$stamp" ]; then
  echo "== installing the agents into $DIR"
  mkdir -p "$DIR/npm"
  [ -f "$DIR/npm/package.json" ] || echo '{"private": true}' >"$DIR/npm/package.json"
  (cd "$DIR/npm" && npm install --no-fund --no-audit --loglevel=error \
    "@openai/codex@$CODEX_VERSION" "@anthropic-ai/claude-code@$CLAUDE_VERSION" \
    "@google/gemini-cli@$GEMINI_VERSION") &
  npm_pid=$!
  [ -x "$DIR/aider/bin/python" ] || python3 -m venv "$DIR/aider"
  "$DIR/aider/bin/pip" install --quiet --disable-pip-version-check "aider-chat==$AIDER_VERSION"
  wait "$npm_pid"
  # Claude Code's native binary is linked in by its postinstall step; run it if npm did not.
  "$npm_bin/claude" --version >/dev/null 2>&1 ||
    (cd "$DIR/npm/node_modules/@anthropic-ai/claude-code" && node install.cjs)
  touch "$stamp"
fi
"$npm_bin/claude" --version | grep -q "$CLAUDE_VERSION" || { echo "claude is not $CLAUDE_VERSION" >&2; exit 1; }

# ---- the gateway -------------------------------------------------------------------------
bin="${SWITCHYARD_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --quiet --bin switchyard
  bin="${CARGO_TARGET_DIR:-target}/debug/switchyard"
fi
work=$(mktemp -d)
gw=""
bedrock_pid=""
mcp_pid=""
trap 'for p in $gw $bedrock_pid $mcp_pid; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT

dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A Bedrock mock that checks every SigV4 signature with botocore (tests/mocks/bedrock.py), for
# Claude Code's Bedrock leg: the Python of the SDK tests has botocore.
py="${SWITCHYARD_PY:-python3}"
"$py" tests/mocks/bedrock.py --access-key AKIAAGENTSE2E0001 --secret-key agents-e2e-secret \
  --text "BEDROCK_OK from Bedrock" >"$work/bedrock.log" 2>&1 &
bedrock_pid=$!
for _ in $(seq 1 100); do
  grep -q "bedrock mock listening on" "$work/bedrock.log" && break
  sleep 0.1
done
bedrock_url=$(grep -o 'http://[0-9.:]*' "$work/bedrock.log" | head -1)
# An MCP server (FastMCP, the official SDK's; tests/mcp/requirements.txt) behind the gateway's
# /mcp, which Claude Code is given as its MCP server.
mcp_py="${SWITCHYARD_MCP_PY:-/var/tmp/switchyard-mcp-venv/bin/python}"
"$mcp_py" tests/mcp/servers.py --name docs >"$work/mcp.log" 2>&1 &
mcp_pid=$!
for _ in $(seq 1 100); do
  grep -q "^PORT " "$work/mcp.log" && break
  sleep 0.1
done
mcp_port=$(sed -n 's/^PORT //p' "$work/mcp.log" | head -1)
[ -n "$mcp_port" ] || { cat "$work/mcp.log" >&2; exit 1; }
[ -n "$bedrock_url" ] || { cat "$work/bedrock.log" >&2; exit 1; }
tool() { # name, arguments JSON, answer after the result
  printf 'mock = { text = "FINAL_OK after the tool", chunks = 3, answer_tool_results = true, tool_call = { name = "%s", arguments = %s } }' "$1" "$2"
}
cat >"$work/gw.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_token = "$ADMIN"

[log]
sqlite_path = "$work/log.db"

[[keys]]
name = "agents"
key = "$KEY"
mcp = { servers = ["docs"], tools = ["docs__echo"] }

[[mcp_servers]]
name = "docs"
url = "http://127.0.0.1:$mcp_port/mcp"

# Nothing listens here: every request fails over from it, before the first token.
[[channels]]
name = "dead"
provider = "openai"
base_url = "http://127.0.0.1:$dead_port/v1"
api_keys = ["sk-dead"]
models = ["codex-plain", "codex-tool", "claude-plain", "claude-tool", "claude-mcp", "gemini-plain", "gemini-tool", "aider-plain", "aider-tool"]
priority = 1
circuit_breaker = { enabled = false }

# Claude on the Anthropic API first (down: nothing listens), then on Bedrock.
[[channels]]
name = "dead-anthropic"
provider = "anthropic"
base_url = "http://127.0.0.1:$dead_port"
api_keys = ["sk-ant-dead"]
models = ["claude-bedrock"]
priority = 1
circuit_breaker = { enabled = false }

[[channels]]
name = "bedrock"
provider = "bedrock"
region = "us-east-1"
base_url = "$bedrock_url"
aws = { access_key_id = "AKIAAGENTSE2E0001", secret_access_key = "agents-e2e-secret" }
models = [{ name = "claude-bedrock", upstream = "us.anthropic.claude-sonnet-4-5-20250929-v1:0" }]
priority = 2

[[channels]]
name = "plain"
provider = "mock"
models = ["codex-plain", "claude-plain", "gemini-plain", "aider-plain"]
priority = 2
mock = { text = "PLAIN_OK from the mock", chunks = 3 }

[[channels]]
name = "codex-tool"
provider = "mock"
models = ["codex-tool"]
priority = 2
$(tool exec_command "'{\"cmd\": \"echo $MARK > marker.txt\"}'")

[[channels]]
name = "claude-tool"
provider = "mock"
models = ["claude-tool"]
priority = 2
$(tool Bash "'{\"command\": \"echo $MARK > marker.txt\", \"description\": \"Write the marker\"}'")

# Claude Code calls the MCP server's tool through the gateway, by the name it gives it:
# mcp__, its name for the gateway, __, the gateway's name for the tool.
[[channels]]
name = "claude-mcp"
provider = "mock"
models = ["claude-mcp"]
priority = 2
$(tool mcp__switchyard__docs__echo "'{\"text\": \"MCP_ECHO_7\"}'")

[[channels]]
name = "gemini-tool"
provider = "mock"
models = ["gemini-tool"]
priority = 2
$(tool run_shell_command "'{\"command\": \"echo $MARK > marker.txt\", \"description\": \"Write the marker\"}'")

[[channels]]
name = "aider-tool"
provider = "mock"
models = ["aider-tool"]
priority = 2
mock = { text = "Run this:\n\n\`\`\`bash\necho $MARK > marker.txt\n\`\`\`\n", chunks = 3 }
TOML
"$bin" --log-level warn serve --config "$work/gw.toml" >"$work/gw.log" 2>&1 &
gw=$!
for _ in $(seq 1 100); do
  grep -q "switchyard listening on" "$work/gw.log" && break
  sleep 0.1
done
url=$(grep -o 'switchyard listening on http://[0-9.:]*' "$work/gw.log" | head -1 | sed 's/.* //')
[ -n "$url" ] || { cat "$work/gw.log" >&2; exit 1; }
echo "== gateway at $url"

# ---- the agents --------------------------------------------------------------------------
passed=0
failed=0
check() { # name, condition command...
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    cat "$work/last.out" "$work/last.err" 2>/dev/null | sed 's/^/     | /' | tail -20
  fi
}
has() { grep -q "$1" "$work/last.out"; }
marked() { grep -qx "$MARK" "$1/marker.txt" 2>/dev/null; }
fresh() { rm -rf "$work/$1"; mkdir -p "$work/$1/home" "$work/$1/cwd"; }

codex() { # model, prompt
  fresh codex
  cat >"$work/codex/home/config.toml" <<TOML
model = "$1"
model_provider = "switchyard"
check_for_update_on_startup = false
[analytics]
enabled = false
[features]
plugins = false
[model_providers.switchyard]
name = "Switchyard"
base_url = "$url/v1"
env_key = "SWITCHYARD_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
TOML
  (cd "$work/codex/cwd" && CODEX_HOME="$work/codex/home" SWITCHYARD_API_KEY=$KEY timeout 120 \
    "$npm_bin/codex" exec --skip-git-repo-check --ephemeral --dangerously-bypass-approvals-and-sandbox \
    "$2" </dev/null >"$work/last.out" 2>"$work/last.err")
}

claude() { # model, prompt
  fresh claude
  (cd "$work/claude/cwd" && HOME="$work/claude/home" ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=$KEY \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
    DISABLE_ERROR_REPORTING=1 CLAUDE_CODE_MAX_RETRIES=0 timeout 120 \
    "$npm_bin/claude" -p "$2" --model "$1" --output-format json --allowedTools Bash \
    </dev/null >"$work/last.out" 2>"$work/last.err")
}
# Claude Code with the gateway as its MCP server (`claude mcp add --transport http`), the tool
# allowed, headless.
claude_mcp() { # model, prompt
  fresh claude
  (cd "$work/claude/cwd" && HOME="$work/claude/home" timeout 60 "$npm_bin/claude" mcp add \
    --transport http switchyard "$url/mcp" --header "Authorization: Bearer $KEY" \
    </dev/null >"$work/last.out" 2>"$work/last.err")
  (cd "$work/claude/cwd" && HOME="$work/claude/home" ANTHROPIC_BASE_URL="$url" ANTHROPIC_API_KEY=$KEY \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 \
    DISABLE_ERROR_REPORTING=1 CLAUDE_CODE_MAX_RETRIES=0 timeout 120 \
    "$npm_bin/claude" -p "$2" --model "$1" --output-format json \
    --allowedTools mcp__switchyard__docs__echo </dev/null >"$work/last.out" 2>"$work/last.err")
}
# The tool call went through /mcp and reached the server: its log row says so.
mcp_called() {
  curl -fsS -H "authorization: Bearer $ADMIN" "$url/admin/requests?endpoint=mcp.tools/call" |
    python3 -c 'import json,sys; rows=json.load(sys.stdin)["data"]; sys.exit(0 if any(r["requested_model"] == "docs__echo" and r["outcome"] == "ok" and r["key_name"] == "agents" for r in rows) else 1)'
}
claude_mcp_trip() { has FINAL_OK && claude_clean && mcp_called; }
# Claude reports a refused command only here; its reply may read fine regardless.
claude_clean() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(1 if r["is_error"] or r["permission_denials"] else 0)' "$work/last.out"; }

gemini() { # model, prompt
  [ "${GEMINI_KEEP_CWD:-}" = 1 ] || fresh gemini
  mkdir -p "$work/gemini/home/.gemini"
  cat >"$work/gemini/home/.gemini/settings.json" <<JSON
{"security": {"auth": {"selectedType": "gemini-api-key"}},
 "privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
 "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false, "maxAttempts": 1}}
JSON
  (cd "$work/gemini/cwd" && GEMINI_CLI_HOME="$work/gemini/home" GOOGLE_GEMINI_BASE_URL="$url" \
    GEMINI_API_KEY=$KEY GEMINI_CLI_TRUST_WORKSPACE=true timeout 120 \
    "$npm_bin/gemini" -p "$2" -m "$1" -o json --approval-mode yolo </dev/null >"$work/last.out" 2>"$work/last.err")
}

aider() { # model, prompt, extra flags...
  local model=$1 prompt=$2
  shift 2
  fresh aider
  echo "{\"openai/$model\": {\"max_tokens\": 8192, \"max_input_tokens\": 128000, \"max_output_tokens\": 8192, \"input_cost_per_token\": 0, \"output_cost_per_token\": 0, \"litellm_provider\": \"openai\", \"mode\": \"chat\"}}" >"$work/aider/meta.json"
  (cd "$work/aider/cwd" && HOME="$work/aider/home" LITELLM_LOCAL_MODEL_COST_MAP=True \
    OPENAI_API_BASE="$url/v1" OPENAI_API_KEY=$KEY timeout 180 \
    "$DIR/aider/bin/aider" --model "openai/$model" --model-metadata-file "$work/aider/meta.json" \
    --no-git --no-check-update --analytics-disable --no-show-release-notes --no-pretty "$@" \
    --message "$prompt" </dev/null >"$work/last.out" 2>"$work/last.err")
}

round_trip() { marked "$work/$1/cwd" && has FINAL_OK; }
claude_plain() { has PLAIN_OK && claude_clean; }
claude_trip() { round_trip claude && claude_clean; }

echo "== Codex $CODEX_VERSION (Responses API)"
codex codex-plain "Say hello." || true
check "codex: plain turn" has "PLAIN_OK"
codex codex-tool "Write the marker file." || true
check "codex: shell round trip" round_trip codex

echo "== Claude Code $CLAUDE_VERSION (Anthropic Messages)"
claude claude-plain "Say hello." || true
check "claude: plain turn" claude_plain
claude claude-tool "Write the marker file." || true
check "claude: shell round trip" claude_trip
# Claude Code's Messages body to Bedrock's InvokeModel, as sent, after the Anthropic API failed.
claude claude-bedrock "Say hello." || true
check "claude: the Anthropic API down, Bedrock serves" has "BEDROCK_OK"
# `/context` counts the system prompt, tools and skills with `POST /v1/messages/count_tokens`.
claude claude-plain "/context" || true
check "claude: /context (token counting)" has "Context Usage"
claude_mcp claude-mcp "Echo the word through the docs server." || true
check "claude: an MCP tool through the gateway's /mcp" claude_mcp_trip

echo "== Gemini CLI $GEMINI_VERSION (Gemini API)"
gemini gemini-plain "Say hello." || true
check "gemini: plain turn" has "PLAIN_OK"
# A prompt with an image: Gemini CLI counts its tokens (`:countTokens`) before it sends it.
fresh gemini
python3 -c 'import base64,sys; open(sys.argv[1], "wb").write(base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="))' "$work/gemini/cwd/pic.png"
GEMINI_KEEP_CWD=1 gemini gemini-plain "Describe @pic.png" || true
check "gemini: an image prompt, its tokens counted first" has "PLAIN_OK"
gemini gemini-tool "Write the marker file." || true
check "gemini: shell round trip" round_trip gemini

echo "== Aider $AIDER_VERSION (Chat Completions)"
aider aider-plain "Say hello." --yes-always || true
check "aider: plain turn" has "PLAIN_OK"
# Aider has no tools: it runs the shell block the model suggests (asked, and answered yes by
# stdin's end; --yes-always would answer no).
aider aider-tool "Write the marker file." --edit-format diff || true
check "aider: suggested shell command run" marked "$work/aider/cwd"

# ---- every conversation failed over from the dead channel ---------------------------------
# A conversation's first turn fails over from the dead primary; its next turns go straight to
# the channel that served it (each agent's session header binds it there).
curl -fsS -H "authorization: Bearer $ADMIN" "$url/admin/requests?limit=500" >"$work/last.out"
: >"$work/last.err"
check "every agent's requests failed over from the dead primary before the first token" python3 - "$work/last.out" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["data"]
want = {"responses", "messages", "generateContent", "chat.completions"}
def failed_over(r):
    a = r["attempts"]
    return len(a) >= 2 and a[0]["channel"].startswith("dead") and a[0]["reason"] == "connection_error"
chats = [r for r in rows if r["endpoint"] in want]
bad = [r for r in chats if r["status"] != 200 or r["channel"].startswith("dead")
       or not (failed_over(r) or r["affinity"] == "kept")]
endpoints = {r["endpoint"] for r in chats if failed_over(r)}
print(f"{len(chats)} chat requests; failed over on {sorted(endpoints)}; {len(bad)} not served cleanly")
# Claude Code's Bedrock leg: served by Bedrock after the Anthropic API's connection failed.
bedrock = [r for r in chats if r["channel"] == "bedrock"]
print(f"{len(bedrock)} served by Bedrock after the Anthropic API failed")
bad += [r for r in bedrock if not failed_over(r) and r["affinity"] != "kept"]
bad += [] if bedrock else [{"missing": "no request was served by Bedrock"}]
for r in bad:
    print(json.dumps(r)[:400])
sys.exit(1 if bad or not want <= endpoints else 0)
PY
# The calls beside chat (token counts, model lists...) and any route the gateway does not
# serve are in the log too: none of them may have been refused.
check "no agent call answered 404 or failed (token counts, model lists, unknown routes)" python3 - "$work/last.out" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["data"]
chat = {"responses", "messages", "generateContent", "chat.completions"}
side = [r for r in rows if r["endpoint"] not in chat]
bad = [r for r in rows if r["status"] == 404 or (r in side and r["status"] != 200)]
seen = {r["endpoint"] for r in side}
print(f"{len(side)} calls beside chat: {sorted(seen)}; {len(bad)} refused")
for r in bad:
    print(json.dumps(r)[:400])
# Claude Code's `/context` and Gemini CLI's image prompt each counted tokens.
sys.exit(1 if bad or not {"messages.count_tokens", "countTokens"} <= seen else 0)
PY

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
