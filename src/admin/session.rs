//! The console's sessions: a cookie naming the admin, when the session began and when it was
//! last used, and a random nonce, signed with a key derived from that admin's token. Any
//! replica with the same config checks it without shared state, and changing or removing the
//! token ends every session made with it. A session lasts 12 h at most and 30 min idle (the
//! cookie is re-signed as it is used). Writes need the session's CSRF token as well, in
//! `x-csrf-token`: the cookie alone never authorises one. Signing out is remembered by this
//! replica until the session would have ended anyway.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use axum::http::{HeaderMap, header};
use ring::hmac;

use crate::config::Admin;
use crate::config::Snapshot;

pub const COOKIE: &str = "sy_session";
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A session ends this long after its last use...
pub const IDLE_S: u64 = 30 * 60;
/// ...and this long after it began, whatever its use.
pub const LIFETIME_S: u64 = 12 * 3600;
/// A session used this long after its cookie was signed gets a fresh cookie.
const RESIGN_S: u64 = 60;

/// A signed-in console session, as its cookie said.
#[derive(Clone)]
pub struct Session {
    /// The admin's index in `server.admins`.
    pub admin: usize,
    /// Who signed in through SSO (the admin is then the mapping's), as the provider named them.
    pub person: Option<String>,
    pub nonce: String,
    pub issued: u64,
    seen: u64,
    /// The admin's name as the cookie carries it (hex; with SSO, `-` and the person's, hex).
    name: String,
    /// The key its cookie and CSRF token are signed with (from the admin's token).
    key: hmac::Key,
}

impl Session {
    /// The session's CSRF token: what a write must carry in `x-csrf-token`.
    pub fn csrf(&self) -> String {
        let mac = hmac::sign(&self.key, format!("csrf.{}", self.nonce).as_bytes());
        crate::secret::hex(mac.as_ref())
    }

    /// Whether `presented` is the session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        crate::secret::same(self.csrf().as_bytes(), presented.as_bytes())
    }

    /// A re-signed cookie value, when the one presented was signed [`RESIGN_S`] or more
    /// before `now`: using the console restarts the idle clock.
    pub fn resigned(&self, now: u64) -> Option<String> {
        (now >= self.seen.saturating_add(RESIGN_S))
            .then(|| value(&self.key, &self.name, self.issued, now, &self.nonce))
    }
}

/// The key an admin's sessions are signed with, derived from its token.
fn key(admin: &Admin) -> hmac::Key {
    let root = hmac::Key::new(hmac::HMAC_SHA256, admin.token.expose().as_bytes());
    let derived = hmac::sign(&root, b"switchyard console session v1");
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

/// The cookie value: `name.issued.seen.nonce.signature`.
fn value(key: &hmac::Key, name: &str, issued: u64, seen: u64, nonce: &str) -> String {
    let body = format!("{name}.{issued}.{seen}.{nonce}");
    let mac = hmac::sign(key, body.as_bytes());
    format!("{body}.{}", crate::secret::hex(mac.as_ref()))
}

/// A new session's cookie value for `admin` (for `person`, signed in through SSO), begun at
/// `now` (seconds since the epoch).
pub fn issue(admin: &Admin, person: Option<&str>, now: u64) -> Option<String> {
    let mut nonce = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce).ok()?;
    let mut name = crate::secret::hex(admin.name.as_bytes());
    if let Some(p) = person {
        name = format!("{name}-{}", crate::secret::hex(p.as_bytes()));
    }
    Some(value(
        &key(admin),
        &name,
        now,
        now,
        &crate::secret::hex(&nonce),
    ))
}

/// The session a cookie value carries, if its signature holds under a current admin's token,
/// it has not ended, and it was not signed out.
pub fn open(snap: &Snapshot, cookie: &str, now: u64, out: &SignedOut) -> Option<Session> {
    let mut parts = cookie.split('.');
    let (name, issued, seen, nonce) = (
        parts.next()?,
        parts.next()?.parse::<u64>().ok()?,
        parts.next()?.parse::<u64>().ok()?,
        parts.next()?,
    );
    // The signature is the fifth part: checked below, with the whole value.
    if parts.next().is_none() || parts.next().is_some() || nonce.len() != 32 {
        return None;
    }
    let (admin_hex, person) = match name.split_once('-') {
        Some((a, p)) => (a, Some(unhex(p)?)),
        None => (name, None),
    };
    let (admin, a) = snap
        .server
        .admins
        .iter()
        .enumerate()
        .find(|(_, a)| crate::secret::hex(a.name.as_bytes()) == admin_hex)?;
    // An SSO mapping's admin is only ever a signed-in person.
    if a.session_only != person.is_some() {
        return None;
    }
    let key = key(a);
    let expected = value(&key, name, issued, seen, nonce);
    if !crate::secret::same(expected.as_bytes(), cookie.as_bytes())
        || seen < issued
        || now >= issued.saturating_add(LIFETIME_S)
        || now >= seen.saturating_add(IDLE_S)
        || out.has(nonce, now)
    {
        return None;
    }
    Some(Session {
        admin,
        person,
        nonce: nonce.to_string(),
        issued,
        seen,
        name: name.to_string(),
        key,
    })
}

/// Lower-case hex back to text (`None`: not hex of UTF-8).
fn unhex(h: &str) -> Option<String> {
    String::from_utf8(crate::secret::unhex(h)?).ok()
}

/// The session cookie's value among the request's cookies.
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Whether the client reached us over https: `X-Forwarded-Proto` from a trusted proxy says so;
/// nothing else can (the gateway itself speaks plain HTTP).
pub fn https(snap: &Snapshot, headers: &HeaderMap, peer: IpAddr) -> bool {
    snap.server
        .trusted_proxies
        .iter()
        .any(|n| n.contains(&peer))
        && headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` for a session value (empty with `max_age` 0: the cookie removed).
/// `Secure` unless the browser is on this machine talking plain HTTP (a browser keeps a
/// `Secure` cookie over https only, and over http only for localhost).
pub fn set_cookie(value: &str, max_age: u64, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Whether the cookie must be `Secure`: always, except plain HTTP from this machine.
pub fn secure(snap: &Snapshot, headers: &HeaderMap, peer: IpAddr) -> bool {
    https(snap, headers, peer) || !peer.is_loopback()
}

/// A session signed out: remembered here, and, when `[state]` has Redis, where every replica
/// looks, until the session would have ended anyway.
pub async fn revoke(shared: &crate::state::State, out: &SignedOut, s: &Session) {
    out.add(s);
    if let crate::state::State::Redis(r) = shared {
        let now = crate::clock::unix_ms().max(0) as u64 / 1000;
        let left_ms = s
            .issued
            .saturating_add(LIFETIME_S)
            .saturating_sub(now)
            .max(1)
            * 1000;
        let key = r.prefixed(&format!("console:signed-out:{}", s.nonce));
        let set: Option<String> = r.script(&REVOKE, &[key], &[left_ms.to_string()]).await;
        if set.is_none() {
            tracing::warn!(
                "console: a sign-out could not be shared through Redis; other replicas keep the session until it ends"
            );
        }
    }
}

/// Whether a session was signed out on another replica (Redis, when `[state]` has it).
pub async fn revoked_elsewhere(shared: &crate::state::State, nonce: &str) -> bool {
    let crate::state::State::Redis(r) = shared else {
        return false;
    };
    let key = r.prefixed(&format!("console:signed-out:{nonce}"));
    let n: Option<i64> = r.script(&REVOKED, &[key], &[]).await;
    n.unwrap_or(0) > 0
}

static REVOKE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new("return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])")
});
static REVOKED: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new("return redis.call('EXISTS', KEYS[1])"));

/// Sessions signed out on this replica, by nonce, until they would have ended anyway.
#[derive(Default)]
pub struct SignedOut(Mutex<HashMap<String, u64>>);

/// Sessions remembered before the ended ones are swept.
const REMEMBERED: usize = 4096;

impl SignedOut {
    pub fn add(&self, s: &Session) {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = crate::clock::unix_ms() as u64 / 1000;
        if m.len() >= REMEMBERED {
            m.retain(|_, until| *until > now);
        }
        m.insert(s.nonce.clone(), s.issued.saturating_add(LIFETIME_S));
    }

    fn has(&self, nonce: &str, now: u64) -> bool {
        let m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(nonce).is_some_and(|until| *until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;

    fn snap(token: &str) -> Snapshot {
        let toml = format!(
            "[[admins]]\nname = \"ops\"\ntoken = \"{token}\"\nrole = \"admin\"\n[[channels]]\nname = \"c\"\nprovider = \"mock\"\nmodels = [\"m\"]\n"
        );
        let clients = crate::provider::HttpClients::default();
        crate::config::load_str(&toml, "t.toml", &|_| None, &clients).unwrap()
    }

    #[test]
    fn a_session_holds_until_idle_lifetime_sign_out_or_a_new_token() {
        let s = snap("a-token-of-16-chars-or-more");
        let admin = &s.server.admins[0];
        assert_eq!(admin.role, Role::Admin);
        let out = SignedOut::default();
        let v = issue(admin, None, 1000).unwrap();
        let open_at = |snap: &Snapshot, v: &str, t| open(snap, v, t, &out);
        let got = open_at(&s, &v, 1010).unwrap();
        assert!(got.resigned(1010).is_none());
        assert_eq!(got.csrf().len(), 64);
        assert!(got.csrf_matches(&got.csrf()) && !got.csrf_matches(&"0".repeat(64)));
        // Idle: refused after 30 min unused; a re-signed cookie moves the idle clock.
        assert!(open_at(&s, &v, 1000 + IDLE_S).is_none());
        let at = 1000 + RESIGN_S;
        let later = open_at(&s, &v, at).unwrap().resigned(at).unwrap();
        assert!(open_at(&s, &later, 1000 + IDLE_S).is_some());
        assert!(
            open_at(&s, &later, 1000 + LIFETIME_S).is_none(),
            "12 h at most"
        );
        // A changed byte, a changed token: refused.
        let mut forged = v.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
        assert!(open_at(&s, std::str::from_utf8(&forged).unwrap(), 1010).is_none());
        assert!(open_at(&snap("another-token-of-16-chars"), &v, 1010).is_none());
        // Signed out: refused here.
        out.add(&got);
        assert!(open_at(&s, &v, 1010).is_none());
    }

    #[test]
    fn the_cookie_is_found_among_others_and_secure_off_loopback_only() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; sy_session=abc.1; b=2".parse().unwrap(),
        );
        assert_eq!(cookie(&h), Some("abc.1"));
        let s = snap("a-token-of-16-chars-or-more");
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let far: IpAddr = "203.0.113.7".parse().unwrap();
        assert!(!secure(&s, &h, lo) && secure(&s, &h, far));
        let c = set_cookie("v", 60, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("Secure"));
    }
}
