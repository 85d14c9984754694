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
