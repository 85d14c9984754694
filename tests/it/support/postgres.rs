//! A fresh PostgreSQL database per test, on the server `.ci/run` makes sure answers
//! (127.0.0.1:5432, trust auth), dropped when the test ends.

/// The server every PostgreSQL test uses; each gets a database of its own.
pub const POSTGRES_SERVER: &str = "postgres://postgres@127.0.0.1:5432";

/// A database made for one test; dropped (with any connection left) when this is dropped.
pub struct Postgres {
    pub url: String,
    name: String,
}

impl Postgres {
    pub async fn fresh(test: &str) -> Postgres {
        let name = format!("sy_{test}_{:08x}", fastrand::u32(..));
        admin_exec(&format!("CREATE DATABASE {name}")).await;
        Postgres {
            url: format!("{POSTGRES_SERVER}/{name}"),
            name,
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Dropped outside the test's runtime, which may be shutting down.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(admin_exec(&sql));
            }
        })
        .join();
    }
}

async fn admin_exec(sql: &str) {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(&format!("{POSTGRES_SERVER}/postgres"))
        .await
        .expect("PostgreSQL on 127.0.0.1:5432 (.ci/run starts it)");
    sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut c)
        .await
        .expect(sql);
}

/// A PostgreSQL server of the test's own (Debian's binaries, run as the `postgres` user, on a
/// free port, its data in a temporary directory), so a test may kill and restart it without
/// touching the server others share. Stopped when dropped.
pub struct OwnPostgres {
    pub port: u16,
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
}

impl OwnPostgres {
    /// Makes the cluster and starts it.
    pub async fn start() -> OwnPostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("Debian's PostgreSQL under /usr/lib/postgresql")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|p| p.join("initdb").exists())
            .expect("initdb");
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("data dir");
        chown_postgres(dir.path());
        chown_postgres(&data);
        let ok = as_postgres(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "initdb");
        let pg = OwnPostgres {
            port: super::free_port(),
            dir,
            bin,
        };
        pg.up().await;
        pg
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server on its data and waits until it takes connections.
    pub async fn up(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let ok = self
            .ctl()
            .args(["start", "-w", "-o", &opts, "-l"])
            .arg(self.dir.path().join("log"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "pg_ctl start");
        let url = self.url();
        super::until(
            "PostgreSQL to take connections",
            std::time::Duration::from_secs(20),
            async || {
                use sqlx::Connection;
                sqlx::PgConnection::connect(&url).await.map(|_| ())
            },
        )
        .await;
    }

    /// Stops it at once, as a crash would (`pg_ctl stop -m immediate`: no checkpoint; the
    /// next start recovers from the log, without what was committed asynchronously in the
    /// last fraction of a second).
    pub fn crash(&self) {
        let _ = self.ctl().args(["stop", "-m", "immediate"]).status();
    }

    /// Stops it as an operator's restart does (`pg_ctl stop -m fast`): sessions cut, every
    /// commit written.
    pub fn stop(&self) {
        let _ = self.ctl().args(["stop", "-m", "fast"]).status();
    }

    fn ctl(&self) -> std::process::Command {
        let mut c = as_postgres(&self.bin.join("pg_ctl"));
        c.arg("-D").arg(self.dir.path().join("data"));
        c.stdout(std::process::Stdio::null());
        c
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.crash();
    }
}

/// A command run as the `postgres` user (PostgreSQL's servers refuse to run as root).
fn as_postgres(program: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(program);
    c
}

fn chown_postgres(path: &std::path::Path) {
    let ok = std::process::Command::new("chown")
        .arg("postgres:postgres")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chown postgres {}", path.display());
}
