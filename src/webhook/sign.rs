//! Standard Webhooks signatures: `v1,` and the base64 of HMAC-SHA256 over
//! `"{webhook-id}.{webhook-timestamp}.{body}"`, keyed by the bytes a `whsec_` secret holds;
//! one signature per key, space-separated, while a secret rotates.

use base64::Engine;
use ring::hmac;

/// The `webhook-signature` header's value for a message, under each of `secrets` (`whsec_…`).
/// A secret that does not decode is skipped (the config refuses those at load).
pub fn signature(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut out = Vec::with_capacity(secrets.len());
    for s in secrets {
        let Ok(key) = crate::config::webhooks::signing_key(s) else {
            continue;
        };
        let key = hmac::Key::new(hmac::HMAC_SHA256, &key);
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        let tag = ctx.sign();
        out.push(format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
        ));
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        // The example in the Standard Webhooks specification and its reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let sig = signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let both = signature(
            &[secret, secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            body,
        );
        assert_eq!(both, format!("{sig} {sig}"));
    }
}
