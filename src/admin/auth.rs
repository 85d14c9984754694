//! Who is calling the admin API: a bearer token from `[[admins]]` (or `server.admin_token`),
//! compared in constant time against every token; a viewer may only read; too many failures
//! from one address in a minute are refused before any token is compared.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Method};

use super::ControlError;
use crate::config::{Role, Snapshot};
use crate::server::ApiError;
use crate::server::ctx::bearer;

const WINDOW: Duration = Duration::from_secs(60);

/// The admin a request is made by.
#[derive(Debug, Clone)]
pub struct Caller {
    pub name: Arc<str>,
    /// Empty: every group.
    pub groups: Vec<Arc<str>>,
    /// Empty: every team; else only these teams (and their sub-teams), their keys and spend.
    pub teams: Vec<Arc<str>>,
    pub role: Role,
}

impl Caller {
    /// Whether an object of `groups` (none = the default group) is this admin's to see.
    pub fn sees(&self, groups: &[&str]) -> bool {
        if self.groups.is_empty() {
            return true;
        }
        let default = [crate::config::DEFAULT_GROUP];
        let groups = if groups.is_empty() {
            &default[..]
        } else {
            groups
        };
        groups
            .iter()
            .all(|g| self.groups.iter().any(|m| &**m == *g))
    }
}

impl Caller {
    /// Whether a key of `groups` is this admin's. A key with no groups may use every channel,
    /// so it is no group's: only an admin of every group sees it.
    pub fn sees_key(&self, groups: &[&str]) -> bool {
        if groups.is_empty() {
            self.groups.is_empty()
        } else {
            self.sees(groups)
        }
    }
}

/// Failed attempts by address (an IPv6 address by its /64, what one host is given), in
/// fixed one-minute windows.
#[derive(Default)]
pub struct Failures(Mutex<HashMap<IpAddr, (Instant, u32)>>);

/// Addresses tracked at once before windows that ended are swept.
const TRACKED: usize = 4096;

fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Failures {
    /// Seconds until `ip` may try again, when it is over the limit.
    fn blocked(&self, ip: IpAddr, now: Instant, max: u32) -> Option<u64> {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (start, n) = map.get(&bucket(ip))?;
        let left = WINDOW.checked_sub(now.duration_since(*start))?;
        (*n >= max).then(|| left.as_secs().max(1))
    }

    fn failed(&self, ip: IpAddr, now: Instant) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= TRACKED {
            // Old windows go, so the map stays near the addresses failing this minute.
            map.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
        }
        let e = map.entry(bucket(ip)).or_insert((now, 0));
        if now.duration_since(e.0) >= WINDOW {
            *e = (now, 0);
        }
        e.1 += 1;
    }
}

/// The address's network, not the address: `203.0.113.0/24`, `2001:db8:1::/48` (no full
/// client address is written to a log).
fn network(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2])
        }
    }
}

/// Whether a request only reads: GET and HEAD, and the route preview (a POST that changes
/// nothing), which a viewer may make.
fn reads(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        || (*method == Method::POST && path == "/admin/route/explain")
}

/// Why a token was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The address failed too often this minute: seconds until it may try again.
    Blocked(u64),
    Wrong,
}

/// The index in `server.admins` of the admin whose token `presented` is: every token compared
/// in constant time (no early exit: the time says nothing about which one is close), after the
/// address's failed-attempt limit; a failure counts against the address. The admin API and the
/// console's sign-in share it.
pub fn sign_in(
    snap: &Snapshot,
    failures: &Failures,
    presented: &str,
    peer: IpAddr,
) -> Result<usize, Refused> {
    let now = Instant::now();
    if let Some(secs) = failures.blocked(peer, now, snap.server.admin_max_failures) {
        return Err(Refused::Blocked(secs));
    }
    let mut found = None;
    for (i, a) in snap.server.admins.iter().enumerate() {
        // Every token is compared (constant time over the list); SSO's never sign in.
        if a.token.matches(presented.as_bytes()) && !a.session_only {
            found = Some(i);
        }
    }
    match found {
        Some(i) if !presented.is_empty() => Ok(i),
        _ => {
            failures.failed(peer, now);
            Err(Refused::Wrong)
        }
    }
}

/// The caller a console session names, for an admin API request that carries the session
/// instead of a token: a write needs the session's CSRF token in `x-csrf-token` too (403
/// `csrf_failed` without it), and a viewer still only reads.
pub fn session_caller(
    snap: &Snapshot,
    s: &super::session::Session,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
) -> Result<Caller, ApiError> {
    let admin = snap
        .server
        .admins
        .get(s.admin)
        .ok_or(ApiError::Unauthorized)?;
    if !matches!(*method, Method::GET | Method::HEAD) {
        let presented = headers
            .get(super::session::CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !s.csrf_matches(presented) {
            return Err(ControlError::Csrf.into());
        }
        if admin.role == Role::Viewer && !reads(method, path) {
            return Err(ControlError::Forbidden.into());
        }
    }
    // Signed in through SSO: the audit names the person, and the mapping they came by.
    let name = match &s.person {
        Some(p) => format!("{p} ({})", admin.name).into(),
        None => admin.name.clone(),
    };
    Ok(Caller {
        name,
        groups: admin.groups.clone(),
        teams: admin.teams.clone(),
        role: admin.role,
    })
}

/// A viewer may only read.
pub fn permitted(role: Role, method: &Method, path: &str) -> Result<(), ApiError> {
    if role == Role::Viewer && !reads(method, path) {
        return Err(ControlError::Forbidden.into());
    }
    Ok(())
}

/// The caller, or why not: 404 when no admin is configured (the admin API does not exist),
/// 429 for an address over its failures, 401 for a wrong token, 403 for a viewer writing.
pub fn guard(
    snap: &Snapshot,
    failures: &Failures,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
    peer: IpAddr,
) -> Result<Caller, ApiError> {
    if snap.server.admins.is_empty() {
        return Err(ApiError::NotFound(path.to_string()));
    }
    let presented = bearer(headers).unwrap_or("");
    let admin = match sign_in(snap, failures, presented, peer) {
        Ok(i) => &snap.server.admins[i],
        Err(Refused::Blocked(secs)) => return Err(ControlError::RateLimited(secs).into()),
        Err(Refused::Wrong) => {
            tracing::warn!(network = %network(peer), path, "admin API: a wrong or missing token");
            return Err(ApiError::Unauthorized);
        }
    };
    if admin.role == Role::Viewer && !reads(method, path) {
        return Err(ControlError::Forbidden.into());
    }
    Ok(Caller {
        name: admin.name.clone(),
        groups: admin.groups.clone(),
        teams: admin.teams.clone(),
        role: admin.role,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_with_no_groups_is_only_an_unscoped_admins() {
        let scoped = Caller {
            name: "d".into(),
            groups: vec!["default".into(), "b".into()],
            teams: Vec::new(),
            role: Role::Admin,
        };
        let all = Caller {
            name: "a".into(),
            groups: Vec::new(),
            teams: Vec::new(),
            role: Role::Admin,
        };
        // A channel with no groups is in `default`; a key with none reaches every channel.
        assert!(scoped.sees(&[]));
        assert!(!scoped.sees_key(&[]));
        assert!(scoped.sees_key(&["b"]) && !scoped.sees_key(&["b", "c"]));
        assert!(all.sees_key(&[]) && all.sees(&["c"]));
        assert_eq!(
            bucket("2001:db8:1:2:3:4:5:6".parse().unwrap()),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(network("203.0.113.9".parse().unwrap()), "203.0.113.0/24");
    }
}
