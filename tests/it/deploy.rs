//! The deployment files of `deploy/` (docs/deploy.md): every gateway config in them passes
//! `switchyard check`, each file passes its own linter or validator, and `switchyard probe`
//! (the image's health check) says whether the gateway answers.

use std::path::PathBuf;
use std::process::Command;

use crate::support::{BIN, run_bin, skipping, spawn_demo};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What the deployment configs read as `${VAR}`: never written in the files.
const SECRETS: &[(&str, &str)] = &[
    (
        "SWITCHYARD_MASTER_KEY",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    ),
    (
        "SWITCHYARD_STORE_URL",
        "postgres://switchyard:pg-secret-4711@postgres:5432/switchyard",
    ),
    ("SWITCHYARD_REDIS_URL", "redis://redis:6379"),
    ("SWITCHYARD_ADMIN_TOKEN", "admin-secret-0123456789abcdef"),
    ("TEAM_A_KEY", "sk-team-a-secret-4711"),
    ("OPENAI_API_KEY", "sk-openai-secret-4711"),
];

/// The config the ConfigMap carries under `switchyard.toml: |`, unindented, written in `dir`.
pub(crate) fn configmap_config(dir: &std::path::Path) -> PathBuf {
    let yaml = std::fs::read_to_string(format!("{ROOT}/deploy/kubernetes/configmap.yaml")).unwrap();
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("switchyard.toml: |"));
    lines.next();
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.get(4..).unwrap_or(""))
        .collect();
    let path = dir.join("configmap.toml");
    std::fs::write(&path, body.join("\n")).unwrap();
    path
}

#[test]
fn every_gateway_config_in_deploy_passes_check_without_echoing_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let configs = [
        PathBuf::from(format!("{ROOT}/deploy/compose/switchyard.toml")),
        configmap_config(dir.path()),
    ];
    for config in &configs {
        let run = run_bin(&["check", "--config", config.to_str().unwrap()], SECRETS);
        assert!(run.ok, "{}: {}{}", config.display(), run.out, run.err);
        assert!(
            run.out.contains("openai") && run.out.contains("postgres"),
            "{}",
            run.out
        );
        for (name, secret) in SECRETS.iter().filter(|(n, _)| *n != "SWITCHYARD_REDIS_URL") {
            let shown = format!("{}{}", run.out, run.err);
            assert!(
                !shown.contains(secret),
                "{}: check echoed {name}",
                config.display()
            );
        }
    }
}

#[test]
fn no_deployment_file_ships_a_usable_credential() {
    // Compose refuses to start without each secret: no default value stands in for one.
    let compose = std::fs::read_to_string(format!("{ROOT}/deploy/compose.yaml")).unwrap();
    for name in [
        "SWITCHYARD_MASTER_KEY",
        "SWITCHYARD_ADMIN_TOKEN",
        "TEAM_A_KEY",
        "OPENAI_API_KEY",
    ] {
        assert!(
            compose.contains(&format!("${{{name}:?")),
            "{name} has a default"
        );
    }
    // The Kubernetes Secret's values are empty as shipped, and the gateway refuses them.
    let secret = std::fs::read_to_string(format!("{ROOT}/deploy/kubernetes/secret.yaml")).unwrap();
    for (name, _) in SECRETS {
        assert!(
            secret.contains(&format!("{name}: \"\"")),
            "{name} is not empty"
        );
    }
    // Each left empty on its own (the others set) is refused.
    let dir = tempfile::tempdir().unwrap();
    let config = configmap_config(dir.path());
    for (empty, _) in SECRETS {
        let env: Vec<(&str, &str)> = SECRETS
            .iter()
            .map(|(n, v)| (*n, if n == empty { "" } else { *v }))
            .collect();
        let run = run_bin(&["check", "--config", config.to_str().unwrap()], &env);
        assert!(!run.ok, "{empty} left empty was accepted: {}", run.out);
    }
}

/// The validators' venv (tests/deploy/requirements.txt), as CI makes it.
fn deploy_venv() -> Option<PathBuf> {
    std::env::var_os("SWITCHYARD_DEPLOY_VENV").map(PathBuf::from)
}

/// Runs a validator from the repository's root; its whole output when it refuses.
fn passes(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .current_dir(ROOT)
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} refused:\n{said}");
    said
}

#[test]
fn the_deployment_files_pass_their_linters_and_validators() {
    let Some(venv) = deploy_venv() else {
        skipping("SWITCHYARD_DEPLOY_VENV is not set (.ci/run makes it)");
        return;
    };
    let bin = |name: &str| venv.join("bin").join(name);
    let said = passes(
        "hadolint",
        Command::new(bin("hadolint")).arg("deploy/Dockerfile"),
    );
    assert!(said.trim().is_empty(), "hadolint: {said}");

    let manifests = ["configmap", "secret", "deployment", "service", "pdb", "hpa"]
        .map(|m| format!("deploy/kubernetes/{m}.yaml"));
    let said = passes(
        "kubernetes-validate",
        Command::new(bin("kubernetes-validate"))
            .args(["--strict", "--kubernetes-version", "1.37.0"])
            .args(&manifests),
    );
    assert_eq!(
        said.matches(" passed for resource ").count(),
        manifests.len(),
        "{said}"
    );
    assert!(!said.contains("WARN"), "{said}");

    // The Compose file and the ServiceMonitor, against their projects' own schemas.
    let said = passes(
        "tests/deploy/validate.py",
        Command::new(bin("python")).args(["tests/deploy/validate.py", ROOT]),
    );
    assert_eq!(said.matches(": valid").count(), 2, "{said}");

    passes(
        "promtool",
        Command::new("promtool").args(["check", "config", "deploy/compose/prometheus.yml"]),
    );
    systemd_unit_is_verified_and_hardened();
}

/// `systemd-analyze verify` wants the unit's executable to exist: it checks a copy whose
/// `ExecStart` points at the built binary, and rates the copy's exposure.
fn systemd_unit_is_verified_and_hardened() {
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(format!("{ROOT}/deploy/switchyard.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/switchyard serve"),
        "{unit}"
    );
    let copy = dir.path().join("switchyard.service");
    std::fs::write(&copy, unit.replace("/usr/local/bin/switchyard", BIN)).unwrap();
    let said = passes(
        "systemd-analyze verify",
        Command::new("systemd-analyze").arg("verify").arg(&copy),
    );
    assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");
    let said = passes(
        "systemd-analyze security",
        Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
            .arg(&copy),
    );
    assert!(said.contains("Overall exposure level"), "{said}");
}

#[tokio::test]
async fn probe_exits_zero_only_when_the_gateway_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (_p, url) = spawn_demo(dir.path()).await;
    let up = run_bin(&["probe", &format!("{url}/healthz")], &[]);
    assert!(up.ok, "{}{}", up.out, up.err);
    let missing = run_bin(&["probe", &format!("{url}/no-such-page")], &[]);
    assert!(
        !missing.ok && missing.err.contains("404"),
        "{}",
        missing.err
    );
    let closed = free_port_url();
    let down = run_bin(&["probe", &closed], &[]);
    assert!(!down.ok && down.err.contains("error"), "{}", down.err);
}

/// A loopback URL nothing listens on.
fn free_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("http://127.0.0.1:{port}/healthz")
}
