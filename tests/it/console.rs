//! The console over HTTP: sign-in and its session cookie, CSRF on every write, the headers that
//! guard each page, sign-out, a removed token, the sign-in limit; the admin API the pages read
//! (the log's filters and cursor, per-channel figures, the route preview, budgets); and the
//! whole console in a real browser (Playwright driving Debian's Chromium, tests/browser/).

use serde_json::{Value, json};

use switchyard::provider::mock::MockServer;

use crate::support::*;

const VIEWER: &str = "viewer-token-0123456789";

/// An admin of group `team-b`, which none of these tests' keys or channels is in.
const SCOPED: &str = "scoped-token-0123456789";

fn viewer_admin() -> String {
    format!(
        "[[admins]]\nname = \"viewer\"\ntoken = \"{VIEWER}\"\nrole = \"viewer\"\n\n\
         [[admins]]\nname = \"scoped\"\ntoken = \"{SCOPED}\"\nrole = \"admin\"\ngroups = [\"team-b\"]\n\n"
    )
}

/// A client that shows redirects instead of following them.
fn browserless() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Signs in with `token`: the answer's status and its `Set-Cookie`.
async fn sign_in(gw: &Gateway, token: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut rb = browserless()
        .post(format!("{}/console/sign-in", gw.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.expect("sign in");
    let cookie = header(&r, "set-cookie").to_string();
    (r.status().as_u16(), cookie)
}

/// The `name=value` part of a `Set-Cookie`.
fn pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or("").to_string()
}

/// A console page with a cookie: status, body.
async fn page(gw: &Gateway, path: &str, cookie: &str) -> (u16, String, reqwest::header::HeaderMap) {
    let r = browserless()
        .get(format!("{}{path}", gw.url))
        .header("cookie", cookie)
        .send()
        .await
        .expect("page");
    let (s, h) = (r.status().as_u16(), r.headers().clone());
    (s, r.text().await.unwrap_or_default(), h)
}

/// The CSRF token a page carries in its `<meta>`.
fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf-token\" content=\"")
        .expect("csrf meta")
        + 27;
    html[at..].split('"').next().unwrap_or("").to_string()
}

/// An admin API call with a session cookie (and a CSRF token when given).
async fn with_session(
    gw: &Gateway,
    method: reqwest::Method,
    path: &str,
    cookie: &str,
    csrf: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut rb = browserless()
        .request(method, format!("{}{path}", gw.url))
        .header("cookie", cookie);
    if let Some(c) = csrf {
        rb = rb.header("x-csrf-token", c);
    }
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.expect("admin call");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A gateway on a store at `url` (its request log there too, with PostgreSQL), with the
/// test key (in team `console-team`), an admin, a viewer, and `rest`.
async fn on(url: &str, server_extra: &str, rest: &str) -> Gateway {
    let store = store_section(url, Some(&master_key(7)));
    let key = format!(
        "mcp = {{ servers = [\"*\"], tools = [\"*\"] }}\nteam = \"console-team\"\n\n\
         [[teams]]\nname = \"console-team\"\n{store}"
    );
    gateway_full(server_extra, &key, &format!("{}{rest}", viewer_admin())).await
}

/// As [`on`], on an SQLite store in a temp dir.
async fn console_gateway(server_extra: &str, rest: &str) -> (Gateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    (on(&url, server_extra, rest).await, dir)
}

#[tokio::test]
async fn a_session_is_a_guarded_cookie_and_every_write_needs_its_csrf_token() {
    let up = mock(text_spec("hello")).await;
    let (gw, _dir) = console_gateway("", &openai_channel("one", &up.base_url(), 0, "")).await;

    // Without a session: the sign-in form, one secret field, guarded headers.
    let (s, html, h) = page(&gw, "/console", "").await;
    assert_eq!(s, 200);
    assert_eq!(html.matches("type=\"password\"").count(), 1, "{html}");
    assert_eq!(html.matches("<input").count(), 1, "one field: the secret");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(
        page(&gw, "/console/keys", "").await.0,
        303,
        "a page needs a session"
    );

    assert_eq!(sign_in(&gw, "not-a-token-at-all", &[]).await.0, 401);
    let (s, set) = sign_in(&gw, ADMIN, &[]).await;
    assert_eq!(s, 303);
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP on loopback: {set}");
    let cookie = pair(&set);

    // Every page: 200, one h1 naming it, the CSRF token in its head.
    for (slug, title) in [
        ("channels", "Channels"),
        ("keys", "Keys"),
        ("logs", "Request log"),
        ("performance", "Performance"),
        ("health", "Health"),
        ("usage", "Usage"),
        ("playground", "Route playground"),
        ("audit", "Audit and events"),
    ] {
        let (s, html, h) = page(&gw, &format!("/console/{slug}"), &cookie).await;
        assert_eq!(s, 200, "{slug}");
        assert_eq!(html.matches("<h1").count(), 1, "{slug}");
        assert!(html.contains(&format!("<h1>{title}</h1>")), "{slug}");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["cache-control"], "no-store");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert!(
            !html.contains(ADMIN),
            "{slug}: the token is never in a page"
        );
    }
    assert_eq!(page(&gw, "/console/nothing-here", &cookie).await.0, 404);
    let (_, html, _) = page(&gw, "/console/keys", &cookie).await;
    let csrf = csrf_of(&html);
    assert_eq!(csrf.len(), 64);

    // Reads with the session; a write needs the CSRF token too. A viewer: every page, no write
    // control, no write, but the route preview (a POST that changes nothing).
    let read = with_session(
        &gw,
        reqwest::Method::GET,
        "/admin/channels",
        &cookie,
        None,
        None,
    )
    .await;
    assert_eq!(read.0, 200);
    let (_, vset) = sign_in(&gw, VIEWER, &[]).await;
    let vcookie = pair(&vset);
    let (_, vhtml, _) = page(&gw, "/console/channels", &vcookie).await;
    assert!(!vhtml.contains("New channel") && !vhtml.contains("channel-form"));
    let (_, khtml, _) = page(&gw, "/console/keys", &vcookie).await;
    assert!(!khtml.contains("New key"));
    let (vcsrf, zeros) = (csrf_of(&khtml), "0".repeat(64));
    let key = json!({"name": "made-here"});
    let preview = json!({"key": "team-a", "model": "m"});
    let writes = [
        (&cookie, None, "/admin/keys", &key, (403, "csrf_failed")),
        (
            &cookie,
            Some(&zeros),
            "/admin/keys",
            &key,
            (403, "csrf_failed"),
        ),
        (
            &cookie,
            Some(&vcsrf),
            "/admin/keys",
            &key,
            (403, "csrf_failed"),
        ),
        (&cookie, Some(&csrf), "/admin/keys", &key, (201, "")),
        (
            &vcookie,
            Some(&vcsrf),
            "/admin/keys",
            &key,
            (403, "forbidden"),
        ),
        (
            &vcookie,
            Some(&vcsrf),
            "/admin/route/explain",
            &preview,
            (200, ""),
        ),
    ];
    for (c, token, path, body, want) in writes {
        let method = reqwest::Method::POST;
        let got = with_session(
            &gw,
            method,
            path,
            c,
            token.map(String::as_str),
            Some(body.clone()),
        )
        .await;
        assert_eq!(code(&got), want, "{path} {token:?}: {:?}", got.1);
    }

    // Signing out needs the CSRF token; afterwards the cookie opens nothing on this replica.
    let out = browserless()
        .post(format!("{}/console/sign-out", gw.url))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status().as_u16(), 303);
    assert!(header(&out, "set-cookie").contains("Max-Age=0"));
    assert_eq!(page(&gw, "/console/keys", &cookie).await.0, 303);
    let activity = |c: String| {
        browserless()
            .post(format!("{}/console/activity", gw.url))
            .header("cookie", c)
            .send()
    };
    assert_eq!(activity(cookie.clone()).await.unwrap().status(), 401);
    assert_eq!(
        activity(vcookie.clone()).await.unwrap().status(),
        204,
        "a live session"
    );
    let after = with_session(
        &gw,
        reqwest::Method::GET,
        "/admin/channels",
        &cookie,
        None,
        None,
    )
    .await;
    assert_eq!(after.0, 401);

    // A token taken out of the config ends its sessions at once.
    let text = std::fs::read_to_string(&gw.config_path).unwrap();
    std::fs::write(
        &gw.config_path,
        text.replace(VIEWER, "a-new-viewer-token-0123456"),
    )
    .unwrap();
    assert_eq!(gw.reload().await.status(), 200);
    assert_eq!(page(&gw, "/console/keys", &vcookie).await.0, 303);
}

#[tokio::test]
async fn the_cookie_is_secure_behind_a_trusted_proxy_and_sign_in_is_limited() {
    let up = mock(text_spec("hello")).await;
    let channel = openai_channel("one", &up.base_url(), 0, "");
    let (gw, _d) = console_gateway("trusted_proxies = [\"127.0.0.0/8\"]", &channel).await;
    let (_, set) = sign_in(&gw, ADMIN, &[("x-forwarded-proto", "https")]).await;
    assert!(set.contains("; Secure"), "{set}");
    let (_, set) = sign_in(&gw, ADMIN, &[]).await;
    assert!(!set.contains("Secure"), "{set}");
    // Not a trusted proxy: its X-Forwarded-Proto is not believed.
    let (plain, _d2) = console_gateway("", &channel).await;
    let (_, set) = sign_in(&plain, ADMIN, &[("x-forwarded-proto", "https")]).await;
    assert!(!set.contains("Secure"), "{set}");
    // Failures count with the admin API's: the eleventh in a minute is refused unread.
    for _ in 0..10 {
        assert_eq!(sign_in(&plain, "wrong-token-wrong-token", &[]).await.0, 401);
    }
    assert_eq!(sign_in(&plain, ADMIN, &[]).await.0, 429);
    let (s, _) = as_admin(&plain, "GET", "/admin/channels", None).await;
    assert_eq!(s, 429, "the same limit as the admin API's");
}

/// Three requests, each failed over from `flaky` (500) to `steady`, the last marked as test
/// traffic, on a gateway whose store (and request log) is at `url`.
async fn traffic(url: &str) -> (Gateway, Vec<String>, [MockServer; 2]) {
    let up = mock(text_spec("hello")).await;
    let broken = mock(faulty("x", status(500))).await;
    let channels = format!(
        "{}{}",
        openai_channel(
            "flaky",
            &broken.base_url(),
            0,
            "circuit_breaker = { enabled = false }"
        ),
        openai_channel("steady", &up.base_url(), 1, ""),
    );
    let gw = on(url, "", &channels).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut rb = client()
            .post(gw.chat_url())
            .bearer_auth(KEY)
            .json(&chat_body(false));
        if i == 2 {
            rb = rb.header("x-switchyard-test", "1");
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status(), 200);
        ids.push(header(&r, "x-request-id").to_string());
    }
    gw.flush_log().await;
    (gw, ids, [up, broken])
}

async fn requests(gw: &Gateway, query: &str) -> (u16, Value) {
    as_admin(gw, "GET", &format!("/admin/requests?{query}"), None).await
}

/// On both backends: the log's pages walk every row once by cursor, and each filter keeps
/// the rows it names.
#[tokio::test]
async fn the_log_api_filters_and_pages_by_cursor() {
    let stores = Stores::new("console_log").await;
    for url in stores.urls() {
        log_pages(&url).await;
    }
}

async fn log_pages(url: &str) {
    let (gw, ids, _up) = traffic(url).await;
    let ids_of = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    // Pages of one, newest first, each after the last's cursor: every row once.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (s, page) = requests(&gw, &format!("limit=1&before={cursor}")).await;
        assert_eq!(s, 200, "{page}");
        seen.extend(ids_of(&page));
        match page["next"].as_str() {
            Some(n) => cursor = n.to_string(),
            None => break,
        }
        assert!(seen.len() <= 3, "{seen:?}");
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first);
    // Filters, table-driven: the query and the rows it must give, newest first.
    let cases: [(&str, Vec<String>); 7] = [
        ("hide_test=true", vec![ids[1].clone(), ids[0].clone()]),
        (&format!("id={}", ids[1]), vec![ids[1].clone()]),
        ("failed_over=true", newest_first.clone()),
        ("channel=steady&status=200", newest_first.clone()),
        ("channel=flaky", vec![]),
        ("key=team-a&model=m&outcome=ok", newest_first.clone()),
        ("since=0&until=1", vec![]),
    ];
    for (q, want) in &cases {
        let (s, page) = requests(&gw, q).await;
        assert_eq!(s, 200, "{q}: {page}");
        assert_eq!(&ids_of(&page), want, "{q}");
    }
    let (_, one) = requests(&gw, &format!("id={}", ids[0])).await;
    let row = &one["data"][0];
    assert_eq!(row["attempt_count"], 2);
    assert_eq!(row["attempts"][0]["reason"], "server_error");
    assert_eq!(row["test"], false);
    for bad in [
        "before=yesterday",
        "status=teapot",
        "failed_over=maybe",
        "limit=-1",
    ] {
        let r = requests(&gw, bad).await;
        assert_eq!(code(&r).0, 400, "{bad}: {:?}", r.1);
    }
}

#[tokio::test]
async fn stats_count_each_channels_calls_and_the_preview_and_budgets_answer_for_a_named_key() {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let (gw, _ids, _up) = traffic(&url).await;
    let (s, stats) = as_admin(&gw, "GET", "/admin/stats?window=3600", None).await;
    assert_eq!(s, 200, "{stats}");
    let series = |ch: &str| {
        stats["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["channel"] == ch)
            .cloned()
            .unwrap()
    };
    // Test traffic left out: two requests, each a failed call on flaky and a served one on steady.
    let (flaky, steady) = (series("flaky"), series("steady"));
    assert_eq!(
        (
            flaky["total"]["calls"].as_u64(),
            flaky["total"]["errors"].as_u64()
        ),
        (Some(2), Some(2))
    );
    assert_eq!(flaky["total"]["error_rate"], 1.0);
    assert_eq!(
        (
            steady["total"]["calls"].as_u64(),
            steady["total"]["errors"].as_u64()
        ),
        (Some(2), Some(0))
    );
    assert!(steady["total"]["ttfb_p95_ms"].is_i64());
    assert_eq!(stats["requests"], 2);
    assert!(stats["overhead"]["non_stream"]["count"].as_u64() >= Some(3));
    assert_eq!(
        code(&as_admin(&gw, "GET", "/admin/stats?window=soon", None).await).0,
        400
    );
    // A step larger than the window is the window (found by reading for the schema fuzz: a
    // step whose milliseconds overflowed to 0 divided by zero once the window held requests).
    let (s, huge) = as_admin(&gw, "GET", "/admin/stats?step=2305843009213693952", None).await;
    assert_eq!(s, 200, "{huge}");
    let window = huge["to_ms"]
        .as_i64()
        .zip(huge["from_ms"].as_i64())
        .map(|(t, f)| t - f);
    assert_eq!(huge["step_ms"].as_i64(), window, "{huge}");

    let body =
        json!({"key": "team-a", "model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let (s, plan) = as_admin(&gw, "POST", "/admin/route/explain", Some(body)).await;
    assert_eq!(s, 200, "{plan}");
    assert_eq!(plan["key"], "team-a");
    let names: Vec<&str> = plan["chain"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["channel"].as_str())
        .collect();
    assert_eq!(names, ["flaky", "steady"]);
    let missing = as_admin(
        &gw,
        "POST",
        "/admin/route/explain",
        Some(json!({"key": "nobody", "model": "m"})),
    )
    .await;
    assert_eq!(code(&missing), (404, "not_found"));
    let nameless = as_admin(
        &gw,
        "POST",
        "/admin/route/explain",
        Some(json!({"model": "m"})),
    )
    .await;
    assert_eq!(code(&nameless).0, 400);
    let (_, before) = as_admin(&gw, "GET", "/admin/requests?limit=1", None).await;
    assert_eq!(
        before["data"].as_array().unwrap().len(),
        1,
        "a preview is not logged"
    );

    let (s, made) = as_admin(
        &gw,
        "POST",
        "/admin/keys",
        Some(json!({"name": "budgeted", "budget": {"usd": 2.5, "period": "day"}})),
    )
    .await;
    assert_eq!(s, 201, "{made}");
    let (s, budgets) = as_admin(&gw, "GET", "/admin/budgets", None).await;
    assert_eq!(s, 200);
    let b = budgets["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "budgeted")
        .cloned()
        .unwrap();
    assert_eq!(
        (
            b["scope"].as_str(),
            b["budget_micros"].as_u64(),
            b["headroom_micros"].as_u64()
        ),
        (Some("key"), Some(2_500_000), Some(2_500_000))
    );

    // An admin of another group sees none of it: no channel's figures, no budget, no key to
    // preview (answered as missing).
    let (_, theirs) = admin(&gw, "GET", "/admin/stats?window=3600", SCOPED, None).await;
    assert_eq!(theirs["series"], json!([]), "{theirs}");
    let (_, theirs) = admin(&gw, "GET", "/admin/budgets", SCOPED, None).await;
    assert_eq!(theirs["data"], json!([]), "{theirs}");
    let body = json!({"key": "team-a", "model": "m"});
    let theirs = admin(&gw, "POST", "/admin/route/explain", SCOPED, Some(body)).await;
    assert_eq!(code(&theirs), (404, "not_found"));
}

/// The console in a real browser, as `tests/browser/console.py` drives it. Needs the Python
/// with Playwright (`SWITCHYARD_PY`, which `.ci/run` sets) and `/usr/bin/chromium`; without
/// them it says so and passes, except under `CI` (or `SWITCHYARD_BROWSER_REQUIRED`, which
/// `.ci/run` sets).
#[tokio::test]
async fn console_in_a_browser() {
    let Some(py) = browser_python() else {
        return;
    };
    let up = mock(text_spec("hello from the mock")).await;
    let broken = mock(faulty("x", status(500))).await;
    let channels = format!(
        "{}{}{}{}",
        models_channel(
            "flaky",
            &broken.base_url(),
            &["fo-model"],
            "priority = 0\ncircuit_breaker = { enabled = false }"
        ),
        // Priced, so that spend, usage and the charge have figures to show.
        models_channel(
            "steady",
            &up.base_url(),
            &["fo-model", "pick-model"],
            "priority = 1\nprice = { input = 2000, output = 8000 }"
        ),
        // Two channels for a model routed by a measured strategy (the playground says why).
        models_channel("steady-b", &up.base_url(), &["pick-model"], "priority = 1"),
        "[[models]]\nname = \"pick-model\"\nstrategy = \"least_busy\"\n\n",
    );
    // A Vertex channel whose token endpoint refuses the connection: its credential's refresh
    // error is what the health page must show.
    let sa = json!({"type": "service_account", "client_email": "t@p.iam.gserviceaccount.com",
        "private_key": include_str!("../fixtures/google/test-service-account-key.pem"),
        "token_uri": "http://127.0.0.1:9/token"});
    let vertex = format!(
        "[[channels]]\nname = \"vertex-token\"\nprovider = \"vertex\"\nproject = \"p\"\n\
         location = \"us-east5\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         credentials_json = '{sa}'\nmodels = [\"gemini-2.5-flash\"]\n\n"
    );
    let rx = receiver(&[]).await;
    let hooks = webhook_config("ops", &rx.url, &whsec(3), "\"webhook.test\"", 10);
    // An MCP server, when the MCP SDK is here (always under CI): the MCP page shows it, its
    // tools and a call.
    let docs = match mcp_python() {
        Some(py) => Some(McpServer::start(&py, "docs", &[]).await),
        None => None,
    };
    let mcp = docs.as_ref().map_or(String::new(), |d| {
        format!("[[mcp_servers]]\nname = \"docs\"\nurl = \"{}\"\n\n", d.url)
    });
    let (gw, _dir) = console_gateway("", &format!("{channels}{vertex}{hooks}{mcp}")).await;
    if docs.is_some() {
        let mut s = RawSession::open(&format!("{}/mcp", gw.url), KEY).await;
        assert_eq!(
            s.tool("docs__echo", json!({"text": "for the console"}))
                .await,
            Ok("for the console".into())
        );
    }
    let r = gw
        .chat(json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert!(
        r.status().is_server_error() || r.status() == 401,
        "{}",
        r.status()
    );
    // A few requests so that the charts have points before the browser looks.
    for _ in 0..3 {
        let r = gw
            .chat(json!({"model": "fo-model", "messages": [{"role": "user", "content": "hi"}]}))
            .await;
        assert_eq!(r.status(), 200);
    }
    gw.flush_log().await;
    let shots = concat!(env!("CARGO_TARGET_TMPDIR"), "/console-screenshots");
    let _ = std::fs::remove_dir_all(shots);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/console.py");
    // `timeout` bounds the run; the test's own runtime keeps serving the gateway meanwhile.
    let (gw_url, up_url) = (gw.url.clone(), up.base_url());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("timeout")
            .args(["240", &py, script])
            .env("SY_BASE", gw_url)
            .env("SY_ADMIN", ADMIN)
            .env("SY_VIEWER", VIEWER)
            .env("SY_KEY", KEY)
            .env("SY_UPSTREAM", up_url)
            .env("SY_SHOTS", shots)
            .env("SY_MCP", if docs.is_some() { "1" } else { "" })
            .output()
    })
    .await
    .expect("the browser run's thread")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "browser run failed:\n{stdout}\n{stderr}"
    );
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(last["ok"], true);
    let names: Vec<&str> = last["screenshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for slug in [
        "channels",
        "keys",
        "logs",
        "performance",
        "health",
        "usage",
        "playground",
        "mcp",
        "audit",
    ] {
        assert!(
            names.contains(&format!("admin-{slug}-1280x800.png").as_str()),
            "{names:?}"
        );
    }
    // The "Send test" button reached the receiver, signed.
    let sent = rx.delivered();
    assert!(
        sent.iter().any(|r| r.body.contains("webhook.test")),
        "{:?}",
        sent.len()
    );
    eprintln!("screenshots in {shots}: {names:?}");
}
