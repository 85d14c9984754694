//! Single sign-on for the console against a real OpenID provider (`oidc-provider` from npm,
//! started here with `tests/sso/provider.mjs`), driven through its login page by Playwright in
//! Chromium (`tests/browser/sso.py`), over two replicas sharing Redis; and `[sso]`'s
//! refusals of what cannot work.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

const SECRET: &str = "sso-client-secret-0123456789";
/// What the gateways' config names until their ports are known.
const PLACEHOLDER: &str = "http://127.0.0.1:1/console/sso/callback";

/// The provider's process, killed with the test.
struct Provider {
    child: std::process::Child,
    issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn provider(dir: &str, port: u16, redirect: &str, logout: &[String]) -> Provider {
    // ESM resolves packages from the script's own place: the script goes beside them.
    let script = format!("{dir}/provider.mjs");
    std::fs::write(&script, include_str!("../sso/provider.mjs")).expect("write provider.mjs");
    let child = std::process::Command::new("node")
        .arg(&script)
        .env("PORT", port.to_string())
        .env("CLIENT_SECRET", SECRET)
        .env("REDIRECT_URIS", redirect)
        .env("LOGOUT_URIS", logout.join(","))
        .env(
            "GROUPS",
            r#"{"alice": ["everyone", "sy-admins"], "victor": ["sy-viewers"], "mallory": ["everyone"]}"#,
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("node runs");
    let issuer = format!("http://127.0.0.1:{port}");
    let discovery = format!("{issuer}/.well-known/openid-configuration");
    until(
        "the provider answers",
        Duration::from_secs(20),
        async || {
            client()
                .get(&discovery)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        },
    )
    .await;
    Provider { child, issuer }
}

/// The test key in team `platform` (under `acme`, beside `data`), and `[sso]` at `issuer`
/// with a mapping per role; `prefix`: the replicas' Redis, when they share one.
fn config(issuer: &str, prefix: Option<&str>) -> String {
    let state = prefix.map_or(String::new(), |p| {
        format!("[state]\nurl = \"{REDIS_URL}\"\nprefix = \"{p}\"\n")
    });
    format!(
        "team = \"platform\"\n\n\
         [[teams]]\nname = \"acme\"\n\n[[teams]]\nname = \"platform\"\nparent = \"acme\"\n\n\
         [[teams]]\nname = \"data\"\nparent = \"acme\"\n\n\
         [sso]\nissuer = \"{issuer}\"\nclient_id = \"switchyard\"\nclient_secret = \"{SECRET}\"\n\
         scopes = [\"email\", \"groups\"]\nredirect_url = \"{PLACEHOLDER}\"\n\n\
         [[sso.mappings]]\ngroup = \"sy-admins\"\nrole = \"admin\"\nteams = [\"platform\"]\n\n\
         [[sso.mappings]]\ngroup = \"sy-viewers\"\nrole = \"viewer\"\n\n{state}"
    )
}

/// The gateway's config with its callback at `callback`, reloaded.
async fn call_back_to(gw: &Gateway, callback: &str) {
    let text = std::fs::read_to_string(&gw.config_path).expect("config");
    std::fs::write(&gw.config_path, text.replace(PLACEHOLDER, callback)).expect("config");
    assert_eq!(gw.reload().await.status(), 200);
}

/// Needs node with `oidc-provider` (`SWITCHYARD_OIDC_DIR`, which `.ci/run` fills), the Python
/// with Playwright (`SWITCHYARD_PY`) and `/usr/bin/chromium`; without them it says so and
/// passes, except under `CI` or `SWITCHYARD_BROWSER_REQUIRED`.
#[tokio::test]
async fn sso_in_a_browser() {
    let Some(py) = browser_python() else {
        return;
    };
    let dir = std::env::var("SWITCHYARD_OIDC_DIR").unwrap_or_default();
    if !std::path::Path::new(&format!("{dir}/node_modules/oidc-provider")).exists() {
        skipping("SWITCHYARD_OIDC_DIR with oidc-provider installed is needed");
        return;
    }
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let up = mock(text_spec("ok")).await;
    let channels = openai_channel("a", &up.base_url(), 1, "");
    let prefix = redis_prefix("sso_replicas");
    // One store for both replicas (what the admins write), one Redis (sign-outs).
    let pg = Postgres::fresh("sso_replicas").await;
    let cfg = format!(
        "{}{}",
        config(&issuer, Some(&prefix)),
        store_section(&pg.url, Some(&master_key(9)))
    );
    let a = gateway_full("", &cfg, &channels).await;
    let b = gateway_full("", &cfg, &channels).await;
    wait_connected(&a, true).await;
    wait_connected(&b, true).await;
    let callback = format!("{}/console/sso/callback", a.url);
    call_back_to(&a, &callback).await;
    call_back_to(&b, &callback).await;
    let logout = [format!("{}/console", a.url), format!("{}/console", b.url)];
    let p = provider(&dir, port, &callback, &logout).await;
    assert_eq!(p.issuer, issuer);
    let env = [("SY_A", a.url.as_str()), ("SY_B", b.url.as_str())];
    let (ok, _, text) = run_browser_script(&py, "sso.py", 600, &env).await;
    assert!(ok, "{text}");
    assert!(text.contains("sso: every step passed"), "{text}");
}

#[tokio::test]
async fn sso_settings_that_cannot_work_are_refused_by_field() {
    let up = mock(text_spec("ok")).await;
    let base = config("https://login.example.com", None);
    // (what is changed, to what, the field refused; none: the settings as they are load)
    let rows = [
        ("", "", ""),
        (
            "https://login.example.com",
            "http://login.example.com",
            "sso.issuer",
        ),
        (
            PLACEHOLDER,
            "http://127.0.0.1:1/elsewhere",
            "sso.redirect_url",
        ),
        (SECRET, "short", "sso.client_secret"),
        (
            "teams = [\"platform\"]",
            "teams = [\"nobody\"]",
            "sso.mappings[0].teams",
        ),
        (
            "group = \"sy-viewers\"",
            "group = \"sy-admins\"",
            "sso.mappings[1].group",
        ),
    ];
    for (from, to, field) in rows {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        let cfg = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN}\"\n\
             [log]\nsqlite_path = \"{}\"\n\n[[keys]]\nname = \"team-a\"\nkey = \"{KEY}\"\n{}\n{}",
            dir.path().join("log.db").display(),
            base.replace(from, to),
            openai_channel("a", &up.base_url(), 1, "")
        );
        std::fs::write(&path, cfg).unwrap();
        let err = switchyard::config::load_file(&path, &Default::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        if field.is_empty() {
            assert_eq!(err, "", "the settings as written load");
        } else {
            assert!(err.contains(field), "{field}: {err}");
        }
    }
}

const PAT: &str = "platform-admin-token-0002";
const VERA: &str = "viewer-admin-token-00003";

#[tokio::test]
async fn personal_tokens_carry_their_minters_role_and_scope_and_are_revoked_everywhere() {
    let up = mock(text_spec("ok")).await;
    let pg = Postgres::fresh("admin_tokens").await;
    let cfg = format!(
        "team = \"platform\"\n\n[[teams]]\nname = \"platform\"\n\n[[teams]]\nname = \"data\"\n\n\
         [[admins]]\nname = \"pat\"\ntoken = \"{PAT}\"\nrole = \"admin\"\nteams = [\"platform\"]\n\n\
         [[admins]]\nname = \"vera\"\ntoken = \"{VERA}\"\nrole = \"viewer\"\n{}",
        store_section(&pg.url, Some(&master_key(4)))
    );
    let channels = openai_channel("a", &up.base_url(), 1, "");
    let a = gateway_full("", &cfg, &channels).await;
    let b = gateway_full("", &cfg, &channels).await;
    let (s, minted) = admin(
        &a,
        "POST",
        "/admin/tokens",
        PAT,
        Some(json!({"name": "ci", "expires_in_days": 7})),
    )
    .await;
    assert_eq!(s, 201, "{minted}");
    let token = minted["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("sy-adm-"), "{minted}");
    assert_eq!(
        (minted["role"].clone(), minted["teams"].clone()),
        (json!("admin"), json!(["platform"]))
    );
    // On the other replica, the token is its minter: the same team, nothing more.
    // (method, path, body, status)
    let calls = [
        ("GET", "/admin/keys", None, 200),
        (
            "POST",
            "/admin/keys",
            Some(json!({"name": "k-data", "team": "data"})),
            403,
        ),
        (
            "POST",
            "/admin/keys",
            Some(json!({"name": "k-plat", "team": "platform"})),
            201,
        ),
        ("GET", "/admin/config", None, 403),
    ];
    for (method, path, body, status) in calls {
        let (s, v) = admin(&b, method, path, &token, body).await;
        assert_eq!(s, status, "{method} {path}: {v}");
    }
    let (_, keys) = admin(&b, "GET", "/admin/keys", &token, None).await;
    let names: Vec<&str> = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["name"].as_str())
        .collect();
    assert_eq!(names, ["team-a", "k-plat"], "{keys}");
    // Listed to its owner and to an admin of everything, never with its secret or hash.
    for who in [PAT, ADMIN] {
        let (_, list) = admin(&a, "GET", "/admin/tokens", who, None).await;
        let text = list.to_string();
        assert!(
            text.contains(minted["id"].as_str().unwrap())
                && !text.contains(&token)
                && !text.contains("hash"),
            "{list}"
        );
    }
    let (_, audit) = admin(&a, "GET", "/admin/audit", ADMIN, None).await;
    assert!(
        audit.to_string().contains("admin_tokens") && !audit.to_string().contains(&token),
        "{audit}"
    );
    // A viewer mints nothing; a made-up token is nobody.
    let (s, _) = admin(
        &a,
        "POST",
        "/admin/tokens",
        VERA,
        Some(json!({"name": "v"})),
    )
    .await;
    assert_eq!(s, 403);
    let (s, _) = admin(
        &a,
        "GET",
        "/admin/keys",
        "sy-adm-made-up-000000000000000000000000000",
        None,
    )
    .await;
    assert_eq!(s, 401);
    // Revoked on one replica: refused on the other at once.
    let id = minted["id"].as_str().unwrap();
    let (s, v) = admin(&a, "DELETE", &format!("/admin/tokens/{id}"), PAT, None).await;
    assert_eq!(s, 204, "{v}");
    let (s, _) = admin(&b, "GET", "/admin/keys", &token, None).await;
    assert_eq!(s, 401);
}
