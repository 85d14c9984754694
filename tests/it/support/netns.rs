//! A host of its own for an upstream: a network namespace joined to this one by a veth pair
//! (made by the test, removed when it ends), with the mock binary listening inside it. A
//! partition takes the namespace's end of the link down: packets to it vanish, no RST, as when
//! a network path dies.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use super::binary::{BIN, Proc};

/// A namespace, its link, and the upstream inside it.
pub struct Netns {
    name: String,
    inner_if: String,
    host_if: String,
    /// The upstream's base URL (`http://10.213.N.2:PORT/v1`).
    pub base_url: String,
    _mock: Option<Proc>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this machine lets the test make namespaces (root, iproute2, a kernel with netns and
/// veth); under `CI` it must.
pub fn netns_available() -> bool {
    let name = format!("sy-probe-{}", std::process::id());
    let ok = ip(&["netns", "add", &name]).is_ok();
    let _ = ip(&["netns", "del", &name]);
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "CI must be able to make network namespaces (root and iproute2)"
        );
        eprintln!("SKIPPED: cannot make network namespaces (needs root and iproute2)");
    }
    ok
}

/// Whether the kernel has `sch_netem` (latency, loss, reordering); without it those cases
/// are skipped, the partitions still run.
pub fn netem_available() -> bool {
    let Ok(ns) = Netns::bare() else {
        return false;
    };
    let ok = ip(&["link", "show", &ns.host_if]).is_ok()
        && Command::new("tc")
            .args([
                "qdisc",
                "add",
                "dev",
                &ns.host_if,
                "root",
                "netem",
                "delay",
                "1ms",
            ])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIPPED: this kernel has no sch_netem (tc netem): the latency, jitter and loss case"
        );
    }
    ok
}

/// Whether nftables works in a namespace: random loss without netem. Without `nft` the loss
/// case is skipped with a message.
pub fn nft_available() -> bool {
    let ok = Netns::bare().is_ok_and(|ns| ns.nft(&["add", "table", "inet", "probe"]).is_ok());
    if !ok {
        eprintln!("SKIPPED: no working nft (nftables) in a namespace: the random loss case");
    }
    ok
}

static NEXT: AtomicU32 = AtomicU32::new(1);

impl Netns {
    /// The namespace and its link, with nothing listening yet.
    fn bare() -> Result<Netns, String> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A /24 per namespace from the pid and a counter: parallel tests and runs never share.
        let net = format!("10.{}.{}", 100 + (pid % 100), n % 250);
        let name = format!("sy{pid}n{n}");
        let (host_if, inner_if) = (format!("sh{pid}n{n}"), format!("si{pid}n{n}"));
        ip(&["netns", "add", &name])?;
        let ns = Netns {
            name: name.clone(),
            inner_if: inner_if.clone(),
            host_if: host_if.clone(),
            base_url: String::new(),
            _mock: None,
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &inner_if,
        ])?;
        ip(&["link", "set", &inner_if, "netns", &name])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{net}.2/24"), "dev", &inner_if])?;
        inside(&["link", "set", &inner_if, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A namespace with `switchyard mock <args>` listening inside it.
    pub async fn with_mock(args: &[&str]) -> Netns {
        let mut ns = Netns::bare().expect("a network namespace");
        let host = ns.inner_addr();
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns", "exec", &ns.name, BIN, "mock", "--host", &host, "--port", "0",
        ])
        .args(args)
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("the mock runs in the namespace");
        let stdout = child.stdout.take().expect("stdout");
        ns._mock = Some(Proc(child));
        let url = tokio::task::spawn_blocking(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find_map(|l| l.split("listening on ").nth(1).map(str::to_string))
        });
        let url = tokio::time::timeout(std::time::Duration::from_secs(10), url)
            .await
            .expect("the mock says where it listens within 10 s")
            .expect("join")
            .expect("a listening line");
        ns.base_url = url.trim().to_string();
        ns
    }

    /// TCP connections established from this side to the mock inside (`ss`): a request on
    /// its way there holds one.
    pub fn connections(&self) -> usize {
        let host = self
            .base_url
            .split("://")
            .nth(1)
            .and_then(|r| r.split([':', '/']).next())
            .unwrap_or_default()
            .to_string();
        let out = Command::new("ss")
            .args(["-Htn", "state", "established", "dst", &host])
            .output()
            .expect("ss runs");
        String::from_utf8_lossy(&out.stdout).lines().count()
    }

    fn inner_addr(&self) -> String {
        let out = Command::new("ip")
            .args(["-4", "-o", "addr", "show", "dev", &self.host_if])
            .output()
            .expect("ip addr");
        let text = String::from_utf8_lossy(&out.stdout);
        let host = text
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .expect("the host end's address")
            .to_string();
        format!("{}.2", host.rsplit_once('.').map_or("", |(net, _)| net))
    }

    /// `tc qdisc … netem <args>` on the host's end of the link (what leaves towards the upstream).
    pub fn netem(&self, args: &[&str]) {
        let ok = Command::new("tc")
            .args(["qdisc", "replace", "dev", &self.host_if, "root", "netem"])
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tc netem {args:?}");
    }

    fn nft(&self, args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft"])
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    /// `percent` % of the packets into and out of the namespace dropped at random (nftables in
    /// the namespace: loss both ways, as on a lossy path).
    pub fn lose(&self, percent: u32) {
        let rule = format!("numgen random mod 100 < {percent} counter drop");
        for (chain, hook) in [("in", "input"), ("out", "output")] {
            let spec = format!("{{ type filter hook {hook} priority 0; }}");
            let made = self
                .nft(&["add", "table", "inet", "chaos"])
                .and_then(|_| self.nft(&["add", "chain", "inet", "chaos", chain, &spec]))
                .and_then(|_| self.nft(&["add", "rule", "inet", "chaos", chain, &rule]));
            assert!(made.is_ok(), "nft loss rules: {made:?}");
        }
    }

    /// Packets the [`lose`](Self::lose) rules dropped so far.
    pub fn lost(&self) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &self.name, "nft", "list", "table", "inet", "chaos",
            ])
            .output()
            .expect("nft list");
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        words
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse::<u64>().ok())
            .sum()
    }

    /// Packets to the upstream vanish from now on (no RST, no ICMP).
    pub fn partition(&self) {
        ip(&[
            "netns",
            "exec",
            &self.name,
            "ip",
            "link",
            "set",
            &self.inner_if,
            "down",
        ])
        .expect("partition");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self._mock.take();
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
