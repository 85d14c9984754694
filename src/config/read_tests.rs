//! Reading the file: interpolation, field paths in errors, unknown fields refused.

use super::file::DEMO_TOML;
use super::read::{expand, parse};

fn env(name: &str) -> Option<String> {
    (name == "SET").then(|| "value".to_string())
}

#[test]
fn expands_set_variables_and_names_missing_ones() {
    let mut env = env;
    assert_eq!(expand("a-${SET}-b", &mut env).unwrap(), "a-value-b");
    assert_eq!(expand("plain", &mut env).unwrap(), "plain");
    let err = expand("${MISSING}", &mut env).unwrap_err();
    assert!(err.contains("MISSING"), "{err}");
    assert!(expand("${SET", &mut env).is_err());
    assert!(expand("${BAD NAME}", &mut env).is_err());
}

#[test]
fn missing_variable_error_names_the_field() {
    let text = r#"
        [[channels]]
        name = "a"
        provider = "openai"
        base_url = "http://127.0.0.1:1"
        api_keys = ["${NOPE_NOT_SET}"]
        models = ["m"]
    "#;
    let err = parse(text, "t.toml", &env).unwrap_err().to_string();
    assert!(err.contains("channels[0].api_keys[0]"), "{err}");
    assert!(err.contains("NOPE_NOT_SET"), "{err}");
}

#[test]
fn errors_never_quote_an_interpolated_secret() {
    let text = r#"
        [[channels]]
        name = "a"
        provider = "openai"
        base_url = "http://127.0.0.1:1"
        api_keys = "${SET}"
        models = ["m"]
    "#;
    let err = parse(text, "t.toml", &env).unwrap_err().to_string();
    assert!(err.contains("channels[0].api_keys"), "{err}");
    assert!(!err.contains("value"), "{err}");
}

#[test]
fn type_errors_name_the_field_path() {
    let text = r#"
        [[channels]]
        name = "a"
        provider = "mock"
        models = ["m"]
        [[channels]]
        name = "b"
        provider = "mock"
        models = ["m"]
        priority = "high"
    "#;
    let err = parse(text, "t.toml", &env).unwrap_err().to_string();
    assert!(err.contains("channels[1].priority"), "{err}");
}

#[test]
fn unknown_fields_are_errors() {
    let text = r#"
        [server]
        listen = "127.0.0.1:0"
        colour = "blue"
        [[channels]]
        name = "a"
        provider = "mock"
        models = ["m"]
    "#;
    let err = parse(text, "t.toml", &env).unwrap_err().to_string();
    assert!(err.contains("colour"), "{err}");
}

#[test]
fn unknown_keys_in_a_model_table_are_errors() {
    let text = r#"
        [[channels]]
        name = "a"
        provider = "mock"
        models = ["x", { name = "m", upstream = "u", weight = 3 }]
    "#;
    let err = parse(text, "t.toml", &env).unwrap_err().to_string();
    assert!(
        err.contains("channels[0].models[1]") && err.contains("weight"),
        "{err}"
    );
    let ok = parse(&text.replace(", weight = 3", ""), "t.toml", &env).unwrap();
    assert_eq!(ok.channels[0].models[1].upstream(), "u");
}

#[test]
fn demo_config_parses() {
    let cfg = parse(DEMO_TOML, "<demo>", &env).unwrap();
    assert_eq!(cfg.channels.len(), 2);
}
