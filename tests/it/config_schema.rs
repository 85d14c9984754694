//! `switchyard schema`: the config's JSON Schema accepts every config in the repository (the
//! examples, the demo, the deployment files, what `init` writes for each provider) and refuses
//! a misspelt key or a value outside the allowed ones, checked by the `jsonschema` package (an
//! implementation we did not write) as an editor would; `init` writes it and names it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{run_bin, skipping};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `switchyard init --provider <provider> --output <out>`, which must succeed; what it said on
/// stderr.
fn init(provider: &str, out: &Path) -> String {
    let run = run_bin(
        &[
            "init",
            "--provider",
            provider,
            "--output",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(run.ok, "{provider}: {}", run.err);
    run.err
}

fn schema() -> Value {
    let run = run_bin(&["schema"], &[]);
    assert!(run.ok, "{}", run.err);
    serde_json::from_str(&run.out).expect("the schema is JSON")
}

#[test]
fn the_schema_describes_each_field_with_its_default_and_allowed_values() {
    let s = schema();
    assert_eq!(s["title"], "Switchyard config");
    assert_eq!(s["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(
        s["additionalProperties"], false,
        "a misspelt key is an error"
    );
    let defs = &s["definitions"];
    let server = &defs["ServerSection"]["properties"];
    assert!(
        server["stream_idle_timeout_ms"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("stream chunks")),
        "{server}"
    );
    assert_eq!(server["listen"]["default"], "127.0.0.1:8080", "{server}");
    let strategies = defs["Strategy"].to_string();
    for s in ["weighted", "latency", "least_busy", "cost", "p2c"] {
        assert!(strategies.contains(&format!("\"{s}\"")), "{strategies}");
    }
    let channel = &defs["ChannelConfig"];
    assert!(
        channel["required"]
            .as_array()
            .is_some_and(|r| r.contains(&"name".into())),
        "{channel}"
    );
}

/// Every whole config in the repository, and `init`'s for each provider, in `dir`.
fn configs(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(format!("{ROOT}/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    all.push(format!("{ROOT}/src/config/demo.toml").into());
    all.push(format!("{ROOT}/deploy/compose/switchyard.toml").into());
    all.push(crate::deploy::configmap_config(dir));
    for p in switchyard::init::PROVIDERS.iter().map(|p| p.as_str()) {
        let out = dir.join(format!("init-{p}.toml"));
        init(p, &out);
        all.push(out);
    }
    all
}

#[test]
fn the_schema_accepts_every_config_here_and_refuses_a_misspelt_key() {
    let Some(venv) = std::env::var_os("SWITCHYARD_DEPLOY_VENV").map(PathBuf::from) else {
        skipping("SWITCHYARD_DEPLOY_VENV is not set (.ci/run makes it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.json");
    std::fs::write(&path, schema().to_string()).unwrap();
    let good = configs(dir.path());
    let example = std::fs::read_to_string(format!("{ROOT}/examples/switchyard.toml")).unwrap();
    let bad = [
        (
            "misspelt.toml",
            example.replacen("[server]\n", "[server]\nlisten_adress = \"x\"\n", 1),
            "listen_adress",
        ),
        (
            "strategy.toml",
            format!("{example}\n[routing]\ndefault_strategy = \"fastest\"\n"),
            "fastest",
        ),
    ];
    let mut files = good.clone();
    for (name, text, _) in &bad {
        assert_ne!(text, &example, "{name} changed nothing");
        files.push(dir.path().join(name));
        std::fs::write(files.last().unwrap(), text).unwrap();
    }
    let out = Command::new(venv.join("bin/python"))
        .arg(format!("{ROOT}/tests/deploy/config_schema.py"))
        .arg(&path)
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    for file in &good {
        let errors = &seen[file.to_str().unwrap()];
        assert_eq!(
            errors,
            &Value::Array(vec![]),
            "{}: {errors}",
            file.display()
        );
    }
    for (name, _, word) in &bad {
        let errors = seen[dir.path().join(name).to_str().unwrap()].to_string();
        assert!(errors.contains(word), "{name}: {errors}");
    }
}

#[test]
fn init_writes_the_schema_beside_the_config_and_names_it_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("switchyard.toml");
    init("openai", &out);
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text.lines().next(),
        Some("#:schema ./switchyard.schema.json")
    );
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("switchyard.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(written, schema());

    // A file of another's at that name is left alone.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(
        other.path().join("switchyard.schema.json"),
        "{\"mine\": true}",
    )
    .unwrap();
    let said = init("openai", &other.path().join("switchyard.toml"));
    assert!(said.contains("not a Switchyard schema"), "{}", said);
    assert_eq!(
        std::fs::read_to_string(other.path().join("switchyard.schema.json")).unwrap(),
        "{\"mine\": true}"
    );
}
