//! The binary as a user runs it: started with arguments and environment, its stderr in a file,
//! the address it listens on read from its stdout; killed when the test ends.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Kills the child when the test ends, however it ends.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `switchyard <args>` and waits for the line that says where it listens.
pub async fn spawn_listening(
    args: &[&str],
    dir: &std::path::Path,
    marker: &'static str,
) -> (Proc, String) {
    spawn_listening_env(args, dir, marker, &[]).await
}

/// `switchyard serve --listen 127.0.0.1:0` (demo mode) in `dir`, and where it listens.
pub async fn spawn_demo(dir: &std::path::Path) -> (Proc, String) {
    let (proc, url, _) = spawn_demo_with(dir, &[]).await;
    (proc, url)
}

/// `switchyard serve --listen 127.0.0.1:0` (the demo) with `extra` arguments in `dir`: where
/// it listens, and the URL its banner gives for the console.
pub async fn spawn_demo_with(dir: &std::path::Path, extra: &[&str]) -> (Proc, String, String) {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (proc, url, before) = spawn_reading(
        std::path::Path::new(BIN),
        &args,
        dir,
        "switchyard listening on ",
        &[],
    )
    .await;
    let console = before
        .iter()
        .find_map(|l| l.strip_prefix("switchyard console: "))
        .and_then(|l| l.split_whitespace().next())
        .expect("the demo's banner gives the console's URL")
        .to_string();
    (proc, url, console)
}

/// `switchyard serve --listen 127.0.0.1:0 --config <config>` in `dir`, and where it listens.
pub async fn spawn_serve(config: &std::path::Path, dir: &std::path::Path) -> (Proc, String) {
    let config = config.to_str().expect("a UTF-8 path");
    let args = ["serve", "--listen", "127.0.0.1:0", "--config", config];
    spawn_listening(&args, dir, "switchyard listening on ").await
}

/// As [`spawn_listening`], with environment variables set (`SWITCHYARD_LOG` among them).
pub async fn spawn_listening_env(
    args: &[&str],
    dir: &std::path::Path,
    marker: &'static str,
    env: &[(&str, &str)],
) -> (Proc, String) {
    spawn_bin_listening(std::path::Path::new(BIN), args, dir, marker, env).await
}

/// As [`spawn_listening_env`], for another build of the binary at `bin` (a previous release).
pub async fn spawn_bin_listening(
    bin: &std::path::Path,
    args: &[&str],
    dir: &std::path::Path,
    marker: &'static str,
    env: &[(&str, &str)],
) -> (Proc, String) {
    let (proc, url, _) = spawn_reading(bin, args, dir, marker, env).await;
    (proc, url)
}

/// As [`spawn_bin_listening`], also returning the lines printed before the marker's.
async fn spawn_reading(
    bin: &std::path::Path,
    args: &[&str],
    dir: &std::path::Path,
    marker: &'static str,
    env: &[(&str, &str)],
) -> (Proc, String, Vec<String>) {
    // stderr goes to dir/stderr.log, for tests that read what the binary logged.
    let stderr = std::fs::File::create(dir.join("stderr.log")).expect("stderr file");
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("SWITCHYARD_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("binary runs");
    let stdout = child.stdout.take().expect("stdout");
    let proc = Proc(child);
    let read = tokio::task::spawn_blocking(move || {
        let mut before = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.ok()?;
            if let Some(rest) = line.split(marker).nth(1) {
                return Some((rest.trim().to_string(), before));
            }
            before.push(line);
        }
        None
    });
    let (url, before) = tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("the binary starts within 30 s")
        .unwrap()
        .expect("the binary prints where it listens");
    (proc, url, before)
}

/// What a run of the binary said: whether it succeeded, its stdout and its stderr.
pub struct Finished {
    pub ok: bool,
    pub out: String,
    pub err: String,
}

/// Runs `switchyard <args>` to the end with `env` set (a command such as `audit verify`).
pub fn run_bin(args: &[&str], env: &[(&str, &str)]) -> Finished {
    let o = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("binary runs");
    Finished {
        ok: o.status.success(),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The Python with Playwright and the OpenAI SDK (`SWITCHYARD_PY`) when it and
/// `/usr/bin/chromium` are here, for the browser tests. Without them: `None`, said on stderr,
/// and a failure under `CI` or `SWITCHYARD_BROWSER_REQUIRED`, where they must be.
pub fn browser_python() -> Option<String> {
    let py = std::env::var("SWITCHYARD_PY").unwrap_or_default();
    let ready = !py.is_empty()
        && std::path::Path::new("/usr/bin/chromium").exists()
        && Command::new(&py)
            .args(["-c", "import playwright, openai"])
            .status()
            .is_ok_and(|s| s.success());
    if !ready {
        skipping("SWITCHYARD_PY with playwright and /usr/bin/chromium are needed");
        return None;
    }
    Some(py)
}

/// A test that cannot run here says why and passes, except where everything it needs must be
/// (under `CI` or `SWITCHYARD_BROWSER_REQUIRED`, which `.ci/run` sets): there it fails.
pub fn skipping(why: &str) {
    assert!(
        std::env::var_os("SWITCHYARD_BROWSER_REQUIRED").is_none()
            && std::env::var_os("CI").is_none(),
        "this test must run here, but: {why}"
    );
    eprintln!("skipped: {why}");
}

/// What a browser test's script (`tests/browser/<script>`) said: whether it passed, its
/// stdout (the last line its JSON summary, by convention), and stdout with stderr for a failure
/// message. Bounded by `timeout` `secs`; the test's own runtime keeps serving meanwhile.
pub async fn run_browser_script(
    py: &str,
    script: &str,
    secs: u32,
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let out = tokio::process::Command::new("timeout")
        .arg(secs.to_string())
        .arg(py)
        .arg(format!(
            "{}/tests/browser/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .envs(env.iter().copied())
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), stdout, all)
}
