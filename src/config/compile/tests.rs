//! Compiling configs: what is accepted, and that every refusal names its field.

use crate::config::load_str;
use crate::provider::HttpClients;

fn load(text: &str) -> Result<crate::config::Snapshot, String> {
    load_str(text, "t.toml", &|_| None, &HttpClients::default()).map_err(|e| e.to_string())
}

const BASE: &str = r#"
    [[channels]]
    name = "a"
    provider = "mock"
    models = ["m", { name = "big", upstream = "big-2024" }]
    priority = 1
    [[channels]]
    name = "b"
    provider = "openai"
    base_url = "http://127.0.0.1:9/v1"
    api_keys = ["k1"]
    models = ["m"]
    priority = 2
"#;

#[test]
fn compiles_models_to_channels() {
    let s = load(BASE).unwrap();
    assert_eq!(s.models["m"].len(), 2);
    assert_eq!(&*s.models["big"][0].upstream_model, "big-2024");
    let d = s.describe();
    assert!(d.contains("tier 1: a (mock"), "{d}");
    assert!(d.contains("tier 2: b (openai"), "{d}");
    assert!(d.contains("upstream model big-2024"), "{d}");
}

#[test]
fn attempt_timeout_longer_than_deadline_is_an_error() {
    let text = format!(
        "[server]\nrequest_timeout_ms = 1000\n{}",
        BASE.replace("priority = 2", "priority = 2\ntimeout_ms = 5000")
    );
    let err = load(&text).unwrap_err();
    assert!(err.contains("channels[1].timeout_ms"), "{err}");
    // Defaults shrink to fit a short deadline instead of failing.
    let text = format!("[server]\nrequest_timeout_ms = 1000\n{BASE}");
    let s = load(&text).unwrap();
    assert_eq!(s.channels[0].timeout.as_millis(), 1000);
}

#[test]
fn duplicate_channel_names_and_bad_urls_are_errors() {
    let err = load(&BASE.replace("name = \"b\"", "name = \"a\"")).unwrap_err();
    assert!(err.contains("channels[1].name"), "{err}");
    let err = load(&BASE.replace("http://127.0.0.1:9/v1", "not a url")).unwrap_err();
    assert!(err.contains("channels[1].base_url"), "{err}");
}

#[test]
fn openai_channel_needs_base_url_and_weight_must_be_positive() {
    let err = load(&BASE.replace("base_url = \"http://127.0.0.1:9/v1\"", "")).unwrap_err();
    assert!(err.contains("channels[1].base_url"), "{err}");
    let err = load(&BASE.replace("priority = 1", "priority = 1\nweight = 0")).unwrap_err();
    assert!(err.contains("channels[0].weight"), "{err}");
}

#[test]
fn demo_key_is_refused_outside_demo_mode() {
    let text = format!("[[keys]]\nname = \"x\"\nkey = \"sk-switchyard-demo\"\n{BASE}");
    let err = load_str(&text, "t.toml", &|_| None, &HttpClients::default());
    // load_str compiles as demo (no file), so it is accepted there...
    assert!(err.is_ok());
    // ...but never from a real file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, &text).unwrap();
    let err = crate::config::load_file(&path, &HttpClients::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("keys[0].key"), "{err}");
}

#[test]
fn short_secrets_and_misplaced_fields_are_refused_by_name() {
    let cases = [
        (
            format!("[server]\nadmin_token = \"short\"\n{BASE}"),
            "server.admin_token",
        ),
        (
            format!("[[keys]]\nname = \"k\"\nkey = \"sk-1\"\n{BASE}"),
            "keys[0].key",
        ),
        (
            BASE.replace(
                "models = [\"m\", {",
                "api_keys = [\"x\"]\nmodels = [\"m\", {",
            ),
            "channels[0].api_keys",
        ),
        (
            format!("[server]\nlisten = \"localhost:80\"\n{BASE}"),
            "server.listen",
        ),
        (
            BASE.replace(
                "priority = 2",
                "priority = 2\nconnect_timeout_ms = 5000\ntimeout_ms = 1000",
            ),
            "channels[1].connect_timeout_ms",
        ),
    ];
    for (text, field) in cases {
        let err = load(&text).unwrap_err();
        assert!(err.contains(field), "{field}: {err}");
    }
}

#[test]
fn authenticate_finds_the_matching_key() {
    let text = format!(
        "[[keys]]\nname = \"x\"\nkey = \"sk-xxxxxxxx1\"\n[[keys]]\nname = \"y\"\nkey = \"sk-yyyyyyyy2\"\n{BASE}"
    );
    let s = load(&text).unwrap();
    assert_eq!(&*s.authenticate("sk-yyyyyyyy2").unwrap().name, "y");
    assert!(s.authenticate("sk-yyyyyyyy").is_none());
    assert!(s.authenticate("").is_none());
}

#[test]
fn prices_come_from_the_channel_then_the_model_then_the_family() {
    let text = format!(
        "{}\n{}",
        BASE.replace(
            "priority = 2",
            "priority = 2\nprice = { input = 0.5, output = 1 }"
        )
        .replace("\"m\", {", "\"m\", \"gpt-4o\", {"),
        r#"
        [[models]]
        name = "m"
        price = { input = 1, output = 2 }
        [[models]]
        name = "big*"
        price = { input = 3, output = 4, cached_input = 0.3 }
        "#
    );
    let s = load(&text).unwrap();
    let (a, b) = (&s.channels[0], &s.channels[1]);
    let input = |ch, model, up| s.price(ch, model, up).map(|p| p.base.input);
    assert_eq!(input(b, "m", "m"), Some(500_000));
    assert_eq!(input(a, "m", "m"), Some(1_000_000));
    // A price-only glob entry prices the model without claiming a context window.
    assert_eq!(input(a, "big", "big-2024"), Some(3_000_000));
    assert!(s.catalog.lookup("big").is_none());
    assert_eq!(input(a, "gpt-4o", "gpt-4o"), Some(2_500_000));
    assert_eq!(input(a, "unknown", "unknown"), None);
    let err = load(&BASE.replace(
        "priority = 2",
        "priority = 2\nprice = { input = 1, output = -2 }",
    ))
    .unwrap_err();
    assert!(err.contains("channels[1].price.output"), "{err}");
    let err = load(&format!(
        "{BASE}\n[[models]]\nname = \"m\"\nprice = {{ input = 1, output = 1, tiers = [{{ above = 1, input = 1e9, output = 1 }}] }}"
    ))
    .unwrap_err();
    assert!(err.contains("models[0].price.tiers[0].input"), "{err}");
}

#[test]
fn a_models_strategy_alone_needs_no_window_and_its_fields_are_still_checked() {
    let with = |entry: &str| load(&format!("{BASE}\n[[models]]\nname = \"m\"\n{entry}\n"));
    // A strategy alone (a model with no built-in family) is enough; the model routes by it.
    let s = with("strategy = \"latency\"").unwrap();
    assert_eq!(s.routing.strategy("m"), crate::config::Strategy::Latency);
    assert_eq!(
        s.routing.strategy("other"),
        crate::config::Strategy::Weighted
    );
    assert!(s.routing.measured);
    // Whatever else it says is checked, alone or with a price.
    for (entry, field) in [
        ("strategy = \"cost\"\ntrim_to = 2.0", "models[0].trim_to"),
        (
            "price = { input = 1, output = 1 }\ntrim_to = 0.0",
            "models[0].trim_to",
        ),
        ("strategy = \"fastest\"", "strategy"),
    ] {
        let err = with(entry).unwrap_err();
        assert!(err.contains(field), "{entry}: {err}");
    }
}

#[test]
fn a_cache_that_could_not_work_is_refused_by_its_field() {
    let key = "[[keys]]\nname = \"k\"\nkey = \"sk-0123456789\"";
    let cases = [
        // A policy with the cache off would do nothing.
        (
            format!("{key}\ncache = {{ mode = \"exact\" }}\n{BASE}"),
            "keys[0].cache",
        ),
        (
            format!("[[models]]\nname = \"m\"\ncache = {{ mode = \"off\" }}\n{BASE}"),
            "models[0].cache",
        ),
        // Semantic without an embedder, or with the one that matches spelling.
        (
            format!("[cache]\nenabled = true\nmode = \"semantic\"\n{BASE}"),
            "cache.embedder",
        ),
        (
            format!(
                "[cache]\nenabled = true\nembedder = {{ kind = \"hashed\" }}\n\
                 {key}\ncache = {{ mode = \"semantic\" }}\n{BASE}"
            ),
            "cache.embedder",
        ),
        (
            format!(
                "[cache]\nenabled = true\nmode = \"semantic\"\n\
                 embedder = {{ kind = \"channel\", channel = \"nope\", model = \"e\" }}\n{BASE}"
            ),
            "cache.embedder.channel",
        ),
        // Redis entries need [state]'s Redis.
        (
            format!("[cache]\nenabled = true\nbackend = \"redis\"\n{BASE}"),
            "cache.backend",
        ),
        (
            format!("[cache]\nenabled = true\nsimilarity = 1.5\n{BASE}"),
            "cache.similarity",
        ),
    ];
    for (text, field) in cases {
        let err = load(&text).unwrap_err();
        assert!(err.contains(field), "{field}: {err}");
    }
    // A model's policy alone needs no window (it has no built-in family).
    let ok = format!(
        "[cache]\nenabled = true\n[[models]]\nname = \"big\"\ncache = {{ ttl_seconds = 5 }}\n{BASE}"
    );
    let snap = load(&ok).unwrap();
    let p = snap.cache.unwrap().models["big"];
    assert_eq!(p.ttl, Some(std::time::Duration::from_secs(5)));
}

#[test]
fn a_team_key_carries_its_levels_and_its_groups_stay_within_its_teams() {
    let teams = r#"
        [[teams]]
        name = "org"
        groups = ["g1", "g2"]
        budget = { usd = 10 }
        [[teams]]
        name = "t"
        parent = "org"
        models = ["m"]
        user_limits = { rpm = 5 }
    "#;
    let base = BASE
        .replace("priority = 1", "priority = 1\ngroups = [\"g1\"]")
        .replace("priority = 2", "priority = 2\ngroups = [\"g2\"]");
    let key = |extra: &str| {
        format!(
            "[[keys]]\nname = \"k\"\nkey = \"sk-0123456789\"\nteam = \"t\"\n{extra}\n{teams}\n{base}"
        )
    };
    let s = load(&key("")).unwrap();
    let k = &s.keys[0];
    let m = k.team.as_deref().unwrap();
    // Only the levels with limits are counted; the organisation is the hash tag.
    let levels: Vec<&str> = m.levels.iter().map(|(s, _)| &**s).collect();
    assert_eq!((levels, &*m.tag), (vec!["team:org"], "team:org"));
    assert_eq!(
        k.groups.iter().map(|g| &**g).collect::<Vec<_>>(),
        ["g1", "g2"]
    );
    assert!(m.allows_model("m") && !m.allows_model("big"));
    let users = m.users.as_ref().unwrap();
    assert_eq!(&*users.scope("bob"), "user:t/bob");
    assert_eq!(users.limits.max_tracked, 100_000);
    // (the key's extra lines, the field refused)
    let cases = [
        ("groups = [\"g3\"]", "keys[0].groups"),
        ("team = \"nobody\"", "keys[0]"),
    ];
    for (extra, field) in cases {
        let text = key(extra).replace("team = \"t\"\nteam = \"nobody\"", "team = \"nobody\"");
        let err = load(&text).unwrap_err();
        assert!(err.contains(field), "{extra}: {err}");
    }
}
