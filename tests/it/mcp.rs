//! The MCP gateway end to end: the official MCP Python SDK as the client, FastMCP servers
//! behind `/mcp`, the gateway in between with its keys, access rules, health and log.

use serde_json::{Value, json};

use crate::support::*;

const MOCK_CHANNEL: &str = "[[channels]]\nname = \"m\"\nprovider = \"mock\"\nmodels = [\"m\"]\n";

/// The test key's `mcp` table and the `[[mcp_servers]]` entries after it.
async fn gateway_for(key_mcp: &str, servers: &[(&str, &str)]) -> Gateway {
    gateway_beside("", key_mcp, servers).await
}

/// As [`gateway_for`], with more top-level tables (`[state]`).
async fn gateway_beside(extra: &str, key_mcp: &str, servers: &[(&str, &str)]) -> Gateway {
    let mut tables = format!("{MOCK_CHANNEL}\n{extra}\n");
    for (name, urls) in servers {
        tables.push_str(&format!(
            "\n[[mcp_servers]]\nname = \"{name}\"\n{urls}\ntimeout_ms = 8000\n\
             circuit_breaker = {{ failure_threshold = 1, cooldown_seconds = 1, probe = {{ enabled = true, interval_seconds = 1 }} }}\n"
        ));
    }
    gateway_full("", key_mcp, &tables).await
}

/// Server `a` (Streamable HTTP) behind a gateway whose test key has `key_mcp`.
async fn with_a(py: &str, key_mcp: &str) -> (McpServer, Gateway) {
    let a = McpServer::start(py, "a", &[]).await;
    let gw = gateway_for(key_mcp, &[("a", &format!("url = \"{}\"", a.url))]).await;
    (a, gw)
}

fn mcp_url(gw: &Gateway) -> String {
    format!("{}/mcp", gw.url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_lists_calls_prompts_reads_and_samples_through_the_gateway() {
    let Some(py) = mcp_python() else { return };
    let a = McpServer::start(&py, "a", &["--token", "upstream-mcp-secret"]).await;
    let b = McpServer::start(&py, "b", &[]).await;
    // Pages of 3: the SDK follows the gateway's cursors through the merged list.
    let gw = gateway_beside(
        "[mcp]\npage_size = 3\n",
        "mcp = { servers = [\"a\", \"b\"], tools = [\"a__*\", \"!a__delete_*\", \"b__whoami\"] }",
        &[
            (
                "a",
                &format!("url = \"{}\"\nbearer = \"upstream-mcp-secret\"", a.url),
            ),
            ("b", &format!("url = \"{}\"", b.url)),
        ],
    )
    .await;
    let seen = mcp_client(&py, &mcp_url(&gw), KEY, "basic").await;
    the_basic_scenario_held(&seen);
    assert!(seen["pages"].as_u64().unwrap() >= 4, "{seen}");
    // The denied call never reached the server.
    let mut direct = RawSession::open(&a.url, "upstream-mcp-secret").await;
    assert_eq!(direct.tool("deletes", json!({})).await, Ok("0".into()));

    // The log: one row per tool call, the denied one refused; the upstream's token nowhere.
    gw.flush_log().await;
    let rows = gw.admin_requests().await;
    let calls: Vec<&Value> = rows
        .iter()
        .filter(|r| r["endpoint"] == "mcp.tools/call")
        .collect();
    let denied = calls
        .iter()
        .find(|r| r["requested_model"] == "a__delete_item")
        .expect("the denied call's row");
    assert_eq!(
        (denied["status"].as_u64(), denied["outcome"].as_str()),
        (Some(403), Some("denied"))
    );
    let echo = calls
        .iter()
        .find(|r| r["requested_model"] == "a__echo")
        .expect("echo's row");
    assert_eq!(
        (
            echo["channel"].as_str(),
            echo["served_model"].as_str(),
            echo["outcome"].as_str()
        ),
        (Some("a"), Some("echo"), Some("ok"))
    );
    let all = serde_json::to_string(&rows).unwrap();
    assert!(!all.contains("upstream-mcp-secret"));
    let config = client()
        .get(format!("{}/admin/config", gw.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        config.contains("[[mcp_servers]]") && !config.contains("upstream-mcp-secret"),
        "{config}"
    );
    let metrics = metrics_text(&gw.url).await;
    assert!(
        metrics.contains("switchyard_mcp_calls_total{server=\"a\",tool=\"echo\",outcome=\"ok\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_without_mcp_reaches_nothing_and_bad_input_is_the_specs_error() {
    let Some(py) = mcp_python() else { return };
    let a = McpServer::start(&py, "a", &[]).await;
    let small = "[mcp]\nmax_message_bytes = 2048\n";
    let gw = gateway_beside(small, "", &[("a", &format!("url = \"{}\"", a.url))]).await;
    let http = client();
    let post = |body: String, session: Option<String>| {
        let mut r = http
            .post(mcp_url(&gw))
            .bearer_auth(KEY)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body);
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let r = post(init.to_string(), None).await.unwrap();
    assert_eq!(r.status(), 200);
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["protocolVersion"], "2025-06-18");
    // No servers for this key: no capabilities, empty lists, calls refused.
    assert_eq!(body["result"]["capabilities"], json!({}));
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let r: Value = post(list.to_string(), Some(sid.clone()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["result"]["tools"], json!([]));
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "a__echo", "arguments": {"text": "x"}}});
    let r: Value = post(call.to_string(), Some(sid.clone()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (r["id"].as_i64(), r["error"]["code"].as_i64()),
        (Some(3), Some(-32602))
    );

    // (body, session, status, JSON-RPC code)
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}",
        "a".repeat(8 << 10)
    );
    let cases: Vec<(String, Option<String>, u16, i64)> = vec![
        ("{not json".into(), Some(sid.clone()), 400, -32700),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]".into(),
            Some(sid.clone()),
            400,
            -32600,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 4, "method": "no/such"}).to_string(),
            Some(sid.clone()),
            200,
            -32601,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}).to_string(),
            None,
            400,
            -32600,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}).to_string(),
            Some("forged".into()),
            404,
            -32001,
        ),
        (big, Some(sid.clone()), 413, -32600),
    ];
    for (body, session, status, code) in cases {
        let r = post(body.clone(), session).await.unwrap();
        assert_eq!(
            r.status().as_u16(),
            status,
            "{}",
            &body[..body.len().min(80)]
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"].as_i64(), Some(code), "{v}");
    }
    // Without the gateway key: 401, and a session is the key's own.
    let r = http
        .post(mcp_url(&gw))
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    // A revision the gateway does not speak, named in the header: 400.
    let r = http
        .post(mcp_url(&gw))
        .bearer_auth(KEY)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2024-01-01")
        .json(&json!({"jsonrpc": "2.0", "id": 8, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // A notification is taken with 202.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(note.to_string(), Some(sid.clone()))
            .await
            .unwrap()
            .status(),
        202
    );
    // DELETE ends the session.
    let r = http
        .delete(mcp_url(&gw))
        .bearer_auth(KEY)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    assert_eq!(
        post(ping.to_string(), Some(sid)).await.unwrap().status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_reaches_the_session_and_cancellation_reaches_the_server() {
    let Some(py) = mcp_python() else { return };
    let (_a, gw) = with_a(&py, "mcp = { servers = [\"*\"], tools = [\"*\"] }").await;
    let seen = mcp_client(&py, &mcp_url(&gw), KEY, "list_changed").await;
    let added = seen["added"].as_str().unwrap();
    assert!(
        !seen["before"].as_array().unwrap().contains(&json!(added)),
        "{seen}"
    );
    assert!(
        seen["after"].as_array().unwrap().contains(&json!(added)),
        "{seen}"
    );

    let seen = mcp_client(&py, &mcp_url(&gw), KEY, "cancel").await;
    assert_eq!(seen["call"]["code"], -32800, "{seen}");
    assert_eq!(seen["server_saw"], "cancelled", "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replica_fails_over_for_safe_tools_only_and_probes_close_its_circuit() {
    let Some(py) = mcp_python() else { return };
    let mut r0 = McpServer::start(&py, "r0", &[]).await;
    let r1 = McpServer::start(&py, "r1", &[]).await;
    let gw = gateway_for(
        "mcp = { servers = [\"r\"], tools = [\"*\"] }",
        &[("r", &format!("urls = [\"{}\", \"{}\"]", r0.url, r1.url))],
    )
    .await;
    let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
    assert_eq!(s.tool("r__whoami", json!({})).await, Ok("r0".into()));
    assert_eq!(
        s.tool("r__delete_item", json!({"item": "a"})).await,
        Ok("deleted a".into())
    );

    let port = r0.port;
    r0.kill();
    // It may have acted: not repeated on r1, the reason given.
    let err = s
        .tool("r__delete_item", json!({"item": "b"}))
        .await
        .unwrap_err();
    assert_eq!(
        (err["code"].as_i64(), err["data"]["repeatable"].as_bool()),
        (Some(-32000), Some(false)),
        "{err}"
    );
    assert_eq!(err["data"]["reason"], "connect_error", "{err}");
    // Read-only and idempotent calls move to r1, in the same session.
    assert_eq!(s.tool("r__whoami", json!({})).await, Ok("r1".into()));
    assert_eq!(
        s.tool("r__add", json!({"a": 2, "b": 3})).await,
        Ok("5".into())
    );
    assert_eq!(
        s.tool("r__deletes", json!({})).await,
        Ok("0".into()),
        "the failed delete never reached r1"
    );

    // r0 back on its port: the probes close its circuit, and new sessions open there again.
    let _r0 = McpServer::start(&py, "r0", &["--port", &port.to_string()]).await;
    until(
        "r0's circuit closes",
        std::time::Duration::from_secs(20),
        async || {
            // Health's clock is the test's: the cooldown ends when the test says.
            gw.clock.advance(std::time::Duration::from_secs(2));
            let mut fresh = RawSession::open(&mcp_url(&gw), KEY).await;
            fresh.tool("r__whoami", json!({})).await == Ok("r0".into())
        },
    )
    .await;
    // Both moves of r0's circuit are events naming the replica.
    let url = format!("{}/admin/events?type=circuit.*", gw.url);
    until(
        "r0's circuit events",
        std::time::Duration::from_secs(10),
        async || {
            let v = get_json(&url, Some(ADMIN)).await;
            let seen: Vec<(String, String)> = v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e["type"].as_str().unwrap_or_default().to_string(),
                        e["data"]["channel"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    )
                })
                .collect();
            let has = |t: &str| seen.contains(&(t.to_string(), "mcp:r#0".to_string()));
            has("circuit.opened") && has("circuit.closed")
        },
    )
    .await;
    gw.flush_log().await;
    let rows = gw.admin_requests().await;
    let failed = rows
        .iter()
        .find(|r| r["requested_model"] == "r__delete_item" && r["status"] == 502)
        .expect("the failed delete's row");
    assert_eq!(failed["attempt_count"], 1, "{failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opened_on_one_replica_is_continued_on_another_through_redis() {
    let Some(py) = mcp_python() else { return };
    let a = McpServer::start(&py, "a", &[]).await;
    let state = redis_state("mcp-session");
    let servers = [("a", format!("url = \"{}\"", a.url))];
    let servers: Vec<(&str, &str)> = servers.iter().map(|(n, u)| (*n, u.as_str())).collect();
    let key_mcp = "mcp = { servers = [\"a\"], tools = [\"a__echo\", \"a__whoami\", \"a__sleepy*\"] }\n\n\
        [[keys]]\nname = \"other\"\nkey = \"sk-another-team-key\"\nmcp = { servers = [\"*\"], tools = [\"*\"] }";
    let one = gateway_beside(&state, key_mcp, &servers).await;
    let two = gateway_beside(&state, key_mcp, &servers).await;
    wait_connected(&one, true).await;
    wait_connected(&two, true).await;

    let mut s = RawSession::open(&mcp_url(&one), KEY).await;
    assert_eq!(
        s.tool("a__echo", json!({"text": "on one"})).await,
        Ok("on one".into())
    );
    s.url = mcp_url(&two);
    assert_eq!(
        s.tool("a__echo", json!({"text": "on two"})).await,
        Ok("on two".into())
    );
    let tools = s.call("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["a__echo", "a__whoami", "a__sleepy", "a__sleepy_state"]
    );
    // Completions go to the prompt's server under its own name; the log level to every server.
    let done = s
        .call(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "a__greet"},
            "argument": {"name": "name", "value": "A"}}),
        )
        .await;
    assert_eq!(
        done["result"]["completion"]["values"],
        json!(["Ada", "Alan"]),
        "{done}"
    );
    let level = s.call("logging/setLevel", json!({"level": "debug"})).await;
    assert_eq!(level["result"], json!({}), "{level}");
    // A client that reads no streams gets the answer whole, though the server streamed it.
    s.accept = "application/json";
    let r = s
        .post(&json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
        "params": {"name": "a__echo", "arguments": {"text": "whole"}}}))
        .await;
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["id"].as_i64(), v["result"]["content"][0]["text"].as_str()),
        (Some(50), Some("whole"))
    );
    // A call running on one replica is cancelled from the other: the server is told, under
    // the id both replicas give the call, and the call ends.
    s.accept = "application/json, text/event-stream";
    let mut on_one = s.on(&mcp_url(&one));
    let running = tokio::spawn(async move { on_one.tool("a__sleepy", json!({})).await });
    until(
        "the call runs",
        std::time::Duration::from_secs(10),
        async || s.tool("a__sleepy_state", json!({})).await == Ok("running".into()),
    )
    .await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": RawSession::FIRST_OF_ANOTHER, "reason": "enough"}});
    assert_eq!(s.post(&cancel).await.status(), 202);
    until(
        "the server cancelled it",
        std::time::Duration::from_secs(10),
        async || s.tool("a__sleepy_state", json!({})).await == Ok("cancelled".into()),
    )
    .await;
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), running).await;
    assert!(
        ended.is_ok(),
        "the cancelled call ended, not after the tool's 30 s"
    );
    // Another key cannot use the session: it is not theirs.
    s.key = "sk-another-team-key".into();
    let r = s
        .post(&json!({"jsonrpc": "2.0", "id": 51, "method": "ping"}))
        .await;
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_rpm_refuses_past_the_limit_before_the_server_and_says_so_in_an_event() {
    let Some(py) = mcp_python() else { return };
    let (a, gw) = with_a(
        &py,
        "mcp = { servers = [\"a\"], tools = [\"*\", \"!a__secret_*\"] }\nmcp_rpm = 2",
    )
    .await;
    let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
    assert_eq!(
        s.tool("a__delete_item", json!({"item": "1"})).await,
        Ok("deleted 1".into())
    );
    assert_eq!(
        s.tool("a__delete_item", json!({"item": "2"})).await,
        Ok("deleted 2".into())
    );
    let err = s
        .tool("a__delete_item", json!({"item": "3"}))
        .await
        .unwrap_err();
    assert_eq!(err["data"]["limit"], "mcp_rpm", "{err}");
    assert!(
        err["data"]["retry_after_seconds"].as_u64().unwrap() >= 1,
        "{err}"
    );
    // A denied tool is refused too, and both refusals are events.
    let err = s.tool("a__secret_thing", json!({})).await.unwrap_err();
    assert_eq!(err["code"], -32602);
    let url = format!("{}/admin/events?type=mcp.refused", gw.url);
    until(
        "both refusals are events",
        std::time::Duration::from_secs(10),
        async || {
            let events = get_json(&url, Some(ADMIN)).await;
            let reasons: Vec<String> = events["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["data"]["reason"].as_str().unwrap_or_default().to_string())
                .collect();
            reasons.contains(&"rate_limited".to_string()) && reasons.contains(&"denied".to_string())
        },
    )
    .await;
    // The server ran the tool twice: the refused call never reached it.
    let direct = RawDirect(a.url.clone());
    assert_eq!(direct.deletes().await, 2);
}

/// The server called without the gateway, to see what it did.
struct RawDirect(String);

impl RawDirect {
    async fn deletes(&self) -> u64 {
        let mut s = RawSession::open_direct(&self.0).await;
        s.tool("deletes", json!({})).await.unwrap().parse().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_an_execute_tool_span_under_the_request_in_a_real_receiver() {
    let Some(py) = mcp_python() else { return };
    let Some(phoenix) = Phoenix::start().await else {
        return;
    };
    let a = McpServer::start(&py, "a", &[]).await;
    let telemetry = format!("[telemetry]\notlp_endpoint = \"{}\"\n", phoenix.url);
    let gw = gateway_beside(
        &telemetry,
        "mcp = { servers = [\"a\"], tools = [\"*\"] }",
        &[("a", &format!("url = \"{}\"", a.url))],
    )
    .await;
    let trace = "7bf92f3577b34da6a3ce929d0e0e4739";
    let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
    s.traceparent = Some(format!("00-{trace}-00f067aa0ba902b7-01"));
    assert_eq!(
        s.tool("a__echo", json!({"text": "traced"})).await,
        Ok("traced".into())
    );
    gw.running.state.telemetry.flush();
    let spans = phoenix.trace("default", trace, 2).await;
    let tool = spans
        .iter()
        .find(|s| s["name"] == "execute_tool a__echo")
        .unwrap_or_else(|| panic!("{spans:?}"));
    assert_eq!(attr(tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr(tool, "gen_ai.tool.name"), "a__echo");
    assert_eq!(attr(tool, "switchyard.mcp.server"), "a");
    let server = spans
        .iter()
        .find(|s| s["name"] == "POST /mcp")
        .unwrap_or_else(|| panic!("{spans:?}"));
    assert_eq!(tool["parent_span_id"], server["span_id"], "{spans:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_sse_transport_and_a_stdio_server_serve_beside_streamable_http() {
    let Some(py) = mcp_python() else { return };
    let old = McpServer::start(&py, "old", &["--transport", "sse"]).await;
    let script = format!("{}/tests/mcp/servers.py", env!("CARGO_MANIFEST_DIR"));
    let gw = gateway_for(
        "mcp = { servers = [\"*\"], tools = [\"*\"] }",
        &[
            ("old", &format!("url = \"{}\"\ntransport = \"sse\"", old.url)),
            ("local", &format!(
                "command = \"{py}\"\nargs = [\"{script}\", \"--name\", \"local\", \"--transport\", \"stdio\"]\n\
                 env = {{ LOCAL_TOKEN = \"stdio-env-secret\" }}"
            )),
        ],
    )
    .await;
    let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
    let tools = s.call("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"old__echo") && names.contains(&"local__echo"),
        "{names:?}"
    );
    for server in ["old", "local"] {
        let name = format!("{server}__echo");
        assert_eq!(
            s.tool(&name, json!({"text": server})).await,
            Ok(server.to_string())
        );
        // Progress comes back on the call's stream, under the client's token.
        let all = s
            .call_all(
                "tools/call",
                json!({"name": format!("{server}__slow"), "arguments": {"steps": 2},
                "_meta": {"progressToken": format!("p-{server}")}}),
            )
            .await;
        let progress: Vec<&Value> = all
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 2, "{server}: {all:?}");
        assert_eq!(
            progress[0]["params"]["progressToken"],
            format!("p-{server}")
        );
        let last = all.last().unwrap();
        assert_eq!(
            last["result"]["content"][0]["text"], "done in 2",
            "{server}: {all:?}"
        );
    }
    let prompt = s
        .call(
            "prompts/get",
            json!({"name": "old__greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"], "Hello, Ada, from old",
        "{prompt}"
    );

    // The stdio server's process exits mid-call: the call (not safe to repeat) answers the
    // error; the next call starts the process again.
    let before = s.tool("local__pid", json!({})).await.unwrap();
    let err = s.tool("local__exit_now", json!({})).await.unwrap_err();
    assert_eq!(err["data"]["repeatable"], false, "{err}");
    let after = s.tool("local__pid", json!({})).await.unwrap();
    assert_ne!(before, after, "a new process");
    gw.flush_log().await;
    let rows = serde_json::to_string(&gw.admin_requests().await).unwrap();
    assert!(!rows.contains("stdio-env-secret"));
}

/// Every byte of the files in `dir` whose name starts with `prefix` (a database and its WAL).
fn file_bytes(dir: &std::path::Path, prefix: &str) -> Vec<u8> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            all.extend(std::fs::read(e.path()).unwrap_or_default());
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_made_through_the_admin_api_are_sealed_scoped_and_served() {
    let Some(py) = mcp_python() else { return };
    let secret = "api-made-mcp-secret";
    let a = McpServer::start(&py, "a", &["--token", secret]).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let admins = "[[admins]]\nname = \"ops\"\ntoken = \"ops-token-0123456789\"\nrole = \"admin\"\ngroups = [\"ops\"]\n";
    let key_extra = format!(
        "mcp = {{ servers = [\"*\"], tools = [\"*\"] }}\ngroups = [\"ops\"]\n{}",
        store_section(&url, Some(&master_key(7)))
    );
    let channel = format!("{MOCK_CHANNEL}groups = [\"ops\"]\n\n{admins}");
    let gw = gateway_full("", &key_extra, &channel).await;

    let made = as_admin(&gw, "POST", "/admin/mcp_servers",
        Some(json!({"name": "a", "url": a.url, "bearer": secret, "headers": {"X-Team": "hdr-value-secret"}, "groups": ["ops"]}))).await;
    assert_eq!(made.0, 201, "{:?}", made.1);
    assert_eq!(made.1["bearer"], "***");
    // The admin API runs no programs: stdio servers come from the file only.
    let refused = as_admin(
        &gw,
        "POST",
        "/admin/mcp_servers",
        Some(json!({"name": "sh", "command": "/bin/sh", "args": ["-c", "id"]})),
    )
    .await;
    assert_eq!(code(&refused), (400, "invalid_value"), "{:?}", refused.1);
    assert_eq!(refused.1["error"]["param"], "command");
    let other = as_admin(
        &gw,
        "POST",
        "/admin/mcp_servers",
        Some(json!({"name": "b", "url": "http://127.0.0.1:9/mcp", "groups": ["other"]})),
    )
    .await;
    assert_eq!(other.0, 201, "{:?}", other.1);

    // Scoped to "ops": its server only, with each replica's health; secrets never shown.
    let (status, list) = admin(
        &gw,
        "GET",
        "/admin/mcp_servers",
        "ops-token-0123456789",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a"], "{list}");
    assert_eq!(list["data"][0]["health"][0]["circuit"], "closed", "{list}");
    let all = list.to_string()
        + &as_admin(&gw, "GET", "/admin/mcp_servers", None)
            .await
            .1
            .to_string();
    assert!(
        !all.contains(secret) && !all.contains("hdr-value-secret"),
        "{all}"
    );
    let stored = file_bytes(dir.path(), "store.db");
    for s in [secret, "hdr-value-secret"] {
        assert!(
            !stored.windows(s.len()).any(|w| w == s.as_bytes()),
            "{s} sealed at rest"
        );
    }

    // The new server is live: its token (opened from the store) is accepted.
    let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
    assert_eq!(
        s.tool("a__echo", json!({"text": "made by the API"})).await,
        Ok("made by the API".into())
    );
}

/// What the SDK's `basic` scenario must have seen, whatever the servers' transports.
fn the_basic_scenario_held(seen: &Value) {
    assert_eq!(seen["protocol"], "2025-11-25");
    for cap in ["tools", "prompts", "resources"] {
        assert_eq!(
            seen["capabilities"][cap]["listChanged"], true,
            "{cap}: {seen}"
        );
    }
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    // a's tools but the denied one, b's one allowed tool; prefixed, in the servers' order.
    assert!(
        tools.contains(&"a__echo") && tools.contains(&"b__whoami"),
        "{tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t.starts_with("a__delete_")),
        "{tools:?}"
    );
    assert!(!tools.contains(&"b__echo"), "{tools:?}");
    assert_eq!(seen["echo"], "hi");
    assert_eq!(seen["slow"], "done in 3");
    assert_eq!(
        seen["progress"],
        json!([
            [1.0, 3.0, "step 1"],
            [2.0, 3.0, "step 2"],
            [3.0, 3.0, "step 3"]
        ])
    );
    assert_eq!(seen["sampled"], "the model said: an answer to why?");
    // (the list it saw, an item it must hold)
    for (list, item) in [("prompts", "a__greet"), ("resources", "a__today")] {
        let items = seen[list].as_array().unwrap();
        assert!(items.contains(&json!(item)), "{list}: {seen}");
    }
    // (what it saw, what it must be)
    let answers = [
        ("prompt", json!("Hello, Ada, from a")),
        ("read", json!("notes of a")),
        ("read_template", json!("profile 42")),
        ("b", json!("b")),
    ];
    for (field, want) in answers {
        assert_eq!(seen[field], want, "{field}: {seen}");
    }
    assert_eq!(seen["denied"]["code"], -32602, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_sees_the_same_through_an_sse_server_and_a_stdio_server() {
    let Some(py) = mcp_python() else { return };
    let a = McpServer::start(
        &py,
        "a",
        &["--token", "upstream-mcp-secret", "--transport", "sse"],
    )
    .await;
    let script = format!("{}/tests/mcp/servers.py", env!("CARGO_MANIFEST_DIR"));
    let gw = gateway_for(
        "mcp = { servers = [\"a\", \"b\"], tools = [\"a__*\", \"!a__delete_*\", \"b__whoami\"] }",
        &[
            ("a", &format!("url = \"{}\"\ntransport = \"sse\"\nbearer = \"upstream-mcp-secret\"", a.url)),
            ("b", &format!("command = \"{py}\"\nargs = [\"{script}\", \"--name\", \"b\", \"--transport\", \"stdio\"]")),
        ],
    )
    .await;
    let seen = mcp_client(&py, &mcp_url(&gw), KEY, "basic").await;
    the_basic_scenario_held(&seen);
}

/// The mock's own MCP server (what the benchmarks measure against) behind `/mcp`, as the
/// second replica of a server whose first is dead: the session opens past it, then lists and
/// calls. Needs no Python.
#[tokio::test]
async fn the_mocks_mcp_server_serves_through_the_gateway() {
    let up = mock(text_spec("unused")).await;
    let url = format!("http://{}/mcp", up.addr());
    let gw = gateway_for(
        "mcp = { servers = [\"m\"], tools = [\"*\"] }",
        &[(
            "m",
            &format!("urls = [\"http://127.0.0.1:9/mcp\", \"{url}\"]"),
        )],
    )
    .await;
    let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
    let tools = s.call("tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"][0]["name"], "m__echo", "{tools}");
    assert_eq!(
        s.tool("m__echo", json!({"text": "through"})).await,
        Ok("through".into())
    );
}

/// `[log] mcp_bodies`: a tool call's arguments and result in its row; without it, neither.
#[tokio::test]
async fn tool_call_bodies_are_logged_only_when_asked() {
    let up = mock(text_spec("unused")).await;
    let server = format!(
        "{MOCK_CHANNEL}\n[[mcp_servers]]\nname = \"m\"\nurl = \"http://{}/mcp\"\n",
        up.addr()
    );
    let key = "mcp = { servers = [\"m\"], tools = [\"*\"] }";
    for (log, kept) in [("mcp_bodies = true", true), ("", false)] {
        let gw = gateway_logged((log, ""), key, &server).await;
        let mut s = RawSession::open(&mcp_url(&gw), KEY).await;
        assert_eq!(
            s.tool("m__echo", json!({"text": "kept?"})).await,
            Ok("kept?".into())
        );
        gw.flush_log().await;
        let rows = gw.admin_requests().await;
        let row = rows
            .iter()
            .find(|r| r["endpoint"] == "mcp.tools/call")
            .expect("the call's row");
        if kept {
            assert_eq!(
                row["bodies"]["arguments"],
                json!({"text": "kept?"}),
                "{row}"
            );
            assert_eq!(
                row["bodies"]["result"]["content"][0]["text"], "kept?",
                "{row}"
            );
        } else {
            assert_eq!(row["bodies"], Value::Null, "{row}");
        }
    }
}
