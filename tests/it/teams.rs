//! Teams and end users: a request must fit its key, its team and its organisation at once,
//! across replicas sharing Redis or PostgreSQL, and the refusal names the level; each end
//! user of a team has its own limits, at most `max_tracked_users` of them counted; a key may
//! require an end user; a team bounds the models its keys may ask for; usage sums by team and
//! by user.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard::provider::mock::MockServer;

use crate::support::*;

/// $1 per 1M tokens each way: a token costs one micro-dollar.
const PRICED: &str = "price = { input = 1, output = 1 }";
const CALIB: &str = "sk-calibration-key-0001";
/// A second key of the organisation, in a sibling team.
const SIBLING: &str = "sk-sibling-team-key-01";

fn body(max_tokens: u64) -> Value {
    json!({"model": "m", "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": "Say something short."}]})
}

/// `[[teams]]`: acme > platform (the test key's) and acme > data (the sibling key's), with
/// the budgets given in requests' worth (`ask` micro-dollars each); platform gives each end
/// user a budget of 1000 requests' worth.
fn tree(ask: u64, levels: (u64, u64, u64)) -> String {
    tree_with_users(ask, levels, 1000)
}

fn tree_with_users(ask: u64, (key, team, org): (u64, u64, u64), user: u64) -> String {
    let usd = |n: u64| (n * ask) as f64 / 1e6;
    format!(
        "team = \"platform\"\nbudget = {{ usd = {} }}\n\n\
         [[keys]]\nname = \"sibling\"\nkey = \"{SIBLING}\"\nteam = \"data\"\n\n\
         [[keys]]\nname = \"calib\"\nkey = \"{CALIB}\"\n\n\
         [[teams]]\nname = \"acme\"\nbudget = {{ usd = {} }}\n\n\
         [[teams]]\nname = \"platform\"\nparent = \"acme\"\nbudget = {{ usd = {} }}\n\
         user_limits = {{ budget = {{ usd = {} }} }}\n\n\
         [[teams]]\nname = \"data\"\nparent = \"acme\"\n",
        usd(key),
        usd(org),
        usd(team),
        usd(user)
    )
}

/// 32 clients, half on each key, through both replicas in turn, each stopping 2 refusals
/// past its first (and at 60 requests).
async fn race(gws: &[Gateway; 2], max_tokens: u64) -> Vec<Sent> {
    let r = Race {
        workers: 32,
        keys: &[KEY, SIBLING],
        after: 2,
        most: 60,
    };
    let mut b = body(max_tokens);
    b["user"] = json!("ann");
    r.run(gws, &b).await
}

/// The ledger's cost by team, over both replicas' logs when each keeps one.
async fn spent_by_team(gws: &[Gateway; 2], one_log: bool, team: &str) -> u64 {
    ledger_cost(gws, one_log, "team", team).await
}

#[tokio::test]
async fn each_level_of_a_team_holds_its_budget_across_two_replicas_and_names_itself() {
    // (budgets in requests' worth: key, team, organisation; the level that runs out first)
    // Every request names end user `ann`: platform's users have budgets of their own.
    let rows = [
        ((12, 1000, 1000, 1000), "key:team-a"),
        ((1000, 12, 1000, 1000), "team:platform"),
        ((1000, 1000, 18, 1000), "team:acme"),
        ((1000, 1000, 1000, 12), "user:ann"),
    ];
    for (row, (budgets, level)) in rows.into_iter().enumerate() {
        // Fresh counters for each row.
        for shared in Shared::each(&format!("team_levels_{row}")).await {
            let which = shared.name();
            let up = mock(text_spec("a few words back")).await;
            let channels = openai_channel("a", &up.base_url(), 1, PRICED);
            // The request's cost, learnt first on a gateway of its own.
            let probe = gateway_full("", "", &channels).await;
            let v: Value = probe.chat(body(1000)).await.json().await.unwrap();
            let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap();
            let (prompt, completion) = (n("/usage/prompt_tokens"), n("/usage/completion_tokens"));
            let ask = prompt + completion;
            let (key, team, org, user) = budgets;
            let limits = format!(
                "{}{}",
                tree_with_users(ask, (key, team, org), user),
                shared.section()
            );
            let gws = [
                gateway_full("", &limits, &channels).await,
                gateway_full("", &limits, &channels).await,
            ];
            if let Shared::Redis(_) = shared {
                wait_connected(&gws[0], true).await;
                wait_connected(&gws[1], true).await;
            }
            let sent = race(&gws, completion).await;
            let served: Vec<&Sent> = sent.iter().filter(|s| s.status == 200).collect();
            let refused: Vec<&Sent> = sent.iter().filter(|s| s.status != 200).collect();
            assert!(!served.is_empty() && !refused.is_empty(), "{which} {level}");
            for r in &refused {
                assert_eq!(
                    (r.status, r.code.as_str(), r.param.as_str()),
                    (429, "budget_exceeded", level),
                    "{which}: {r:?}"
                );
            }
            // The level that ran out: everything charged to it within its budget (each
            // request's reservation is its cost, so nothing is overdrawn).
            let platform_served = served.iter().filter(|s| s.key == KEY).count();
            let (cap, charged) = match level {
                "key:team-a" => (key, platform_served),
                "team:platform" => (team, platform_served),
                "user:ann" => (user, platform_served),
                _ => (org, served.len()),
            };
            let spent: u64 = served.iter().map(|s| s.cost).sum();
            assert!(
                served.iter().all(|s| s.cost == ask),
                "{which}: a cost other than {ask}"
            );
            // Spent to the last request, and not one past it, under 32 concurrent clients.
            assert_eq!(charged as u64, cap, "{which} {level}");
            if level != "team:acme" {
                // Only the test key's level ran out: the sibling team was never refused.
                assert!(refused.iter().all(|r| r.key == KEY), "{which} {level}");
            } else {
                // Once refused, refused: nothing sent after the first refusal came back is served.
                let first = refused.iter().map(|r| r.ended).min().unwrap();
                assert!(
                    served.iter().all(|s| s.started < first),
                    "{which}: served after the organisation ran out"
                );
            }
            let platform = served
                .iter()
                .filter(|s| s.key == KEY)
                .map(|s| s.cost)
                .sum::<u64>();
            assert_eq!(
                spent_by_team(&gws, shared.one_log(), "platform").await,
                platform,
                "{which}"
            );
            assert_eq!(
                spent_by_team(&gws, shared.one_log(), "data").await,
                spent - platform,
                "{which}"
            );
            // The level's first refusal in its period is a `budget.exhausted` event.
            let scope = if level == "user:ann" {
                "user:platform/ann"
            } else {
                level
            };
            until(
                "the level's budget.exhausted event",
                Duration::from_secs(5),
                async || {
                    for gw in &gws {
                        let url = format!("{}/admin/events?type=budget.exhausted", gw.url);
                        let v = get_json(&url, Some(ADMIN)).await;
                        let list = v["data"].as_array().cloned().unwrap_or_default();
                        if list.iter().any(|e| e["data"]["scope"] == scope) {
                            return true;
                        }
                    }
                    false
                },
            )
            .await;
        }
    }
}

/// A gateway whose team gives each end user `rpm = 2`, counting at most two of them.
async fn user_limited(shared: Option<&Shared>, up: &MockServer) -> Gateway {
    let limits = format!(
        "team = \"support\"\n\n[[teams]]\nname = \"support\"\n\
         user_limits = {{ rpm = 2, max_tracked_users = 2 }}\n{}",
        shared.map(Shared::section).unwrap_or_default()
    );
    let gw = gateway_full("", &limits, &openai_channel("a", &up.base_url(), 1, "")).await;
    if let Some(Shared::Redis(_)) = shared {
        wait_connected(&gw, true).await;
    }
    gw
}

/// A request naming `user` the way `how` does: OpenAI's `user`, Anthropic's
/// `metadata.user_id`, or the header.
async fn as_user(gw: &Gateway, user: &str, how: &str) -> (u16, Value) {
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let resp = match how {
        "openai" => {
            gw.chat(json!({"model": "m", "messages": msgs, "user": user}))
                .await
        }
        "anthropic" => {
            let b = json!({"model": "m", "max_tokens": 16, "messages": msgs,
                           "metadata": {"user_id": user}});
            gw.post_as("/v1/messages", KEY, &[], b).await
        }
        _ => {
            let b = json!({"model": "m", "messages": msgs});
            gw.post_as(
                "/v1/chat/completions",
                KEY,
                &[("x-switchyard-user", user)],
                b,
            )
            .await
        }
    };
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn each_end_user_has_its_own_limits_and_the_longest_idle_is_forgotten() {
    let up = mock(text_spec("ok")).await;
    let shared = Shared::each("team_users").await;
    let setups = [None, Some(&shared[0]), Some(&shared[1])];
    for shared in setups {
        let which = shared.map_or("memory", Shared::name);
        let gw = user_limited(shared, &up).await;
        // (user, how it is named, the status, the refusal's param)
        let steps = [
            ("ann", "openai", 200, ""),
            ("ann", "anthropic", 200, ""),
            ("ann", "header", 429, "user:ann"),
            ("bob", "header", 200, ""),
            ("bob", "openai", 200, ""),
            // A third user: ann, idle longest, is forgotten, her count with her.
            ("cy", "anthropic", 200, ""),
            ("ann", "openai", 200, ""),
            // bob was forgotten for ann: his count starts again too; cy's does not.
            ("bob", "header", 200, ""),
            ("ann", "openai", 200, ""),
            ("ann", "openai", 429, "user:ann"),
        ];
        for (i, (user, how, status, param)) in steps.into_iter().enumerate() {
            let (got, v) = as_user(&gw, user, how).await;
            assert_eq!(got, status, "{which} step {i}: {v}");
            if status == 429 {
                assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{which}: {v}");
                assert_eq!(v["error"]["param"], param, "{which} step {i}: {v}");
            }
        }
        gw.flush_log().await;
        let v = get_json(
            &format!("{}/admin/usage?group_by=user", gw.url),
            Some(ADMIN),
        )
        .await;
        let requests = |u: &str| {
            v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["user"] == u)
                .map(|r| r["requests"].clone())
        };
        assert_eq!(requests("ann"), Some(json!(4)), "{which}: {v}");
        assert_eq!(requests("bob"), Some(json!(3)), "{which}: {v}");
        assert_eq!(requests("cy"), Some(json!(1)), "{which}: {v}");
    }
}

#[tokio::test]
async fn a_key_can_require_an_end_user_and_a_team_bounds_its_models() {
    let up = mock(text_spec("ok")).await;
    let limits = "team = \"t\"\nrequire_user = true\n\n[[teams]]\nname = \"t\"\nmodels = [\"m\"]\n";
    let gw = gateway_full("", limits, &openai_channel("a", &up.base_url(), 1, "")).await;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    // (path, body, header, status, code, param)
    let rows = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": msgs}),
            None,
            400,
            "user_required",
            "user",
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 8, "messages": msgs}),
            None,
            400,
            "user_required",
            "user",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": msgs, "user": ""}),
            None,
            400,
            "invalid_request",
            "user",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": msgs, "user": "u1"}),
            None,
            200,
            "",
            "",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": msgs}),
            Some("u2"),
            200,
            "",
            "",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "e", "messages": msgs, "user": "u1"}),
            None,
            403,
            "model_not_allowed",
            "model",
        ),
    ];
    for (i, (path, b, user, status, code, param)) in rows.into_iter().enumerate() {
        let headers: Vec<(&str, &str)> =
            user.map(|u| ("x-switchyard-user", u)).into_iter().collect();
        let resp = gw.post_as(path, KEY, &headers, b).await;
        assert_eq!(resp.status().as_u16(), status, "row {i}");
        if status == 200 {
            continue;
        }
        let v: Value = resp.json().await.unwrap();
        let text = v.to_string();
        assert!(text.contains(code), "row {i}: {v}");
        if path == "/v1/chat/completions" {
            assert_eq!(v["error"]["param"], param, "row {i}: {v}");
        }
    }
    assert_eq!(
        up.requests(),
        2,
        "refused requests never reach the upstream"
    );
}

const PLATFORM_ADMIN: &str = "platform-admin-token-0001";

#[tokio::test]
async fn an_admin_scoped_to_a_team_sees_and_changes_only_its_keys_and_spend() {
    let up = mock(text_spec("a few words back")).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let limits = format!(
        "{}\n[[admins]]\nname = \"pat\"\ntoken = \"{PLATFORM_ADMIN}\"\nrole = \"admin\"\nteams = [\"platform\"]\n{}",
        tree(1, (1000, 1000, 1000)),
        store_section(&url, Some(&master_key(5)))
    );
    let gw = gateway_full("", &limits, &openai_channel("a", &up.base_url(), 1, PRICED)).await;
    for key in [KEY, SIBLING] {
        let resp = gw.post_as("/v1/chat/completions", key, &[], body(16)).await;
        assert_eq!(resp.status(), 200);
    }
    gw.flush_log().await;
    let names = |v: &Value, field: &str| -> Vec<String> {
        let list = v["data"]
            .as_array()
            .or(v["rows"].as_array())
            .cloned()
            .unwrap_or_default();
        let mut n: Vec<String> = list
            .iter()
            .filter_map(|r| r[field].as_str().map(String::from))
            .collect();
        n.sort();
        n
    };
    // (path, the field naming each row, what the team's admin sees)
    let reads = [
        ("/admin/keys", "name", vec!["team-a"]),
        ("/admin/teams", "name", vec!["platform"]),
        ("/admin/channels", "name", vec![]),
        ("/admin/usage?group_by=key", "key", vec!["team-a"]),
        ("/admin/usage?group_by=team", "team", vec!["platform"]),
        ("/admin/budgets", "name", vec!["platform", "team-a"]),
    ];
    for (path, field, want) in reads {
        let (s, v) = admin(&gw, "GET", path, PLATFORM_ADMIN, None).await;
        assert_eq!(s, 200, "{path}: {v}");
        assert_eq!(names(&v, field), want, "{path}: {v}");
    }
    // The unscoped admin filters usage by team (a team and everything under it).
    let (_, v) = admin(
        &gw,
        "GET",
        "/admin/usage?group_by=key&team=data",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(names(&v, "key"), ["sibling"], "{v}");
    let (_, v) = admin(
        &gw,
        "GET",
        "/admin/usage?group_by=key&team=acme",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(names(&v, "key"), ["sibling", "team-a"], "{v}");
    let (s, _) = admin(&gw, "GET", "/admin/usage?team=nobody", ADMIN, None).await;
    assert_eq!(s, 400);
    // Writes: only keys of its team and sub-teams of it; nothing global.
    // (method, path, body, status)
    let writes = [
        (
            "POST",
            "/admin/keys",
            json!({"name": "k-data", "team": "data"}),
            403,
        ),
        ("POST", "/admin/keys", json!({"name": "k-none"}), 403),
        (
            "POST",
            "/admin/keys",
            json!({"name": "k-plat", "team": "platform"}),
            201,
        ),
        (
            "POST",
            "/admin/teams",
            json!({"name": "plat-sub", "parent": "platform"}),
            201,
        ),
        (
            "POST",
            "/admin/teams",
            json!({"name": "rogue", "parent": "data"}),
            403,
        ),
        (
            "POST",
            "/admin/keys",
            json!({"name": "k-sub", "team": "plat-sub"}),
            201,
        ),
        ("GET", "/admin/config", Value::Null, 403),
        ("GET", "/admin/audit", Value::Null, 403),
    ];
    for (method, path, b, status) in writes {
        let body = (!b.is_null()).then_some(b.clone());
        let (s, v) = admin(&gw, method, path, PLATFORM_ADMIN, body).await;
        assert_eq!(s, status, "{method} {path} {b}: {v}");
    }
    let (_, v) = admin(&gw, "GET", "/admin/keys", PLATFORM_ADMIN, None).await;
    assert_eq!(names(&v, "name"), ["k-plat", "k-sub", "team-a"], "{v}");
}

/// A team's own rate limit holds for the keys of its sub-teams: the third request in a minute
/// of a key two levels down is refused at the team, naming it, and never failed over.
#[tokio::test]
async fn a_teams_rpm_bounds_the_keys_of_its_sub_teams_and_names_the_team() {
    let up = mock(text_spec("ok")).await;
    let tree = "team = \"sub\"\n\n[[teams]]\nname = \"org\"\n\n[[teams]]\nname = \"team\"\n\
                parent = \"org\"\nrpm = 2\n\n[[teams]]\nname = \"sub\"\nparent = \"team\"\n";
    let gw = gateway_full("", tree, &openai_channel("a", &up.base_url(), 1, "")).await;
    let ask = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for want in [200, 200, 429] {
        let resp = gw.chat(ask.clone()).await;
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(status, want, "{v}");
        if want == 429 {
            assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
            assert_eq!(v["error"]["param"], "team:team", "{v}");
        }
    }
    assert_eq!(up.requests(), 2, "the refusal reached no upstream");
}
