//! The admin API against its own OpenAPI document: schemathesis (PyPI, pinned in `.ci/run`)
//! reads `/admin/openapi.json` from a gateway on an SQLite store and sends generated valid and
//! invalid requests to every operation, with every check on (no 5xx, every status, header,
//! content type and body as documented, invalid input refused, valid input accepted, no
//! operation open without the token). `scripts/schemathesis.sh` runs it longer.

use std::process::Command;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_answers_as_its_openapi_document_says() {
    let Some(st) = program(
        "SWITCHYARD_SCHEMATHESIS",
        "st",
        "pip install schemathesis==4.32.5",
    ) else {
        return;
    };
    let up = mock(text_spec("ok")).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    // The checks send requests without a token on purpose: the address is not locked out.
    let rest = format!(
        "[admin]\nmax_failed_attempts = 1000000\n\n{}",
        openai_channel("file-a", &up.base_url(), 1, "")
    );
    let gw = on_store(&url, Some(&master_key(7)), &rest).await;
    // schemathesis keeps a cache in its working directory: the test's own, not the checkout.
    let work = dir.path().to_path_buf();
    let examples = std::env::var("SWITCHYARD_SCHEMATHESIS_EXAMPLES").unwrap_or("25".into());
    let out = tokio::task::spawn_blocking(move || {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis.toml");
        Command::new(st)
            .current_dir(work)
            .args(["--config-file", config])
            .args(["run", &format!("{}/admin/openapi.json", gw.url)])
            .args(["--url", &gw.url])
            .args(["-H", &format!("Authorization: Bearer {ADMIN}")])
            .args(["--checks", "all", "--max-examples", &examples])
            .args(["--seed", "22", "--no-color"])
            .output()
            .expect("schemathesis runs")
    })
    .await
    .expect("join");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("Tested: "), "{said}");
    // The run's size, for scripts/schemathesis.sh to report.
    for line in said
        .lines()
        .filter(|l| l.contains("generated") || l.contains("Tested: "))
    {
        eprintln!("schemathesis: {}", line.trim());
    }
}
