//! SigV4 for Bedrock requests, by AWS's own signer (`aws-sigv4`): the host, the content type
//! and the date are signed, with the body's hash; a session token goes in
//! `x-amz-security-token`. Nothing else of the request is signed (the hop count and the trace
//! headers may differ between attempts without a new signature).

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http_body_util::Full;

use crate::provider::auth::aws::AwsCredentials;

/// The service name Bedrock's runtime signs under.
const SERVICE: &str = "bedrock";

/// Signs `req` (whose body is `body`) for `region` at `now`.
pub fn sign_request(
    req: &mut ::http::Request<Full<Bytes>>,
    body: &[u8],
    creds: &AwsCredentials,
    region: &str,
    now: SystemTime,
) -> Result<(), String> {
    let identity: Identity = Credentials::new(
        creds.access_key_id.clone(),
        creds.secret_access_key.expose().to_string(),
        creds.session_token.as_ref().map(|t| t.expose().to_string()),
        creds.expires,
        "switchyard",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("signing parameters: {e}"))?
        .into();
    let uri = req.uri().to_string();
    let signed_headers = req
        .headers()
        .iter()
        .filter(|(n, _)| *n == ::http::header::CONTENT_TYPE)
        .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)));
    let signable = SignableRequest::new(
        req.method().as_str(),
        &uri,
        signed_headers,
        SignableBody::Bytes(body),
    )
    .map_err(|e| format!("the request cannot be signed: {e}"))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| format!("signing failed: {e}"))?
        .into_parts();
    instructions.apply_to_request_http1x(req);
    // The credentials' headers are secrets: never printed by the HTTP stack.
    for name in ["authorization", "x-amz-security-token"] {
        if let Some(v) = req.headers_mut().get_mut(name) {
            v.set_sensitive(true);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    #[test]
    fn the_signature_covers_host_content_type_and_date_and_the_token_is_sent() {
        let mut req = ::http::Request::post(
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude%3A0/converse",
        )
        .header("content-type", "application/json")
        .header("x-switchyard-hops", "1")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
        let creds = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: Some(Secret::new("session")),
            expires: None,
        };
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        sign_request(&mut req, b"{}", &creds, "us-east-1", at).unwrap();
        let h = req.headers();
        let auth = h["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20270115/us-east-1/bedrock/aws4_request"
            ),
            "{auth}"
        );
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date"),
            "{auth}"
        );
        assert_eq!(h["x-amz-date"], "20270115T080000Z");
        assert_eq!(h["x-amz-security-token"], "session");
        assert!(h["authorization"].is_sensitive());
    }
}
