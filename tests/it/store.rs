//! The store on both backends, one conformance suite: opening migrates, reopening changes
//! nothing, `migrate status` reads where a database is, and a database a newer binary migrated
//! is refused.

use switchyard::store::{Db, DbError};

use crate::support::*;

/// Each backend's store for one test: an SQLite file in a temp dir, a fresh PostgreSQL database.
async fn backends(test: &str) -> (tempfile::TempDir, Postgres, [String; 2]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = format!("sqlite://{}", dir.path().join("store.db").display());
    let pg = Postgres::fresh(test).await;
    let urls = [sqlite, pg.url.clone()];
    (dir, pg, urls)
}

#[tokio::test]
async fn opening_migrates_once_and_status_says_where_a_store_is() {
    let (_dir, _pg, urls) = backends("migrate").await;
    for url in &urls {
        // Before: nothing applied, every migration known.
        let fresh = Db::connect(url).await.unwrap();
        let before = fresh.migrations().await.unwrap();
        assert!(!before.is_empty(), "{url}");
        assert!(before.iter().all(|m| !m.applied), "{url}: {before:?}");
        let db = Db::open(url).await.unwrap();
        let after = db.migrations().await.unwrap();
        assert!(after.iter().all(|m| m.applied), "{url}: {after:?}");
        assert_eq!(after.len(), before.len());
        // Again: nothing to do, same state.
        let again = Db::open(url).await.unwrap();
        assert_eq!(again.migrations().await.unwrap(), after, "{url}");
    }
}

/// Runs one statement with text parameters on either backend.
async fn exec(db: &Db, sql: &'static str, args: &[&str]) {
    match db {
        Db::Sqlite(p) => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await.map(|_| ())
        }
        Db::Postgres(p) => {
            let mut q = sqlx::query(sql);
            for a in args {
                q = q.bind(*a);
            }
            q.execute(p).await.map(|_| ())
        }
    }
    .expect(sql);
}

#[tokio::test]
async fn a_store_one_expand_ahead_is_served_and_one_that_contracted_is_refused() {
    let (_dir, _pg, urls) = backends("newer").await;
    for url in &urls {
        let db = Db::open(url).await.unwrap();
        // A newer binary's migration that only added: this binary serves the store as is (a
        // one-step rollback).
        let sql = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101, 'from the future', TRUE, CAST($1 AS BLOB), 0)";
        let sql_pg = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101, 'from the future', TRUE, CAST($1 AS BYTEA), 0)";
        exec(
            &db,
            if url.starts_with("sqlite") {
                sql
            } else {
                sql_pg
            },
            &["00"],
        )
        .await;
        Db::open(url)
            .await
            .expect("an expand-only newer store opens");
        let status = db.migrations().await.unwrap();
        let future = status.iter().find(|m| m.version == 99990101).unwrap();
        assert!(
            future.applied && future.unknown && future.description.contains("newer"),
            "{url}: {status:?}"
        );
        // One that contracted (raised readable_by past what this binary knows): refused.
        exec(
            &db,
            "INSERT INTO meta (k, v) VALUES ('readable_by', $1)",
            &["99990101"],
        )
        .await;
        match Db::open(url).await {
            Err(DbError::Newer(v)) => assert_eq!(v, 99990101, "{url}"),
            other => panic!("{url}: {other:?}"),
        }
    }
}

/// Expand, then contract: every migration after the first only adds (no DROP, no RENAME, no
/// ALTER of a column), so the release before can read the store it leaves.
#[test]
fn migrations_after_the_first_only_add() {
    for backend in ["sqlite", "postgres"] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(backend);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        assert!(files.len() >= 2, "{files:?}");
        for f in &files[1..] {
            let sql = std::fs::read_to_string(f).unwrap().to_uppercase();
            let code: String = sql
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            for word in ["DROP ", "RENAME", "ALTER COLUMN", "READABLE_BY"] {
                assert!(!code.contains(word), "{}: {word}", f.display());
            }
        }
    }
}

#[tokio::test]
async fn a_wrong_url_names_the_setting() {
    let e = Db::open("mysql://x").await.unwrap_err();
    assert!(e.to_string().contains("store.url"), "{e}");
    // A refused connection says so, without the password it was given.
    let e = Db::open("postgres://u:hunter2-secret@127.0.0.1:9/x")
        .await
        .unwrap_err();
    assert!(matches!(e, DbError::Connect(_)), "{e}");
    assert!(!e.to_string().contains("hunter2-secret"), "{e}");
}

#[tokio::test]
async fn migrate_status_says_what_is_pending_and_check_names_a_wrong_store_url() {
    let bin = env!("CARGO_BIN_EXE_switchyard");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let path = dir.path().join("c.toml");
    let config = |url: &str| {
        format!(
            "[store]\nurl = \"{url}\"\n\n[[channels]]\nname = \"m\"\nprovider = \"mock\"\nmodels = [\"m\"]\n"
        )
    };
    std::fs::write(&path, config(&url)).unwrap();
    let status = || {
        let out = std::process::Command::new(bin)
            .args(["migrate", "status", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = status();
    assert!(
        before.contains("store: sqlite") && before.contains("pending"),
        "{before}"
    );
    assert!(!before.contains("0 pending"), "{before}");
    Db::open(&url).await.unwrap();
    let after = status();
    assert!(
        after.contains("applied") && after.contains("0 pending"),
        "{after}"
    );
    // `check` names the store; a URL of another kind is refused with its field.
    let out = std::process::Command::new(bin)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("store sqlite"));
    std::fs::write(&path, config("mysql://x")).unwrap();
    let out = std::process::Command::new(bin)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("store.url"));
}

fn settings(url: &str, master: Option<&str>) -> switchyard::config::StoreSettings {
    switchyard::config::StoreSettings {
        url: switchyard::secret::Secret::new(url),
        retention: std::time::Duration::from_secs(30 * 86_400),
        ledger_retention: std::time::Duration::from_secs(400 * 86_400),
        master_key: master.map(switchyard::secret::Secret::new),
        poll_interval: std::time::Duration::from_millis(500),
    }
}

/// A master key for tests: 32 bytes, base64.
fn master(byte: u8) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

#[tokio::test]
async fn the_pepper_is_made_once_sealed_and_read_back_under_the_same_master_key() {
    use switchyard::store::{MasterEnv, OpenError, Store};
    let (_dir, _pg, urls) = backends("pepper").await;
    for url in &urls {
        let first = Store::open(&settings(url, Some(&master(1))), MasterEnv::default())
            .await
            .unwrap();
        let hash = first.pepper().unwrap().hash("sk-sy-some-key");
        // Another start (another replica) hashes keys the same way.
        let again = Store::open(
            &settings(url, None),
            MasterEnv {
                current: Some(master(1)),
                next: None,
            },
        )
        .await
        .unwrap();
        assert_eq!(
            again.pepper().unwrap().hash("sk-sy-some-key"),
            hash,
            "{url}"
        );
        // Another master key cannot open what the first sealed, and says which key it needs.
        match Store::open(&settings(url, Some(&master(2))), MasterEnv::default()).await {
            Err(OpenError::WrongMasterKey(id)) => {
                assert_eq!(id, first.keys().unwrap().sealing().id(), "{url}")
            }
            other => panic!("{url}: {other:?}"),
        }
        // Without a master key the store opens, but has nothing to hash keys with.
        let bare = Store::open(&settings(url, None), MasterEnv::default())
            .await
            .unwrap();
        assert!(bare.pepper().is_none() && bare.keys().is_none(), "{url}");
        assert!(matches!(
            Store::open(&settings(url, Some("not a key")), MasterEnv::default()).await,
            Err(OpenError::MasterKey(_))
        ));
    }
}

#[tokio::test]
async fn a_gateway_with_a_store_opens_it_before_it_listens() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.db");
    let store = format!(
        "[store]\nurl = \"sqlite://{}\"\nmaster_key = \"{}\"\n\n",
        file.display(),
        master(3)
    );
    let up = mock(text_spec("ok")).await;
    let gw = gateway(&format!(
        "{store}{}",
        openai_channel("a", &up.base_url(), 1, "")
    ))
    .await;
    let ready = get_json(&format!("{}/readyz", gw.url), None).await;
    assert_eq!(ready["store"]["backend"], "sqlite", "{ready}");
    assert_eq!(ready["store"]["master_key"].as_str().map(str::len), Some(8));
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    // The store's files (the database and its write-ahead log) hold the sealed pepper, never
    // the master key.
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(&master(3)));
    }
}

/// A write of `action` on channel `name`, by `admin`.
fn write<'a>(
    action: switchyard::store::objects::Action,
    name: &'a str,
    body: Option<&'a serde_json::Value>,
    diff: &'a serde_json::Value,
) -> switchyard::store::objects::Write<'a> {
    switchyard::store::objects::Write {
        action,
        kind: "channel",
        name,
        body,
        admin: "ops",
        diff,
        now_ms: 1_700_000_000_000,
        idem: None,
        expect_version: None,
    }
}

#[tokio::test]
async fn objects_change_with_their_audit_row_and_the_version_or_not_at_all() {
    use serde_json::json;
    use switchyard::store::objects::{Action, WriteError, verify};
    let (_dir, _pg, urls) = backends("objects").await;
    for url in &urls {
        let db = Db::open(url).await.unwrap();
        assert_eq!(db.version().await.unwrap(), 0);
        let body = json!({"name": "a", "provider": "mock", "models": ["m"]});
        let diff = json!({"provider": "mock"});
        assert_eq!(
            db.write(&write(Action::Create, "a", Some(&body), &diff))
                .await
                .unwrap(),
            1
        );
        let got = db.object("channel", "a").await.unwrap().unwrap();
        assert_eq!(got.body, body, "{url}");
        // A duplicate, a change or removal of nothing: refused, and nothing moves.
        let e = db
            .write(&write(Action::Create, "a", Some(&body), &diff))
            .await
            .unwrap_err();
        assert!(matches!(e, WriteError::Exists { .. }), "{url}: {e}");
        let e = db
            .write(&write(Action::Update, "zz", Some(&body), &diff))
            .await
            .unwrap_err();
        assert!(matches!(e, WriteError::Missing { .. }), "{url}: {e}");
        assert_eq!(db.version().await.unwrap(), 1, "{url}");
        assert_eq!(db.audit(100, None).await.unwrap().len(), 1, "{url}");
        let changed = json!({"name": "a", "provider": "mock", "models": ["m", "n"]});
        assert_eq!(
            db.write(&write(Action::Update, "a", Some(&changed), &diff))
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            db.object("channel", "a").await.unwrap().unwrap().body,
            changed
        );
        assert_eq!(
            db.write(&write(Action::Delete, "a", None, &diff))
                .await
                .unwrap(),
            3
        );
        assert!(db.object("channel", "a").await.unwrap().is_none());
        // Writers racing each other: every write lands once, the chain keeps one order.
        let names: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
        let runs = names.iter().map(|n| {
            let db = db.clone();
            let (n, body, diff) = (n.clone(), body.clone(), diff.clone());
            tokio::spawn(async move {
                db.write(&write(Action::Create, &n, Some(&body), &diff))
                    .await
            })
        });
        let mut versions: Vec<i64> = Vec::new();
        for r in futures_util::future::join_all(runs).await {
            versions.push(r.unwrap().unwrap());
        }
        versions.sort_unstable();
        assert_eq!(versions, (4..16).collect::<Vec<i64>>(), "{url}");
        assert_eq!(db.objects("channel").await.unwrap().len(), 12);
        let mut rows = db.audit(100, None).await.unwrap();
        assert_eq!(rows.len(), 15, "{url}");
        rows.reverse();
        assert_eq!(verify(&rows), Ok(()), "{url}");
        // A row changed afterwards breaks the chain there.
        rows[5].admin = "someone else".into();
        assert_eq!(verify(&rows), Err(rows[5].id), "{url}");
        // Paging: the newest first, before an id.
        let page = db.audit(3, Some(rows[5].id)).await.unwrap();
        assert_eq!(
            page.iter().map(|r| r.id).collect::<Vec<_>>(),
            [rows[4].id, rows[3].id, rows[2].id]
        );
    }
}
