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
        self.0.as_bytes().ct_eq(presented).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}
