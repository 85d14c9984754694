//! A secret string (a key, a token, a URL with a password): compared in constant time, never
//! printed.

use std::fmt;
use std::sync::Arc;

use subtle::ConstantTimeEq;

#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(s: impl Into<Arc<str>>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// Constant-time equality (the length may leak; the content does not).
    pub fn matches(&self, presented: &[u8]) -> bool {
        same(self.0.as_bytes(), presented)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Whether two byte strings are equal, in time that says nothing of where they differ (the
/// length may leak).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// The keyed hash gateway keys are kept as: the same key always hashes the same under one
/// pepper, and without the pepper a hash says nothing about the key.
#[derive(Clone)]
pub struct Pepper(ring::hmac::Key);

impl Pepper {
    pub fn from_bytes(bytes: &[u8; 32]) -> Pepper {
        Pepper(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes))
    }

    /// The hex HMAC-SHA-256 of a gateway key.
    pub fn hash(&self, key: &str) -> String {
        hex(ring::hmac::sign(&self.0, key.as_bytes()).as_ref())
    }

    /// Whether `presented` is the key behind `hash` (constant time).
    pub fn matches(&self, presented: &str, hash: &str) -> bool {
        Secret::new(self.hash(presented)).matches(hash.as_bytes())
    }
}

impl fmt::Debug for Pepper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pepper(***)")
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// The 32 bytes a master key's base64 text holds (surrounding blanks ignored), or what it is
/// instead. The store opens its key with this, and `check` refuses the config by it.
pub fn key_bytes(text: &str) -> Result<[u8; 32], &'static str> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| "text that is not base64")?
        .try_into()
        .map_err(|_| "another length")
}

/// The bytes lowercase or uppercase hex text spells; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A secret for one purpose derived from another (HMAC-SHA-256 of `purpose`, hex): what signs
/// one thing says nothing of what signs another.
pub fn derive(root: &Secret, purpose: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, root.expose().as_bytes());
    hex(ring::hmac::sign(&key, purpose.as_bytes()).as_ref())
}
