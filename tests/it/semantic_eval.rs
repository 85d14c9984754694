//! `switchyard semantic eval` end to end on `examples/semantic.toml` (the router's defaults:
//! thresholds and margin `"auto"`) with the local MiniLM model, over a labelled set written
//! for the test (`tests/fixtures/semantic/labelled.jsonl`: four intents × 20 prompts and ten
//! for the catchall, none in the examples' wording): the defaults route it right, fixed
//! thresholds of 0.5 do not, and the levels `eval` suggests reproduce its accuracy when written
//! into the config. Needs SWITCHYARD_EMBED_MODEL_DIR (fails under CI without it).

#![cfg(feature = "local-embedder")]

use serde_json::Value;

use crate::support::*;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/semantic.toml");
const LABELLED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/semantic/labelled.jsonl"
);

/// `switchyard semantic eval` of router `router` in `config` on `labelled`, to the end.
fn semantic_eval(
    config: &str,
    router: &str,
    labelled: &str,
    json: bool,
    env: &[(&str, &str)],
) -> Finished {
    let mut args = vec![
        "--log-level",
        "error",
        "semantic",
        "eval",
        "--config",
        config,
    ];
    args.extend(["--router", router, "--labelled", labelled]);
    if json {
        args.push("--json");
    }
    run_bin(&args, env)
}

/// `semantic eval --json` on `config` (a path): the report.
fn eval(config: &str, dir: &str) -> Value {
    let ran = semantic_eval(
        config,
        "auto",
        LABELLED,
        true,
        &[
            ("SWITCHYARD_EMBED_MODEL_DIR", dir),
            ("TEAM_A_KEY", "sk-team-a-0123456789"),
        ],
    );
    assert!(ran.ok, "{}", ran.err);
    serde_json::from_str(&ran.out).expect("the report is JSON")
}

/// The example config with `lines` added to its router, written to `dir`.
fn variant(
    tmp: &tempfile::TempDir,
    name: &str,
    router: &str,
    instances: &[(String, String)],
) -> String {
    let mut text = std::fs::read_to_string(EXAMPLE).unwrap().replace(
        "model = \"auto\"                     # the virtual model clients send",
        &format!("model = \"auto\"\n{router}"),
    );
    for (instance, line) in instances {
        let at = format!("name = \"{instance}\"\n");
        text = text.replace(&at, &format!("{at}{line}\n"));
    }
    let path = tmp.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn the_defaults_route_a_labelled_set_and_the_suggested_levels_reproduce_their_accuracy() {
    let Some(dir) = minilm_dir() else { return };
    // The set: four intents of 20 and ten for the catchall, none quoting an example.
    let lines: Vec<Value> = std::fs::read_to_string(LABELLED)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for intent in ["code", "translate", "math", "writing"] {
        assert_eq!(
            lines.iter().filter(|l| l["instance"] == intent).count(),
            20,
            "{intent}"
        );
    }
    let example: toml::Value = toml::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
    let examples: Vec<String> = example["routers"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| {
            i.get("examples")
                .and_then(|e| e.as_array())
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|e| e.as_str().map(str::to_lowercase))
        .collect();
    for l in &lines {
        let text = l["text"].as_str().unwrap().to_lowercase();
        assert!(
            !examples.iter().any(|e| text.contains(e.as_str())),
            "{text} quotes an example"
        );
    }

    let auto = eval(EXAMPLE, &dir);
    let accuracy = auto["accuracy"].as_f64().unwrap();
    assert_eq!(auto["prompts"], 90);
    assert!(accuracy >= 0.9, "accuracy with the defaults: {accuracy}");
    // Each of the four intents on its own, too.
    let recall = |r: &Value, name: &str| {
        r["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["instance"] == name)
            .unwrap()["recall"]
            .as_f64()
            .unwrap()
    };
    for intent in ["code", "translate", "math", "writing"] {
        assert!(
            recall(&auto, intent) >= 0.85,
            "{intent}: {}",
            recall(&auto, intent)
        );
    }
    let derived = auto["instances"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["threshold_derived"] == true);
    assert!(derived && auto["margin_derived"] == true);
    // The levels docs/semantic.md quotes for this embedder and these examples.
    for i in auto["instances"].as_array().unwrap() {
        let t = i["threshold"].as_f64().unwrap();
        assert!((0.2..=0.3).contains(&t), "{}: {t}", i["instance"]);
    }
    let margin = auto["margin"].as_f64().unwrap();
    assert!((0.03..=0.05).contains(&margin), "{margin}");
    let misrouted = auto["misrouted"].as_array().unwrap();
    assert_eq!(misrouted.len(), 90 - (accuracy * 90.0).round() as usize);
    assert!(
        misrouted
            .iter()
            .all(|m| m["line"].as_u64().is_some_and(|l| (1..=90).contains(&l)))
    );
    let rows = auto["confusion"]["rows_labelled_columns_routed"]
        .as_array()
        .unwrap();
    let total: u64 = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap())
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(total, 90, "every prompt is in the confusion table once");

    // APISIX's default level, 0.5, on the same set: most prompts fall to the catchall.
    let tmp = tempfile::tempdir().unwrap();
    let fixed = eval(&variant(&tmp, "fixed.toml", "threshold = 0.5", &[]), &dir);
    let fixed_accuracy = fixed["accuracy"].as_f64().unwrap();
    assert!(fixed_accuracy < 0.5, "fixed 0.5: {fixed_accuracy}");

    // The suggested levels, written into the config, give the accuracy eval reported for them.
    for report in [&auto, &fixed] {
        let s = &report["suggested"];
        let per: Vec<(String, String)> = s["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["instance"].as_str().unwrap().to_string(),
                    format!("threshold = {}", t["threshold"]),
                )
            })
            .collect();
        let path = variant(
            &tmp,
            "suggested.toml",
            &format!("margin = {}", s["margin"]),
            &per,
        );
        let applied = eval(&path, &dir);
        assert_eq!(applied["accuracy"], s["accuracy"], "{path}");
        assert!(s["accuracy"].as_f64() >= report["accuracy"].as_f64());
    }
}

#[test]
fn eval_names_the_line_of_a_bad_label_and_prints_a_table_for_people() {
    let Some(dir) = minilm_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"text\": \"hi\", \"instance\": \"chat\"}\n{\"text\": \"x\", \"instance\": \"poetry\"}\n",
    )
    .unwrap();
    let env = [
        ("SWITCHYARD_EMBED_MODEL_DIR", dir.as_str()),
        ("TEAM_A_KEY", "sk-team-a-0123456789"),
    ];
    let ran = semantic_eval(EXAMPLE, "auto", bad.to_str().unwrap(), false, &env);
    assert!(!ran.ok);
    assert!(
        ran.err.contains("line 2") && ran.err.contains("poetry") && ran.err.contains("writing"),
        "{}",
        ran.err
    );
    // An embedder that does not answer is an error here, never a fall to the catchall.
    let down = tmp.path().join("down.toml");
    let local = "embedder = { kind = \"local\", model_dir = \"${SWITCHYARD_EMBED_MODEL_DIR}\" }";
    let text = std::fs::read_to_string(EXAMPLE).unwrap().replace(
        local,
        "embedder = { kind = \"channel\", channel = \"embeddings\", model = \"e\" }",
    ) + "\n[[channels]]\nname = \"embeddings\"\nprovider = \"openai\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\napi_keys = [\"sk-unused-000000\"]\nmodels = [\"e\"]\n";
    assert!(text.contains("kind = \"channel\""));
    std::fs::write(&down, text).unwrap();
    let ran = semantic_eval(down.to_str().unwrap(), "auto", LABELLED, false, &env);
    assert!(
        !ran.ok && ran.err.contains("could not be embedded"),
        "{}",
        ran.err
    );
    let ran = semantic_eval(EXAMPLE, "nope", LABELLED, false, &env);
    assert!(!ran.ok && ran.err.contains("nope"), "{}", ran.err);
    let ran = semantic_eval(EXAMPLE, "auto", LABELLED, false, &env);
    assert!(ran.ok, "{}", ran.err);
    for part in [
        "accuracy",
        "precision",
        "recall",
        "confusion",
        "chat*",
        "router margin =",
    ] {
        assert!(ran.out.contains(part), "{part}: {}", ran.out);
    }
    // `switchyard explain` shows the levels the decision was made by.
    let ran = run_bin(
        &[
            "--log-level",
            "error",
            "explain",
            "--config",
            EXAMPLE,
            "--key",
            "team-a",
            "--model",
            "auto",
            "--prompt",
            "Write a Rust function that parses a CSV line into fields",
        ],
        &env,
    );
    assert!(ran.ok, "{}", ran.err);
    let plan: Value = serde_json::from_str(&ran.out).unwrap();
    let levels = &plan["semantic"][0]["levels"];
    assert_eq!(plan["semantic"][0]["winner"], "code");
    assert_eq!(levels["thresholds"].as_array().unwrap().len(), 5);
    assert!(
        levels["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["derived"] == true)
    );
    assert!(levels["margin"].as_f64().is_some() && levels["margin_derived"] == true);
}
