//! The binary as a user runs it: `check`, `serve` on embedded defaults, SIGHUP reload, `mock`.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::semantic_data::labelled_config;
use crate::support::*;

#[tokio::test]
async fn serve_without_config_runs_the_demo_and_answers_the_readme_request() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, url) = spawn_demo(dir.path()).await;
    // The README's curl, as is (but for the port).
    let resp = client()
        .post(format!("{url}/v1/chat/completions"))
        .header("Authorization", "Bearer sk-switchyard-demo")
        .header("Content-Type", "application/json")
        .body(r#"{"model": "demo", "messages": [{"role": "user", "content": "Hello!"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "demo-primary");
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("demo")
    );
    // The request log is SQLite in the working directory.
    assert!(dir.path().join("switchyard.db").exists());
    // Demo mode says so at start-up, with the key and the loopback restriction.
    let banner = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    assert!(
        banner.contains("DEMO MODE") && banner.contains("sk-switchyard-demo"),
        "{banner}"
    );
    assert!(banner.contains("loopback"), "{banner}");
}

#[tokio::test]
async fn demo_mode_refuses_non_loopback_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", "0.0.0.0:0"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}

#[tokio::test]
async fn check_prints_the_plan_or_the_field_that_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[[keys]]\nname = \"a\"\nkey = \"${CHECK_TEST_KEY}\"\n\
         [[channels]]\nname = \"one\"\nprovider = \"mock\"\nmodels = [\"m\"]\npriority = 1\n\
         [[channels]]\nname = \"two\"\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         models = [{ name = \"m\", upstream = \"m-2024\" }]\npriority = 2\n\
         [[channels]]\nname = \"three\"\nprovider = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\n\
         models = [\"m\"]\npriority = 3\n\
         [[channels]]\nname = \"four\"\nprovider = \"gemini\"\n\
         base_url = \"https://generativelanguage.googleapis.com\"\nmodels = [\"m\"]\npriority = 4\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env("CHECK_TEST_KEY", "sk-check-test-key")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("model m"), "{stdout}");
    assert!(stdout.contains("tier 1: one (mock"), "{stdout}");
    assert!(
        stdout.contains("tier 2: two (openai, weight 1, upstream model m-2024)"),
        "{stdout}"
    );
    assert!(!stdout.contains("sk-check-test-key"));
    // Where each channel's calls go, as built from its base URL.
    for line in [
        "channel one calls in-process mock",
        "channel two calls http://127.0.0.1:9/v1/chat/completions",
        "channel three calls https://api.anthropic.com/v1/messages",
        "channel four calls https://generativelanguage.googleapis.com/v1beta/models/{model}:generateContent",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }

    // The missing variable is named, with its field.
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env_remove("CHECK_TEST_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("keys[0].key") && stderr.contains("CHECK_TEST_KEY"),
        "{stderr}"
    );

    std::fs::write(
        &path,
        "[[channels]]\nname = \"x\"\nprovider = \"mock\"\nmodels = [\"m\"]\npriority = \"high\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("channels[0].priority"));
}

#[tokio::test]
async fn check_names_each_cloud_channels_url_and_auth_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sa.json");
    let pem = include_str!("../fixtures/google/test-service-account-key.pem");
    std::fs::write(
        &key,
        serde_json::json!({"type": "service_account", "client_email": "gw@p.iam.gserviceaccount.com",
            "private_key": pem, "token_uri": "https://oauth2.googleapis.com/token"})
        .to_string(),
    )
    .unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!(
            "[[keys]]\nname = \"a\"\nkey = \"sk-check-test-key\"\n\
             [[channels]]\nname = \"br\"\nprovider = \"bedrock\"\nregion = \"eu-west-1\"\n\
             aws = {{ access_key_id = \"AKIACHECKTEST\", secret_access_key = \"secret-not-shown-123\" }}\n\
             models = [\"m\"]\n\
             [[channels]]\nname = \"vx\"\nprovider = \"vertex\"\nproject = \"proj\"\nlocation = \"global\"\n\
             credentials_file = \"{}\"\nmodels = [\"gemini-2.5-flash\"]\n\
             [[channels]]\nname = \"gq\"\nprovider = \"groq\"\napi_keys = [\"gsk-not-shown-456\"]\nmodels = [\"m\"]\n",
            key.display()
        ),
    )
    .unwrap();
    let out = run_bin(&["check", "--config", path.to_str().unwrap()], &[]);
    assert!(out.ok, "{}", out.err);
    for line in [
        "channel br calls https://bedrock-runtime.eu-west-1.amazonaws.com/model/{model}/converse (region eu-west-1, SigV4, the channel's aws (key AKIACHECKTEST))",
        "channel vx calls https://aiplatform.googleapis.com/v1/projects/proj/locations/global/publishers/{publisher}/models/{model} (service account gw@p.iam.gserviceaccount.com (token from https://oauth2.googleapis.com/token))",
        "channel gq calls https://api.groq.com/openai/v1/chat/completions",
    ] {
        assert!(out.out.contains(line), "{line}\n{}", out.out);
    }
    let all = format!("{}{}", out.out, out.err);
    for secret in [
        "secret-not-shown-123",
        "gsk-not-shown-456",
        pem.lines().nth(3).unwrap(),
    ] {
        assert!(!all.contains(secret), "{secret}");
    }
}

#[tokio::test]
async fn sighup_reloads_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    let write = |model: &str| {
        std::fs::write(
            &path,
            format!(
                "[[keys]]\nname = \"a\"\nkey = \"{KEY}\"\n\
                 [[channels]]\nname = \"c\"\nprovider = \"mock\"\nmodels = [\"{model}\"]\n"
            ),
        )
        .unwrap()
    };
    write("before");
    let (p, url) = spawn_serve(&path, dir.path()).await;
    let models = || async {
        let v: Value = client()
            .get(format!("{url}/v1/models"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["data"][0]["id"].as_str().unwrap_or("").to_string()
    };
    assert_eq!(models().await, "before");
    write("after");
    let pid = p.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // The reload happens asynchronously in the server; ask until it shows (bounded).
    until(
        "the reloaded config's model",
        std::time::Duration::from_secs(10),
        async || match models().await {
            seen if seen == "after" => Ok(()),
            seen => Err(seen),
        },
    )
    .await;
}

#[tokio::test]
async fn the_standalone_mock_speaks_openai() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, base) = spawn_listening(
        &[
            "mock",
            "--port",
            "0",
            "--text",
            "standalone",
            "--chunks",
            "2",
        ],
        dir.path(),
        "switchyard mock listening on ",
    )
    .await;
    let v: Value = client()
        .post(format!("{base}/chat/completions"))
        .json(&json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "standalone");
    let body = client()
        .post(format!("{base}/chat/completions"))
        .json(
            &json!({"model": "x", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(sse_text(&body), "standalone");
}

#[tokio::test]
async fn the_example_config_in_the_repository_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/switchyard.toml");
    let out = Command::new(BIN)
        .args(["check", "--config", path])
        .env("TEAM_A_KEY", "sk-team-a-example")
        .env("OPENAI_API_KEY", "sk-openai-example")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("tier 2: backup-mock (mock"), "{stdout}");
}

#[tokio::test]
async fn the_agents_example_config_routes_every_agents_models_to_one_chain() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agents.toml");
    let env = [
        ("AGENTS_KEY", "sk-agents-example"),
        ("ANTHROPIC_API_KEY", "sk-ant-example"),
        ("OPENAI_API_KEY", "sk-openai-example"),
        ("GEMINI_API_KEY", "gemini-example"),
    ];
    let out = Command::new(BIN)
        .args(["check", "--config", path])
        .envs(env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("tier 3: gemini (gemini"), "{stdout}");
    // The names each agent asks for by default land on the same chain.
    for model in [
        "claude-sonnet-4-5-20250929",
        "gpt-5-codex",
        "gemini-2.5-flash",
    ] {
        let plan = explain_plan(path.as_ref(), &["--key", "agents", "--model", model], &env);
        assert_eq!(plan["chain"][0]["model"], "coder", "{model}: {plan}");
        assert_eq!(plan["chain"][0]["candidates"][0]["channel"], "anthropic");
    }
}

/// SIGTERM under load: 12 streams and 12 slow answers in flight. New connections are refused
/// at once; everything in flight finishes whole within `drain_timeout_ms`; the process exits
/// cleanly, every answered request has its log row and its ledger row, and the journal is empty.
#[tokio::test]
async fn sigterm_under_load_finishes_what_is_in_flight_and_refuses_new_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\ndrain_timeout_ms = 5000\n[log]\nsqlite_path = \"{}\"\n\
             [[keys]]\nname = \"a\"\nkey = \"{KEY}\"\n\
             [[channels]]\nname = \"slow\"\nprovider = \"mock\"\nmodels = [\"m\"]\n\
             price = {{ input = 1, output = 1 }}\n\
             mock = {{ text = \"abcdefghijklmnopqrst\", chunks = 20, chunk_ms = 60, ttft_ms = 300 }}\n\
             [[channels]]\nname = \"slower\"\nprovider = \"mock\"\nmodels = [\"n\"]\n\
             price = {{ input = 1, output = 1 }}\n\
             mock = {{ text = \"whole answer\", ttft_ms = 1500 }}\n",
            dir.path().join("g.db").display()
        ),
    )
    .unwrap();
    let (mut p, url) = spawn_serve(&path, dir.path()).await;
    let addr = url.trim_start_matches("http://").to_string();
    // Slow answers first (1.5 s each), then streams (1.5 s each, first chunk at 0.3 s).
    let answers: Vec<_> = (0..12)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let body = json!({"model": "n", "messages": [{"role": "user", "content": "hi"}]});
                let r = client()
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(KEY)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let v: Value = r.json().await.unwrap_or_default();
                (
                    status,
                    v["choices"][0]["message"]["content"].clone(),
                    std::time::Instant::now(),
                )
            })
        })
        .collect();
    // Sent together: each answers its head with its first chunk.
    let sends = (0..12).map(|_| {
        client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat_body(true))
            .send()
    });
    let mut streams: Vec<reqwest::Response> = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(streams.iter().all(|r| r.status() == 200));
    let mut firsts = Vec::new();
    for r in &mut streams {
        firsts.push(String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()).to_string());
    }
    let pid = p.0.id().to_string();
    let term = std::time::Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // New connections are refused at once, while everything above is still in flight.
    until(
        "new connections are refused",
        Duration::from_secs(1),
        async || tokio::net::TcpStream::connect(&addr).await.is_err(),
    )
    .await;
    let refused_at = std::time::Instant::now();
    let mut ends = Vec::new();
    for (mut r, first) in streams.into_iter().zip(firsts) {
        let mut body = first;
        while let Some(c) = r.chunk().await.unwrap() {
            body.push_str(&String::from_utf8_lossy(&c));
        }
        assert_eq!(sse_text(&body), "abcdefghijklmnopqrst");
        assert!(body.ends_with("data: [DONE]\n\n"));
        ends.push(std::time::Instant::now());
    }
    for a in answers {
        let (status, content, at) = a.await.unwrap();
        assert_eq!((status, content), (200, json!("whole answer")));
        ends.push(at);
    }
    assert!(
        ends.iter().all(|e| *e > refused_at),
        "everything was still in flight when new connections were refused"
    );
    let status = tokio::task::spawn_blocking(move || p.0.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        term.elapsed() < Duration::from_secs(5),
        "drained within drain_timeout_ms"
    );
    let db = rusqlite::Connection::open(dir.path().join("g.db")).unwrap();
    let one = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        one("SELECT count(*) FROM requests WHERE outcome = 'ok' AND status = 200"),
        24
    );
    assert_eq!(one("SELECT count(*) FROM ledger WHERE cost_micros > 0"), 24);
    // Every row written, the journal's segment went with the process: the next start has
    // nothing to write again.
    let journal: Vec<_> = std::fs::read_dir(dir.path().join("g.db.journal"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(journal.is_empty(), "{journal:?}");
}

#[tokio::test]
async fn the_standalone_mock_plays_a_fault_script_from_a_spec_file() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("mock.toml");
    std::fs::write(&spec, "text = \"after\"\nscript = [{ status = 503 }]\n").unwrap();
    let (_p, base) = spawn_listening(
        &["mock", "--port", "0", "--spec", spec.to_str().unwrap()],
        dir.path(),
        "switchyard mock listening on ",
    )
    .await;
    let ask = || async {
        client()
            .post(format!("{base}/chat/completions"))
            .json(&json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap()
    };
    assert_eq!(ask().await.status(), 503);
    let v: Value = ask().await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "after");
}

#[tokio::test]
async fn explain_prints_what_the_route_explain_endpoint_answers() {
    let up = mock(text_spec("x")).await;
    let channels = format!(
        "{}{}",
        openai_channel("one", &up.base_url(), 1, "weight = 2"),
        openai_channel("two", &up.base_url(), 2, "")
    );
    let gw = gateway_full(
        "",
        "failover_defaults = { models = [\"m\", \"e\"], timeout_ms = 5000 }\n\n\
         [[redirects]]\nfrom = \"alias\"\nto = \"m\"\n",
        &channels,
    )
    .await;
    let http: Value = gw
        .post_as(
            "/v1/route/explain",
            KEY,
            &[],
            json!({"model": "alias", "messages": []}),
        )
        .await
        .json()
        .await
        .unwrap();
    let cli = explain_plan(
        &gw.config_path,
        &["--key", "team-a", "--model", "alias"],
        &[],
    );
    assert_eq!(cli, http);
    assert_eq!(cli["chain"][0]["redirect"], "redirects[0]");
    assert_eq!(cli["chain"][1]["model"], "e");
    // An unknown key or model is an error naming it.
    let out = explain_cli(&gw.config_path, &["--key", "nobody", "--model", "m"], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no key") && !stderr.contains("nobody"),
        "{stderr}"
    );
    let out = explain_cli(
        &gw.config_path,
        &["--key", "team-a", "--model", "m", "--model", "zz"],
        &[],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("zz"));
}

#[tokio::test]
async fn two_switchyard_processes_share_a_binding_through_redis_across_restarts() {
    let m = [
        mock(text_spec("x")).await,
        mock(text_spec("y")).await,
        mock(text_spec("z")).await,
    ];
    let channels: String = ["x", "y", "z"]
        .iter()
        .zip(&m)
        .map(|(n, up)| {
            models_channel(
                n,
                &up.base_url(),
                &["m"],
                "[channels.circuit_breaker]\nfailure_threshold = 1\ncooldown_seconds = 600",
            )
        })
        .collect();
    let prefix = redis_prefix("procs");
    let config = |dir: &std::path::Path| {
        let path = dir.join("switchyard.toml");
        std::fs::write(
            &path,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n[log]\nsqlite_path = \"{}\"\n\
                 [state]\nurl = \"{REDIS_URL}\"\nprefix = \"{prefix}\"\n\
                 [[keys]]\nname = \"k\"\nkey = \"{KEY}\"\n\n{channels}",
                dir.join("log.db").display()
            ),
        )
        .unwrap();
        path
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ca, cb) = (config(da.path()), config(db.path()));
    let start = |path: std::path::PathBuf, dir: std::path::PathBuf| async move {
        let args = ["serve", "--config", path.to_str().unwrap()];
        let (proc, url) = spawn_listening(&args, &dir, "listening on").await;
        wait_connected_at(&url, true).await;
        (proc, url)
    };
    let turn = |url: String| async move {
        let resp = client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("x-session-id", "agent-7")
            .json(&chat_body(false))
            .send()
            .await
            .unwrap();
        (
            header(&resp, "x-switchyard-channel").to_string(),
            header(&resp, "x-switchyard-affinity").to_string(),
        )
    };
    let (pa, ua) = start(ca.clone(), da.path().to_path_buf()).await;
    let (pb, ub) = start(cb.clone(), db.path().to_path_buf()).await;
    let (bound, aff) = turn(ua.clone()).await;
    assert_eq!(aff, "new");
    for _ in 0..5 {
        assert_eq!(turn(ub.clone()).await, (bound.clone(), "kept".to_string()));
    }
    // The bound channel fails through A: its circuit opens there (the binding holds: one
    // failure of three)...
    let i = ["x", "y", "z"].iter().position(|n| *n == bound).unwrap();
    m[i].set_spec(faulty("down", status(500)));
    let (elsewhere, aff) = turn(ua.clone()).await;
    assert_ne!(elsewhere, bound);
    assert_eq!(aff, "kept");
    // ...and process B honours it within the stated bound, without calling the channel.
    wait_circuit(&ub, &bound, "open", std::time::Duration::from_secs(1)).await;
    let calls = m[i].requests();
    let (moved_to, aff) = turn(ub.clone()).await;
    assert_eq!(aff, "moved");
    assert_eq!(m[i].requests(), calls);
    // Both processes restart: the binding is still there, for either.
    drop(pa);
    drop(pb);
    let (_pa, ua) = start(ca, da.path().to_path_buf()).await;
    let (_pb, ub) = start(cb, db.path().to_path_buf()).await;
    assert_eq!(turn(ub).await, (moved_to.clone(), "kept".to_string()));
    assert_eq!(turn(ua).await, (moved_to, "kept".to_string()));
}

#[tokio::test]
async fn explain_with_a_prompt_shows_a_semantic_routers_decision_like_the_endpoint() {
    let m = [
        mock(text_spec("coder")).await,
        mock(text_spec("translator")).await,
        mock(text_spec("general")).await,
    ];
    let gw = gateway(&labelled_config(&m, 0.3, "{ kind = \"hashed\" }", "")).await;
    let prompt = "please debug this code";
    let http = get_explain(&gw, prompt).await;
    assert_eq!(http["semantic"][0]["winner"], "code", "{http}");
    let cli = explain_plan(
        &gw.config_path,
        &["--key", "team-a", "--model", "auto", "--prompt", prompt],
        &[],
    );
    assert_eq!(cli, http);
    // Without a prompt the CLI says what it needs.
    let out = explain_cli(
        &gw.config_path,
        &["--key", "team-a", "--model", "auto"],
        &[],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prompt"));
}

/// `switchyard explain --config <config> <args>`, with `env` set.
fn explain_cli(
    config: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    Command::new(BIN)
        .args(["explain", "--config"])
        .arg(config)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The plan `switchyard explain` prints, which must succeed.
fn explain_plan(config: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = explain_cli(config, args, env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn get_explain(gw: &Gateway, prompt: &str) -> Value {
    gw.post_as(
        "/v1/route/explain",
        KEY,
        &[],
        json!({"model": "auto", "messages": [{"role": "user", "content": prompt}]}),
    )
    .await
    .json()
    .await
    .unwrap()
}

/// Pinned to one core (as the shared bench harness pins it) the gateway runs everything on one
/// current-thread runtime, with no worker thread to hand wake-ups to, and serves as ever.
#[tokio::test]
async fn on_one_core_the_gateway_runs_on_one_thread_and_serves_whole_and_streamed_answers() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "-c",
        "0",
        BIN,
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-demo-traffic",
    ];
    let marker = "switchyard listening on ";
    let (p, url) = spawn_bin_listening(
        std::path::Path::new("taskset"),
        &args,
        dir.path(),
        marker,
        &[],
    )
    .await;
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", p.0.id()))
        .unwrap()
        .map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).unwrap())
        .collect();
    assert!(
        !threads.iter().any(|t| t.trim() == "tokio-rt-worker"),
        "{threads:?}"
    );
    let ask = |stream: bool| {
        client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth("sk-switchyard-demo")
            .json(&json!({"model": "demo", "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let whole: Value = ask(false).await.unwrap().json().await.unwrap();
    assert!(
        whole["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("demo")),
        "{whole}"
    );
    let streamed = ask(true).await.unwrap().text().await.unwrap();
    assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");
}
