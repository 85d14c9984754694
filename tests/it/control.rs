//! The control plane, one conformance suite over both stores (an SQLite file and PostgreSQL):
//! objects made through the admin API are served by every replica within 2 s, disabled or
//! revoked ones stop within 2 s, viewers only read, file entries are read-only, and every
//! refusal has its status and code.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// What every replica must have picked up a change within.
const REPLICAS_WITHIN: Duration = Duration::from_secs(2);

fn channel_body(name: &str, base_url: &str) -> Value {
    json!({
        "name": name, "provider": "openai", "base_url": base_url,
        "api_keys": [UPSTREAM_KEY], "models": ["m"],
    })
}

async fn chat_status(gw: &Gateway, key: &str) -> u16 {
    gw.post_as("/v1/chat/completions", key, &[], chat_body(false))
        .await
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_channel_made_through_the_api_serves_on_every_replica_and_disabling_stops_it() {
    let stores = Stores::new("ctl_channel").await;
    let m = master_key(1);
    for url in stores.urls() {
        let up = mock(text_spec("from the api channel")).await;
        let one = on_store(&url, Some(&m), "").await;
        let two = on_store(&url, Some(&m), "").await;
        // No channel yet: nothing serves m.
        assert_ne!(chat_status(&one, KEY).await, 200, "{url}");
        let (s, made) = as_admin(
            &one,
            "POST",
            "/admin/channels",
            Some(channel_body("api-a", &up.base_url())),
        )
        .await;
        assert_eq!(s, 201, "{url}: {made}");
        assert_eq!(made["source"], "api");
        assert_eq!(made["api_keys"], json!(["…-key"]), "{made}");
        // The replica that wrote serves at once; the other within the bound.
        assert_eq!(chat_status(&one, KEY).await, 200, "{url}");
        until(
            "the second replica serves the new channel",
            REPLICAS_WITHIN,
            async || chat_status(&two, KEY).await == 200,
        )
        .await;
        let (_, listed) = as_admin(&two, "GET", "/admin/channels", None).await;
        let row = &listed["data"][0];
        assert_eq!(
            (row["name"].as_str(), row["source"].as_str()),
            (Some("api-a"), Some("api")),
            "{listed}"
        );
        assert_eq!(row["health"]["circuit"], "closed", "{row}");
        // Disabled: out of routing on both replicas, the upstream sees no more traffic.
        let (s, patched) = as_admin(
            &one,
            "PATCH",
            "/admin/channels/api-a",
            Some(json!({"enabled": false})),
        )
        .await;
        assert_eq!(s, 200, "{url}: {patched}");
        assert_eq!(patched["enabled"], false);
        assert_eq!(
            patched["api_keys"],
            json!(["…-key"]),
            "a patch keeps the sealed key: {patched}"
        );
        until(
            "the second replica stops routing to it",
            REPLICAS_WITHIN,
            async || chat_status(&two, KEY).await != 200,
        )
        .await;
        let seen = up.requests();
        assert_ne!(chat_status(&one, KEY).await, 200);
        assert_ne!(chat_status(&two, KEY).await, 200);
        assert_eq!(up.requests(), seen, "{url}: a disabled channel got traffic");
        // Enabled again, the key it kept sealed still works.
        as_admin(
            &one,
            "PATCH",
            "/admin/channels/api-a",
            Some(json!({"enabled": true})),
        )
        .await;
        assert_eq!(chat_status(&one, KEY).await, 200, "{url}");
        let got = up.received();
        let auth = got.last().and_then(|r| {
            r.headers
                .get("authorization")?
                .to_str()
                .ok()
                .map(str::to_string)
        });
        assert_eq!(auth, Some(format!("Bearer {UPSTREAM_KEY}")), "{url}");
    }
}

#[tokio::test]
async fn a_revoked_key_gets_401_on_every_replica() {
    let stores = Stores::new("ctl_keys").await;
    let m = master_key(2);
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let file = openai_channel("file-a", &up.base_url(), 1, "");
        let one = on_store(&url, Some(&m), &file).await;
        let two = on_store(&url, Some(&m), &file).await;
        let (s, made) = as_admin(&one, "POST", "/admin/keys", Some(json!({"name": "svc"}))).await;
        assert_eq!(s, 201, "{url}: {made}");
        let key = made["key"].as_str().expect("the new key, once").to_string();
        assert!(key.starts_with("sk-sy-") && key.len() == 38, "{key}");
        assert_eq!(chat_status(&one, &key).await, 200, "{url}");
        until(
            "the second replica takes the key",
            REPLICAS_WITHIN,
            async || chat_status(&two, &key).await == 200,
        )
        .await;
        // Never shown again.
        let (_, read) = as_admin(&two, "GET", "/admin/keys/svc", None).await;
        assert_eq!(read["source"], "api");
        assert!(
            read.get("key").is_none() && read.get("key_hash").is_none(),
            "{read}"
        );
        let (s, gone) = as_admin(&one, "DELETE", "/admin/keys/svc", None).await;
        assert_eq!((s, &gone["deleted"]), (200, &json!(true)), "{gone}");
        assert_eq!(chat_status(&one, &key).await, 401, "{url}");
        until(
            "the second replica refuses the revoked key",
            REPLICAS_WITHIN,
            async || chat_status(&two, &key).await == 401,
        )
        .await;
        // Deleting again changes nothing and is no error.
        let (s, _) = as_admin(&one, "DELETE", "/admin/keys/svc", None).await;
        assert_eq!(s, 200);
        // A key given by the admin, with an expiry already past, is refused.
        let body = json!({"name": "old", "key": "sk-given-key-0001", "expires_at": "2020-01-01T00:00:00Z"});
        assert_eq!(
            as_admin(&one, "POST", "/admin/keys", Some(body)).await.0,
            201
        );
        assert_eq!(chat_status(&one, "sk-given-key-0001").await, 401);
        let fresh = json!({"name": "new", "key": "sk-given-key-0002", "expires_at": "2999-01-01T00:00:00Z"});
        assert_eq!(
            as_admin(&one, "POST", "/admin/keys", Some(fresh)).await.0,
            201
        );
        assert_eq!(chat_status(&one, "sk-given-key-0002").await, 200);
    }
}

const VIEWER: &str = "viewer-token-0123456789";
const SCOPED: &str = "scoped-token-0123456789";

fn admins() -> String {
    format!(
        "[[admins]]\nname = \"vera\"\ntoken = \"{VIEWER}\"\nrole = \"viewer\"\n\n\
         [[admins]]\nname = \"sam\"\ntoken = \"{SCOPED}\"\nrole = \"admin\"\ngroups = [\"team-b\"]\n\n"
    )
}

#[tokio::test]
async fn viewers_read_file_entries_are_read_only_and_scoped_admins_stay_in_their_groups() {
    let stores = Stores::new("ctl_roles").await;
    let m = master_key(3);
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let rest = format!(
            "{}{}",
            admins(),
            openai_channel("file-a", &up.base_url(), 1, "")
        );
        // The test key uses the default group only, so team-b's channels serve none of its.
        let key_and_store = format!("groups = [\"default\"]\n{}", store_section(&url, Some(&m)));
        let gw = gateway_full("", &key_and_store, &rest).await;
        let (s, list) = admin(&gw, "GET", "/admin/channels", VIEWER, None).await;
        assert_eq!(s, 200, "{list}");
        assert_eq!(list["data"][0]["source"], "file");
        assert_eq!(list["data"][0]["api_keys"], json!(["…-key"]));
        let new = channel_body("api-b", &up.base_url());
        let r = admin(&gw, "POST", "/admin/channels", VIEWER, Some(new.clone())).await;
        assert_eq!(code(&r), (403, "forbidden"), "{}", r.1);
        // File entries: read-only, and their names are taken.
        let r = as_admin(
            &gw,
            "PATCH",
            "/admin/channels/file-a",
            Some(json!({"weight": 3})),
        )
        .await;
        assert_eq!(code(&r), (409, "read_only"), "{}", r.1);
        let r = as_admin(&gw, "DELETE", "/admin/channels/file-a", None).await;
        assert_eq!(code(&r), (409, "read_only"), "{}", r.1);
        let r = as_admin(
            &gw,
            "POST",
            "/admin/channels",
            Some(channel_body("file-a", &up.base_url())),
        )
        .await;
        assert_eq!(code(&r), (409, "already_exists"), "{}", r.1);
        // A duplicate of a store entry is refused too.
        assert_eq!(
            as_admin(&gw, "POST", "/admin/channels", Some(new.clone()))
                .await
                .0,
            201
        );
        let r = as_admin(&gw, "POST", "/admin/channels", Some(new)).await;
        assert_eq!(code(&r), (409, "already_exists"), "{}", r.1);
        // The scoped admin sees only team-b's, and may only make team-b's.
        let (_, mine) = admin(&gw, "GET", "/admin/channels", SCOPED, None).await;
        assert_eq!(mine["data"], json!([]), "{mine}");
        let mut theirs = channel_body("api-c", &up.base_url());
        let r = admin(&gw, "POST", "/admin/channels", SCOPED, Some(theirs.clone())).await;
        assert_eq!(code(&r), (403, "out_of_scope"), "{}", r.1);
        theirs["groups"] = json!(["team-b"]);
        assert_eq!(
            admin(&gw, "POST", "/admin/channels", SCOPED, Some(theirs.clone()))
                .await
                .0,
            201
        );
        // Keys: team-b's only; a key with no groups reaches every channel, so it is no group's.
        let (s, _) = admin(
            &gw,
            "POST",
            "/admin/keys",
            SCOPED,
            Some(json!({"name": "all"})),
        )
        .await;
        assert_eq!(s, 403);
        let mine_key = json!({"name": "b-svc", "groups": ["team-b"]});
        assert_eq!(
            admin(&gw, "POST", "/admin/keys", SCOPED, Some(mine_key))
                .await
                .0,
            201
        );
        let (_, keys) = admin(&gw, "GET", "/admin/keys", SCOPED, None).await;
        assert_eq!(keys["data"].as_array().map(Vec::len), Some(1), "{keys}");
        // Once a key of every group exists, a team-b channel would serve it too: refused.
        assert_eq!(
            as_admin(&gw, "POST", "/admin/keys", Some(json!({"name": "all"})))
                .await
                .0,
            201
        );
        theirs["name"] = json!("api-d");
        let r = admin(&gw, "POST", "/admin/channels", SCOPED, Some(theirs)).await;
        assert_eq!(code(&r), (403, "out_of_scope"), "{}", r.1);
        let said = r.1["error"]["message"].as_str().unwrap();
        assert!(said.contains("\"all\""), "{said}");
        // The whole config and the audit are not a scoped admin's to read; health is filtered.
        for path in ["/admin/config", "/admin/audit"] {
            assert_eq!(admin(&gw, "GET", path, SCOPED, None).await.0, 403, "{path}");
        }
        let (_, health) = admin(&gw, "GET", "/admin/health", SCOPED, None).await;
        let seen: Vec<&str> = health["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["channel"].as_str())
            .collect();
        assert_eq!(seen, ["api-c"], "{health}");
        // A delete outside its scope is not found, and deletes nothing.
        let (s, _) = admin(&gw, "DELETE", "/admin/channels/api-b", SCOPED, None).await;
        assert_eq!(s, 404);
        assert_eq!(
            as_admin(&gw, "GET", "/admin/channels/api-b", None).await.0,
            200
        );
        let (_, mine) = admin(&gw, "GET", "/admin/channels", SCOPED, None).await;
        let names: Vec<&str> = mine["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["api-c"]);
        let (s, _) = admin(&gw, "GET", "/admin/channels/file-a", SCOPED, None).await;
        assert_eq!(s, 404);
        // Its request log holds only its groups' keys' requests: none of team-a's.
        assert_eq!(chat_status(&gw, KEY).await, 200);
        gw.flush_log().await;
        let (_, all) = as_admin(&gw, "GET", "/admin/requests", None).await;
        assert!(!all["data"].as_array().unwrap().is_empty(), "{all}");
        let (_, scoped) = admin(&gw, "GET", "/admin/requests", SCOPED, None).await;
        assert_eq!(scoped["data"], json!([]), "{scoped}");
    }
}

/// `n` admin calls with a wrong token, each refused with 401 `invalid_api_key`.
async fn wrong_tokens(gw: &Gateway, n: usize) {
    for _ in 0..n {
        let (s, e) = admin(gw, "GET", "/admin/channels", "wrong-token-0123456789", None).await;
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (401, Some("invalid_api_key"))
        );
    }
}

#[tokio::test]
async fn wrong_tokens_get_401_then_429_and_no_store_means_read_only() {
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&openai_channel("file-a", &up.base_url(), 1, "")).await;
    // Without a store the API reads the file and writes nothing.
    let (s, list) = as_admin(&gw, "GET", "/admin/channels", None).await;
    assert_eq!((s, &list["data"][0]["source"]), (200, &json!("file")));
    let r = as_admin(
        &gw,
        "POST",
        "/admin/channels",
        Some(channel_body("x", &up.base_url())),
    )
    .await;
    assert_eq!(code(&r), (409, "read_only"), "{}", r.1);
    let (logs, guard) = capture_logs();
    wrong_tokens(&gw, 10).await;
    drop(guard);
    // Each failure is logged with the network, never the token or the full address.
    let said = logs.text();
    assert_eq!(said.matches("wrong or missing token").count(), 10, "{said}");
    assert!(said.contains("127.0.0.0/24"), "{said}");
    assert!(
        !said.contains("wrong-token") && !said.contains("127.0.0.1"),
        "{said}"
    );
    let resp = client()
        .get(format!("{}/admin/channels", gw.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    // Over the limit the address waits, even with the right token, and is told how long.
    assert_eq!(resp.status().as_u16(), 429);
    let wait: u64 = header(&resp, "retry-after").parse().expect("Retry-After");
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(resp.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn the_failed_attempt_limit_is_the_configs() {
    let up = mock(text_spec("ok")).await;
    let rest = format!(
        "[admin]\nmax_failed_attempts = 3\n\n{}",
        openai_channel("file-a", &up.base_url(), 1, "")
    );
    let gw = gateway(&rest).await;
    wrong_tokens(&gw, 3).await;
    let (s, e) = as_admin(&gw, "GET", "/admin/channels", None).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (429, Some("too_many_attempts"))
    );
}

#[tokio::test]
async fn what_the_schema_fuzz_found_in_entries_is_mended() {
    // Found by schemathesis against the admin OpenAPI document (tests/it/schemathesis.rs).
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let up = mock(text_spec("ok")).await;
    let gw = on_store(
        &url,
        Some(&master_key(5)),
        &openai_channel("file-a", &up.base_url(), 1, ""),
    )
    .await;
    // JSON does not tell 1000.0 from 1000: an integer field takes both.
    let model = json!({"name": "zz1", "context_window": 1000.0});
    let r = as_admin(&gw, "POST", "/admin/models", Some(model)).await;
    assert_eq!(r.0, 201, "{}", r.1);
    assert_eq!(r.1["context_window"], 1000);
    // A key is at least 8 characters, not 8 bytes.
    let short = json!({"name": "short", "key": "ééééé"});
    let r = as_admin(&gw, "POST", "/admin/keys", Some(short)).await;
    assert_eq!(code(&r), (400, "invalid_value"), "{}", r.1);
    // An upstream key that could never be sent in a header is refused when given.
    for bad in ["", " ", "a\nb", "é\u{0}"] {
        let mut body = channel_body("c1", &up.base_url());
        body["api_keys"] = json!([bad]);
        let r = as_admin(&gw, "POST", "/admin/channels", Some(body)).await;
        assert_eq!(code(&r), (400, "invalid_value"), "{bad:?}: {}", r.1);
        assert!(
            r.1["error"]["param"]
                .as_str()
                .unwrap_or("")
                .contains("api_keys"),
            "{}",
            r.1
        );
    }
}

#[tokio::test]
async fn invalid_entries_are_refused_naming_the_field() {
    let stores = Stores::new("ctl_invalid").await;
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let with_key = on_store(
            &url,
            Some(&master_key(4)),
            &openai_channel("file-a", &up.base_url(), 1, ""),
        )
        .await;
        let cases = [
            (
                json!({"name": "b", "provider": "openai", "base_url": "not a url", "models": ["m"]}),
                "base_url",
            ),
            (
                json!({"name": "b", "provider": "openai", "base_url": up.base_url(), "models": []}),
                "models",
            ),
            (
                json!({"name": "b", "provider": "nope", "models": ["m"]}),
                "provider",
            ),
            (
                json!({"name": "b", "provider": "mock", "models": ["m"], "colour": "blue"}),
                "colour",
            ),
            (json!({"provider": "mock", "models": ["m"]}), "name"),
        ];
        for (body, field) in cases {
            let (s, e) = as_admin(&with_key, "POST", "/admin/channels", Some(body.clone())).await;
            assert_eq!(s, 400, "{url} {body}: {e}");
            let named = format!("{} {}", e["error"]["param"], e["error"]["message"]);
            assert!(named.contains(field), "{body}: {e}");
        }
        let (s, e) = admin_with(
            &with_key,
            "POST",
            "/admin/channels",
            ADMIN,
            None,
            &[("content-type", "application/json")],
        )
        .await;
        assert_eq!(s, 400, "{e}");
        // A key referring to a group no channel is in: named, nothing written.
        let (s, e) = as_admin(
            &with_key,
            "POST",
            "/admin/keys",
            Some(json!({"name": "k", "groups": ["nobody"]})),
        )
        .await;
        assert_eq!(
            (s, e["error"]["param"].as_str()),
            (400, Some("groups[0]")),
            "{e}"
        );
        assert_eq!(
            as_admin(&with_key, "GET", "/admin/keys/k", None).await.0,
            404
        );
        // Without a master key: secrets cannot be kept, and the answer names the setting.
        let bare = on_store(
            &url.replace("store.db", "bare.db"),
            None,
            &openai_channel("file-a", &up.base_url(), 1, ""),
        )
        .await;
        if url.starts_with("postgres") {
            continue; // That database has a master key already; the SQLite file shows the rule.
        }
        let (s, e) = as_admin(
            &bare,
            "POST",
            "/admin/channels",
            Some(channel_body("b", &up.base_url())),
        )
        .await;
        assert_eq!(
            (s, e["error"]["code"].as_str(), e["error"]["param"].as_str()),
            (400, Some("master_key_missing"), Some("store.master_key")),
            "{e}"
        );
        let r = as_admin(&bare, "POST", "/admin/keys", Some(json!({"name": "k"}))).await;
        assert_eq!(code(&r), (400, "master_key_missing"), "{}", r.1);
        // A channel without keys needs none.
        let mock_channel = json!({"name": "b", "provider": "mock", "models": ["m"]});
        assert_eq!(
            as_admin(&bare, "POST", "/admin/channels", Some(mock_channel))
                .await
                .0,
            201
        );
    }
}

#[tokio::test]
async fn a_post_with_an_idempotency_key_is_applied_once() {
    let stores = Stores::new("ctl_idem").await;
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let gw = on_store(
            &url,
            Some(&master_key(5)),
            &openai_channel("file-a", &up.base_url(), 1, ""),
        )
        .await;
        let h = [("idempotency-key", "make-svc-1")];
        let first = admin_with(
            &gw,
            "POST",
            "/admin/keys",
            ADMIN,
            Some(json!({"name": "svc"})),
            &h,
        )
        .await;
        let again = admin_with(
            &gw,
            "POST",
            "/admin/keys",
            ADMIN,
            Some(json!({"name": "svc"})),
            &h,
        )
        .await;
        assert_eq!(first.0, 201, "{}", first.1);
        assert!(first.1["key"].is_string(), "{}", first.1);
        // The retry gets the first answer, but the key is shown once: the store keeps no key.
        let mut without_key = first.1.clone();
        without_key.as_object_mut().unwrap().remove("key");
        assert_eq!(again, (201, without_key), "{url}");
        let raw = client()
            .post(format!("{}/admin/keys", gw.url))
            .bearer_auth(ADMIN)
            .header("idempotency-key", "make-svc-1")
            .json(&json!({"name": "svc"}))
            .send()
            .await
            .unwrap();
        assert_eq!(header(&raw, "idempotent-replayed"), "true");
        // The same key for another request is refused, and nothing is made.
        let other = admin_with(
            &gw,
            "POST",
            "/admin/keys",
            ADMIN,
            Some(json!({"name": "svc2"})),
            &h,
        )
        .await;
        assert_eq!(
            (other.0, other.1["error"]["code"].as_str()),
            (422, Some("idempotency_key_reused")),
            "{}",
            other.1
        );
        assert_eq!(as_admin(&gw, "GET", "/admin/keys/svc2", None).await.0, 404);
        let (_, audit) = as_admin(&gw, "GET", "/admin/audit", None).await;
        let creates = audit["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "create")
            .count();
        assert_eq!(creates, 1, "{audit}");
        // Without the header the same POST is a duplicate.
        let (s, _) = as_admin(&gw, "POST", "/admin/keys", Some(json!({"name": "svc"}))).await;
        assert_eq!(s, 409);
        // A redirect gets an id, and is addressed by it.
        let (s, r) = as_admin(
            &gw,
            "POST",
            "/admin/redirects",
            Some(json!({"from": "alias", "to": "m"})),
        )
        .await;
        assert_eq!(s, 201, "{r}");
        let id = r["id"].as_str().unwrap().to_string();
        let (s, read) = as_admin(&gw, "GET", &format!("/admin/redirects/{id}"), None).await;
        assert_eq!((s, &read["to"]), (200, &json!("m")), "{read}");
        let aliased = gw
            .chat(json!({"model": "alias", "messages": [{"role": "user", "content": "hi"}]}))
            .await;
        assert_eq!(aliased.status().as_u16(), 200);
    }
}

#[tokio::test]
async fn the_config_and_the_audit_show_every_change_with_secrets_masked() {
    let stores = Stores::new("ctl_audit").await;
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let gw = on_store(
            &url,
            Some(&master_key(6)),
            &openai_channel("file-a", &up.base_url(), 1, ""),
        )
        .await;
        as_admin(
            &gw,
            "POST",
            "/admin/channels",
            Some(channel_body("api-a", &up.base_url())),
        )
        .await;
        as_admin(
            &gw,
            "PATCH",
            "/admin/channels/api-a",
            Some(json!({"weight": 5})),
        )
        .await;
        as_admin(
            &gw,
            "POST",
            "/admin/models",
            Some(json!({"name": "m", "context_window": 9000})),
        )
        .await;
        let resp = client()
            .get(format!("{}/admin/config", gw.url))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        let version: i64 = header(&resp, "x-switchyard-config-version")
            .parse()
            .unwrap();
        assert_eq!(version, 3, "{url}");
        let text = resp.text().await.unwrap();
        let doc: toml::Value = toml::from_str(&text).expect("the config is TOML");
        let names: Vec<&str> = doc["channels"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["file-a", "api-a"], "{text}");
        assert!(
            !text.contains(UPSTREAM_KEY) && !text.contains(ADMIN) && !text.contains(KEY),
            "{text}"
        );
        let (_, audit) = as_admin(&gw, "GET", "/admin/audit?limit=2", None).await;
        let rows = audit["data"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0]["kind"].as_str(), rows[0]["action"].as_str()),
            (Some("models"), Some("create"))
        );
        assert_eq!(rows[1]["diff"]["patch"]["weight"], 5);
        assert_eq!(rows[0]["prev_hash"], rows[1]["hash"], "a chain");
        assert_eq!(rows[0]["admin"], "admin");
        let before = rows[1]["id"].as_i64().unwrap();
        let (_, older) = as_admin(&gw, "GET", &format!("/admin/audit?before={before}"), None).await;
        assert_eq!(
            older["data"][0]["diff"]["after"]["api_keys"],
            json!(["…-key"]),
            "{older}"
        );
    }
}

#[tokio::test]
async fn routers_and_glob_models_are_managed_too_and_a_null_removes_a_field() {
    let stores = Stores::new("ctl_sections").await;
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let gw = on_store(
            &url,
            Some(&master_key(11)),
            &openai_channel("file-a", &up.base_url(), 1, ""),
        )
        .await;
        let router = json!({"model": "auto", "embedder": {"kind": "hashed"},
            "instances": [{"name": "any", "model": "m", "examples": ["hello"], "catchall": true}]});
        let (s, r) = as_admin(&gw, "POST", "/admin/routers", Some(router)).await;
        assert_eq!(s, 201, "{url}: {r}");
        let auto = gw
            .chat(json!({"model": "auto", "messages": [{"role": "user", "content": "hi"}]}))
            .await;
        assert_eq!(auto.status().as_u16(), 200, "{url}");
        assert_eq!(
            as_admin(&gw, "GET", "/admin/routers/auto", None).await.1["source"],
            "api"
        );
        // A glob name, URL-encoded in the path.
        let (s, _) = as_admin(
            &gw,
            "POST",
            "/admin/models",
            Some(json!({"name": "m*", "context_window": 8000, "trim": true})),
        )
        .await;
        assert_eq!(s, 201);
        let (s, m) = as_admin(
            &gw,
            "PATCH",
            "/admin/models/m%2A",
            Some(json!({"trim": null})),
        )
        .await;
        assert_eq!(s, 200, "{m}");
        assert!(m.get("trim").is_none(), "a null removes the field: {m}");
        let (_, read) = as_admin(&gw, "GET", "/admin/models/m%2A", None).await;
        assert_eq!(
            (read["context_window"].as_u64(), read.get("trim")),
            (Some(8000), None),
            "{read}"
        );
        assert_eq!(
            as_admin(&gw, "DELETE", "/admin/models/m%2A", None).await.0,
            200
        );
        assert_eq!(
            as_admin(&gw, "GET", "/admin/models/m%2A", None).await.0,
            404
        );
        // A channel a router still names cannot go.
        let ch = json!({"name": "emb", "provider": "openai", "base_url": up.base_url(), "api_keys": [UPSTREAM_KEY], "models": ["e"]});
        as_admin(&gw, "POST", "/admin/channels", Some(ch)).await;
        let (s, _) = as_admin(
            &gw,
            "PATCH",
            "/admin/routers/auto",
            Some(json!({"embedder": {"kind": "channel", "channel": "emb", "model": "e"}})),
        )
        .await;
        assert_eq!(s, 200);
        let r = as_admin(&gw, "DELETE", "/admin/channels/emb", None).await;
        assert_eq!(code(&r), (409, "in_use"), "{}", r.1);
    }
}

#[tokio::test]
async fn an_admin_listener_of_its_own_keeps_the_admin_api_off_the_public_one() {
    let up = mock(text_spec("ok")).await;
    let rest = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n{}",
        openai_channel("a", &up.base_url(), 1, "")
    );
    let gw = gateway_full("", "", &rest).await;
    let admin_addr = gw.running.admin_addr.expect("the admin listener");
    assert_ne!(admin_addr, gw.running.addr);
    let (s, _) = as_admin(&gw, "GET", "/admin/channels", None).await;
    assert_eq!(s, 404, "the public listener has no admin API");
    let own = get_json(&format!("http://{admin_addr}/admin/channels"), Some(ADMIN)).await;
    assert_eq!(own["data"][0]["name"], "a", "{own}");
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
}

#[tokio::test]
async fn a_file_naming_what_the_store_holds_is_refused_at_start() {
    let stores = Stores::new("ctl_clash").await;
    let m = master_key(12);
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let gw = on_store(&url, Some(&m), "").await;
        let (s, _) = as_admin(
            &gw,
            "POST",
            "/admin/channels",
            Some(channel_body("shared", &up.base_url())),
        )
        .await;
        assert_eq!(s, 201);
        // Another replica's file now defines the same name: it does not start, and says why.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        let text = format!(
            "[log]\nsqlite_path = \"{}\"\n{}{}",
            dir.path().join("log.db").display(),
            store_section(&url, Some(&m)),
            openai_channel("shared", &up.base_url(), 1, "")
        );
        std::fs::write(&path, text).unwrap();
        let clients = switchyard::provider::HttpClients::default();
        let snap = switchyard::config::load_file(&path, &clients).expect("the file alone is valid");
        let err = switchyard::app::start(snap, clients, None)
            .await
            .err()
            .expect("refused");
        let said = err.to_string();
        assert!(
            said.contains("channels[0].name") && said.contains("also defined in the store"),
            "{url}: {said}"
        );
    }
}

#[tokio::test]
async fn on_postgresql_replicas_are_notified_without_waiting_for_the_poll() {
    let pg = Postgres::fresh("ctl_notify").await;
    let m = master_key(13);
    // A poll a minute apart: only the notification can bring the change within 2 s.
    let store = format!(
        "{}poll_interval_ms = 60000\n",
        store_section(&pg.url, Some(&m))
    );
    let one = gateway_full("", &store, "").await;
    let two = gateway_full("", &store, "").await;
    let up = mock(text_spec("ok")).await;
    // The listener connects as the gateway starts; a first change proves it listens.
    let (s, _) = as_admin(
        &one,
        "POST",
        "/admin/channels",
        Some(channel_body("n", &up.base_url())),
    )
    .await;
    assert_eq!(s, 201);
    until(
        "the notified replica serves the new channel",
        REPLICAS_WITHIN,
        async || chat_status(&two, KEY).await == 200,
    )
    .await;
    as_admin(&one, "DELETE", "/admin/channels/n", None).await;
    until(
        "the notified replica drops it",
        REPLICAS_WITHIN,
        async || chat_status(&two, KEY).await != 200,
    )
    .await;
}

#[tokio::test]
async fn racing_writes_on_two_replicas_never_combine_into_a_config_neither_checked() {
    let stores = Stores::new("ctl_race").await;
    let m = master_key(14);
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let file = openai_channel("file-a", &up.base_url(), 1, "");
        let one = on_store(&url, Some(&m), &file).await;
        let two = on_store(&url, Some(&m), &file).await;
        let stable = channel_body("p", &up.base_url());
        assert_eq!(
            as_admin(&one, "POST", "/admin/channels", Some(stable))
                .await
                .0,
            201
        );
        for round in 0..5 {
            let mut ch = channel_body(&format!("g-{round}"), &up.base_url());
            ch["groups"] = json!([format!("g{round}")]);
            assert_eq!(
                as_admin(&one, "POST", "/admin/channels", Some(ch)).await.0,
                201
            );
            // One replica deletes the group's only channel while the other gives a key that
            // group: each is valid alone, not both.
            let key = json!({"name": format!("k-{round}"), "groups": [format!("g{round}")]});
            let path = format!("/admin/channels/g-{round}");
            let (deleted, keyed) = tokio::join!(
                as_admin(&one, "DELETE", &path, None),
                as_admin(&two, "POST", "/admin/keys", Some(key)),
            );
            assert!(
                !(deleted.0 == 200 && keyed.0 == 201),
                "{url} round {round}: both landed: {deleted:?} {keyed:?}"
            );
            assert!(
                deleted.0 == 200 || keyed.0 == 201,
                "{url}: neither: {deleted:?} {keyed:?}"
            );
            // Merge patches of different fields at once, on both replicas: neither is lost.
            let (a, b) = tokio::join!(
                as_admin(
                    &one,
                    "PATCH",
                    "/admin/channels/p",
                    Some(json!({"weight": 2 + round}))
                ),
                as_admin(
                    &two,
                    "PATCH",
                    "/admin/channels/p",
                    Some(json!({"priority": 2 + round}))
                ),
            );
            assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
            // Read where both have landed (the replica that made one follows the other's).
            let want = (Some(2 + round), Some(2 + round));
            until("both patches on the channel", REPLICAS_WITHIN, async || {
                let (_, read) = as_admin(&one, "GET", "/admin/channels/p", None).await;
                let seen = (read["weight"].as_u64(), read["priority"].as_u64());
                if seen == want { Ok(()) } else { Err(read) }
            })
            .await;
        }
        // What the store holds still loads: a third replica starts on it.
        let three = on_store(&url, Some(&m), &file).await;
        assert_eq!(
            as_admin(&three, "GET", "/admin/channels/p", None).await.0,
            200
        );
    }
}

#[tokio::test]
async fn a_replica_that_cannot_load_the_store_is_not_ready_until_it_can() {
    let stores = Stores::new("ctl_behind").await;
    let m = master_key(15);
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let one = on_store(&url, Some(&m), "").await;
        // The second replica's file has a channel the first's has not.
        let two = on_store(&url, Some(&m), &openai_channel("x", &up.base_url(), 1, "")).await;
        let ready = |gw: &Gateway| {
            let url = format!("{}/readyz", gw.url);
            async move {
                client()
                    .get(url)
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16())
            }
        };
        assert_eq!(ready(&two).await, 200);
        let (s, _) = as_admin(
            &one,
            "POST",
            "/admin/channels",
            Some(channel_body("x", &up.base_url())),
        )
        .await;
        assert_eq!(s, 201, "the first replica's file has no x");
        // The second cannot load it (x in its file and in the store): it says so, and may
        // hold keys revoked since, so it asks to be taken out of rotation.
        until(
            "the second replica reports itself behind",
            REPLICAS_WITHIN,
            async || ready(&two).await == 503,
        )
        .await;
        let body = get_json(&format!("{}/readyz", two.url), None).await;
        assert!(body["store"]["refused_version"].is_i64(), "{body}");
        // Its file fixed and reloaded, it loads the store again.
        std::fs::write(
            &two.config_path,
            std::fs::read_to_string(&two.config_path)
                .unwrap()
                .replace("name = \"x\"", "name = \"y\""),
        )
        .unwrap();
        assert_eq!(two.reload().await.status(), 200);
        assert_eq!(ready(&two).await, 200, "{url}");
        let (_, list) = as_admin(&two, "GET", "/admin/channels", None).await;
        let names: Vec<&str> = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["y", "x"], "{list}");
    }
}

#[tokio::test]
async fn refusals_never_quote_a_secret_and_file_redirects_are_read_only() {
    let stores = Stores::new("ctl_quote").await;
    for url in stores.urls() {
        let up = mock(text_spec("ok")).await;
        let rest = format!(
            "[[redirects]]\nfrom = \"alias\"\nto = \"m\"\n\n{}",
            openai_channel("file-a", &up.base_url(), 1, "")
        );
        let gw = on_store(&url, Some(&master_key(16)), &rest).await;
        let secret = "sk-live-wrongly-typed-secret-9c2e";
        let bodies = [
            json!({"name": "b", "provider": "openai", "base_url": up.base_url(), "models": ["m"], "api_keys": secret}),
            json!({"name": "b", "provider": "openai", "base_url": up.base_url(), "models": ["m"], "credentials": [secret]}),
            json!({"name": "b", "provider": "openai", "base_url": up.base_url(), "models": ["m"], "credentials": [{"key": secret, "rpm": "many"}]}),
        ];
        for body in bodies {
            let (s, e) = as_admin(&gw, "POST", "/admin/channels", Some(body)).await;
            assert_eq!(s, 400, "{e}");
            assert!(!e.to_string().contains(secret), "{url}: {e}");
        }
        // A duration past what a clock can add is refused, naming it.
        let long = json!({"name": "b", "provider": "mock", "models": ["m"], "circuit_breaker": {"cooldown_seconds": 18446744073709551615u64}});
        let (s, e) = as_admin(&gw, "POST", "/admin/channels", Some(long)).await;
        assert_eq!(
            (s, e["error"]["param"].as_str()),
            (400, Some("circuit_breaker.cooldown_seconds")),
            "{e}"
        );
        let (_, list) = as_admin(&gw, "GET", "/admin/redirects", None).await;
        assert_eq!(
            (
                list["data"][0]["id"].as_str(),
                list["data"][0]["source"].as_str()
            ),
            (Some("file:0"), Some("file")),
            "{list}"
        );
        for method in ["PATCH", "DELETE"] {
            let body = (method == "PATCH").then(|| json!({"to": "e"}));
            let r = as_admin(&gw, method, "/admin/redirects/file:0", body).await;
            assert_eq!(code(&r), (409, "read_only"), "{}", r.1);
        }
        assert_eq!(
            as_admin(&gw, "GET", "/admin/redirects/file:0", None)
                .await
                .1["to"],
            "m"
        );
    }
}
