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
    let args = ["serve", "--listen", "127.0.0.1:0"];
    spawn_listening(&args, dir, "switchyard listening on ").await
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
        for line in BufReader::new(stdout).lines() {
            let line = line.ok()?;
            if let Some(rest) = line.split(marker).nth(1) {
                return Some(rest.trim().to_string());
            }
        }
        None
    });
    let url = tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("the binary starts within 30 s")
        .unwrap()
        .expect("the binary prints where it listens");
    (proc, url)
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
