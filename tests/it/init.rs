//! `switchyard init`: a config for each provider kind that `switchyard check` accepts, with no
//! secret in it, a key printed once that the gateway then takes, and no file overwritten.

use std::path::Path;

use crate::support::{client, run_bin, spawn_listening_env};

/// What a user has in their environment: written into no file.
const HELD: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-openai-held-4711"),
    ("ANTHROPIC_API_KEY", "sk-ant-held-4711"),
    ("GEMINI_API_KEY", "gemini-held-4711"),
];

/// A value for each variable the config reads, as a user would set them.
fn value_for(var: &str) -> &'static str {
    match var {
        "AZURE_OPENAI_ENDPOINT" => "https://my-resource.openai.azure.com",
        "GOOGLE_CLOUD_PROJECT" => "my-project",
        _ => "sk-set-by-the-user-0123",
    }
}

/// Runs `init`; the key it printed, and all it printed.
fn init(providers: &str, out: &Path) -> (String, String) {
    let run = run_bin(
        &[
            "init",
            "--provider",
            providers,
            "--output",
            out.to_str().unwrap(),
        ],
        HELD,
    );
    assert!(run.ok, "init {providers}: {}{}", run.out, run.err);
    let key = run
        .out
        .lines()
        .find_map(|l| l.trim().strip_prefix("export SWITCHYARD_KEY="))
        .unwrap_or_else(|| panic!("no key printed: {}", run.out))
        .to_string();
    assert!(key.starts_with("sk-sy-") && key.len() == 38, "{key}");
    (key, run.out)
}

/// `check` with every variable the printed instructions name set.
fn check(providers: &str, config: &Path, key: &str, said: &str) -> String {
    let vars = said
        .lines()
        .find_map(|l| {
            l.strip_prefix("set ")
                .and_then(|l| l.strip_suffix(", then:"))
        })
        .unwrap_or("SWITCHYARD_KEY");
    let mut env: Vec<(&str, &str)> = vars
        .split(", ")
        .map(|v| {
            (
                v,
                if v == "SWITCHYARD_KEY" {
                    key
                } else {
                    value_for(v)
                },
            )
        })
        .collect();
    env.push(("AWS_REGION", "us-east-1"));
    let run = run_bin(&["check", "--config", config.to_str().unwrap()], &env);
    assert!(run.ok, "check of init {providers}: {}{}", run.out, run.err);
    run.out
}

#[test]
fn each_provider_kinds_config_passes_check_and_holds_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let all: Vec<&str> = switchyard::init::PROVIDERS
        .iter()
        .map(|p| p.as_str())
        .collect();
    let everything = all.join(",");
    let table: Vec<&str> = all.iter().copied().chain([everything.as_str()]).collect();
    for (i, providers) in table.iter().enumerate() {
        let out = dir.path().join(format!("{i}.toml"));
        let (key, said) = init(providers, &out);
        let written = std::fs::read_to_string(&out).unwrap();
        for secret in HELD.iter().map(|(_, v)| *v).chain([key.as_str()]) {
            assert!(!written.contains(secret), "init {providers} wrote a secret");
        }
        let plan = check(providers, &out, &key, &said);
        for p in providers.split(',') {
            assert!(plan.contains(&format!("{p} (")), "init {providers}: {plan}");
        }
    }
}

#[test]
fn init_refuses_to_overwrite_and_names_what_it_knows() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("switchyard.toml");
    std::fs::write(&out, "# mine\n").unwrap();
    let path = out.to_str().unwrap();
    let run = run_bin(&["init", "--provider", "openai", "--output", path], &[]);
    assert!(
        !run.ok && run.err.contains("never overwrites"),
        "{}",
        run.err
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "# mine\n");

    let other = dir.path().join("other.toml");
    let other = other.to_str().unwrap();
    let run = run_bin(
        &["init", "--provider", "openai,foo", "--output", other],
        &[],
    );
    assert!(
        !run.ok && run.err.contains("\"foo\"") && run.err.contains("anthropic"),
        "{}",
        run.err
    );
    // No terminal to ask on and no --provider: it says what to pass.
    let run = run_bin(&["init", "--output", other], &[]);
    assert!(!run.ok && run.err.contains("--provider"), "{}", run.err);
    assert!(!Path::new(other).exists());
}

#[tokio::test]
async fn the_printed_key_is_taken_by_the_gateway_the_config_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("switchyard.toml");
    let (key, _) = init("mock", &out);
    let config = out.to_str().unwrap();
    let (_p, url) = spawn_listening_env(
        &["serve", "--listen", "127.0.0.1:0", "--config", config],
        dir.path(),
        "switchyard listening on ",
        &[("SWITCHYARD_KEY", &key)],
    )
    .await;
    let ask = |bearer: String| {
        client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(bearer)
            .json(&serde_json::json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    assert_eq!(ask(key.clone()).await.unwrap().status(), 200);
    assert_eq!(ask(format!("{key}x")).await.unwrap().status(), 401);
}
