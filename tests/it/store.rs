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

#[tokio::test]
async fn a_store_a_newer_binary_migrated_is_refused() {
    let (_dir, _pg, urls) = backends("newer").await;
    for url in &urls {
        let db = Db::open(url).await.unwrap();
        let sql = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99990101, 'from the future', TRUE, $1, 0)";
        let checksum = vec![0u8; 48];
        match &db {
            Db::Sqlite(p) => sqlx::query(sql)
                .bind(&checksum)
                .execute(p)
                .await
                .map(|_| ()),
            Db::Postgres(p) => sqlx::query(sql)
                .bind(&checksum)
                .execute(p)
                .await
                .map(|_| ()),
        }
        .unwrap();
        match Db::open(url).await {
            Err(DbError::Newer(v)) => assert_eq!(v, 99990101, "{url}"),
            other => panic!("{url}: {other:?}"),
        }
        let status = db.migrations().await.unwrap();
        let future = status.iter().find(|m| m.version == 99990101).unwrap();
        assert!(
            future.applied && future.description.contains("newer"),
            "{url}: {status:?}"
        );
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
        master_key: master.map(switchyard::secret::Secret::new),
    }
}

/// A master key for tests: 32 bytes, base64.
fn master(byte: u8) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

#[tokio::test]
async fn the_pepper_is_made_once_sealed_and_read_back_under_the_same_master_key() {
    use switchyard::store::{OpenError, Store};
    let (_dir, _pg, urls) = backends("pepper").await;
    for url in &urls {
        let first = Store::open(&settings(url, Some(&master(1))), None)
            .await
            .unwrap();
        let hash = first.pepper().unwrap().hash("sk-sy-some-key");
        // Another start (another replica) hashes keys the same way.
        let again = Store::open(&settings(url, None), Some(master(1)))
            .await
            .unwrap();
        assert_eq!(
            again.pepper().unwrap().hash("sk-sy-some-key"),
            hash,
            "{url}"
        );
        // Another master key cannot open what the first sealed, and says which key it needs.
        match Store::open(&settings(url, Some(&master(2))), None).await {
            Err(OpenError::WrongMasterKey(id)) => {
                assert_eq!(id, first.master().unwrap().id(), "{url}")
            }
            other => panic!("{url}: {other:?}"),
        }
        // Without a master key the store opens, but has nothing to hash keys with.
        let bare = Store::open(&settings(url, None), None).await.unwrap();
        assert!(bare.pepper().is_none() && bare.master().is_none(), "{url}");
        assert!(matches!(
            Store::open(&settings(url, Some("not a key")), None).await,
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
