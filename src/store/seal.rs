//! Secrets at rest. Upstream keys are sealed with AES-256-GCM under the master key, a fresh
//! random nonce per value and the row's identity as associated data (a sealed value copied to
//! another row does not open there); each sealed value names the master key that sealed it, so
//! a rotation can run while replicas serve. Gateway keys are never kept: only a keyed hash
//! (HMAC-SHA-256 under a random pepper, itself sealed), so a stolen database reveals neither.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::digest;
use ring::rand::{SecureRandom, SystemRandom};

use crate::secret::Secret;
pub use crate::secret::{Pepper, hex};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("the master key must be 32 bytes, base64-encoded (got {0})")]
    BadMasterKey(&'static str),
    #[error("a sealed value is malformed")]
    Malformed,
    #[error("a value sealed under master key {0} cannot be opened: that key is not configured")]
    UnknownKey(String),
    #[error("a sealed value does not open: wrong key, wrong row, or tampered with")]
    Open,
    #[error("the system's random source failed")]
    Random,
}

/// The master key: what every sealed value depends on (lose it, lose them).
pub struct MasterKey {
    /// A short, public fingerprint naming the key in each sealed value.
    id: String,
    key: LessSafeKey,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey").field("id", &self.id).finish()
    }
}

impl MasterKey {
    /// From `SWITCHYARD_MASTER_KEY` (or `[store] master_key`): 32 bytes, base64.
    pub fn from_base64(text: &str) -> Result<MasterKey, SealError> {
        let bytes = crate::secret::key_bytes(text).map_err(SealError::BadMasterKey)?;
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
            .map_err(|_| SealError::BadMasterKey("a bad key"))?;
        let fingerprint = digest::digest(&digest::SHA256, &bytes);
        Ok(MasterKey {
            id: hex(&fingerprint.as_ref()[..4]),
            key: LessSafeKey::new(unbound),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// `plaintext` sealed for the row `aad` names: `v1:<key id>:<nonce>:<ciphertext and tag>`.
    pub fn seal(&self, plaintext: &[u8], aad: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut buf = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut buf,
            )
            .map_err(|_| SealError::Random)?;
        Ok(format!(
            "v1:{}:{}:{}",
            self.id,
            B64.encode(nonce),
            B64.encode(buf)
        ))
    }

    /// Opens a value this key sealed for the row `aad` names.
    pub fn open(&self, sealed: &str, aad: &str) -> Result<Secret, SealError> {
        let (id, nonce, mut buf) = parse(sealed)?;
        if id != self.id {
            return Err(SealError::UnknownKey(id.to_string()));
        }
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad.as_bytes()),
                &mut buf,
            )
            .map_err(|_| SealError::Open)?;
        let text = std::str::from_utf8(plain).map_err(|_| SealError::Open)?;
        Ok(Secret::new(text))
    }
}

/// The master keys a store opens with: the first seals; any opens what it sealed. Two only
/// while a rotation runs (the new key first).
pub struct Keyring(Vec<MasterKey>);

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(MasterKey::id))
            .finish()
    }
}

impl Keyring {
    pub fn new(sealing: MasterKey, also: Option<MasterKey>) -> Keyring {
        Keyring(std::iter::once(sealing).chain(also).collect())
    }

    /// The key new values are sealed under.
    pub fn sealing(&self) -> &MasterKey {
        &self.0[0]
    }

    pub fn seal(&self, plaintext: &[u8], aad: &str) -> Result<String, SealError> {
        self.sealing().seal(plaintext, aad)
    }

    /// Opens with whichever key sealed the value.
    pub fn open(&self, sealed: &str, aad: &str) -> Result<Secret, SealError> {
        let id = sealed_with(sealed)?;
        match self.0.iter().find(|k| k.id == id) {
            Some(k) => k.open(sealed, aad),
            None => Err(SealError::UnknownKey(id.to_string())),
        }
    }
}

/// The master key id a sealed value names (a rotation re-seals those under the old one).
pub fn sealed_with(sealed: &str) -> Result<&str, SealError> {
    parse(sealed).map(|(id, _, _)| id)
}

fn parse(sealed: &str) -> Result<(&str, [u8; NONCE_LEN], Vec<u8>), SealError> {
    let mut parts = sealed.split(':');
    let (Some("v1"), Some(id), Some(nonce), Some(body), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(SealError::Malformed);
    };
    let nonce: [u8; NONCE_LEN] = B64
        .decode(nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or(SealError::Malformed)?;
    let body = B64.decode(body).map_err(|_| SealError::Malformed)?;
    Ok((id, nonce, body))
}

impl Pepper {
    /// A fresh random pepper and its bytes (to be sealed and stored once, at the first start).
    pub fn generate() -> Result<(Pepper, [u8; 32]), SealError> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| SealError::Random)?;
        Ok((Pepper::from_bytes(&bytes), bytes))
    }
}

/// A new master key: 32 random bytes, base64 (what `[store] master_key` takes).
pub fn generate_master_key() -> Result<String, SealError> {
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| SealError::Random)?;
    Ok(B64.encode(bytes))
}

/// A new gateway key: `sk-sy-` and 32 random base62 characters (about 190 bits).
pub fn generate_key() -> Result<String, SealError> {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let rng = SystemRandom::new();
    let mut out = String::from("sk-sy-");
    while out.len() < 6 + 32 {
        let mut b = [0u8; 32];
        rng.fill(&mut b).map_err(|_| SealError::Random)?;
        // 248 = 4 × 62: bytes above it are dropped, so every character is equally likely.
        for x in b.iter().filter(|x| **x < 248) {
            if out.len() == 6 + 32 {
                break;
            }
            out.push(char::from(ALPHABET[usize::from(x % 62)]));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> MasterKey {
        MasterKey::from_base64(&B64.encode([byte; 32])).unwrap()
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_for_its_row() {
        let k = key(7);
        let sealed = k
            .seal(b"sk-upstream-secret", "channel:openai/credential:0")
            .unwrap();
        assert!(!sealed.contains("sk-upstream-secret"));
        assert_eq!(
            k.open(&sealed, "channel:openai/credential:0")
                .unwrap()
                .expose(),
            "sk-upstream-secret"
        );
        // Every seal has its own nonce: the same value twice is two different texts.
        assert_ne!(
            sealed,
            k.seal(b"sk-upstream-secret", "channel:openai/credential:0")
                .unwrap()
        );
        // Another row, another key, a flipped byte: none opens.
        assert_eq!(
            k.open(&sealed, "channel:other/credential:0").unwrap_err(),
            SealError::Open
        );
        let other = key(8);
        assert!(
            matches!(other.open(&sealed, "channel:openai/credential:0"), Err(SealError::UnknownKey(id)) if id == k.id())
        );
        let mut parts: Vec<String> = sealed.split(':').map(str::to_string).collect();
        let mut body = B64.decode(&parts[3]).unwrap();
        body[0] ^= 1;
        parts[3] = B64.encode(body);
        assert_eq!(
            k.open(&parts.join(":"), "channel:openai/credential:0")
                .unwrap_err(),
            SealError::Open
        );
        assert_eq!(sealed_with(&sealed).unwrap(), k.id());
        assert_eq!(k.open("v1:x", "a").unwrap_err(), SealError::Malformed);
    }

    #[test]
    fn master_keys_must_be_32_bytes_of_base64() {
        assert!(MasterKey::from_base64("not base64!").is_err());
        assert!(MasterKey::from_base64(&B64.encode([1u8; 16])).is_err());
        assert_eq!(key(1).id().len(), 8);
        assert_ne!(key(1).id(), key(2).id());
        // The Debug form shows the id, never the key.
        assert!(!format!("{:?}", key(1)).contains("AQEB"));
    }

    #[test]
    fn gateway_keys_are_kept_as_keyed_hashes() {
        let (pepper, bytes) = Pepper::generate().unwrap();
        let h = pepper.hash("sk-sy-abc");
        assert_eq!(h.len(), 64);
        assert!(pepper.matches("sk-sy-abc", &h));
        assert!(!pepper.matches("sk-sy-abd", &h));
        // The same pepper again (read back from the store) hashes the same; another does not.
        assert_eq!(Pepper::from_bytes(&bytes).hash("sk-sy-abc"), h);
        assert_ne!(Pepper::generate().unwrap().0.hash("sk-sy-abc"), h);
    }

    #[test]
    fn generated_keys_are_sk_sy_and_32_base62_characters() {
        let a = generate_key().unwrap();
        assert!(a.starts_with("sk-sy-"), "{a}");
        assert_eq!(a.len(), 38);
        assert!(a[6..].chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, generate_key().unwrap());
    }
}
