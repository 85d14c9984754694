//! SigV4 for Bedrock requests. The gateway sends one shape of request (a POST with a JSON body,
//! no query), so the canonical request is written straight into one buffer and hashed with
//! ring: AWS's general signer (`aws-sigv4`) spends ~10 µs a request building it from maps and
//! formatted strings, this ~2 µs (`cargo bench --bench sigv4`). The tests below check every
//! signature against `aws-sigv4`'s for the same request, and the Bedrock mock checks every
//! request the integration tests send with botocore's `SigV4Auth`. Signed: the content type,
//! the host, the date (and the session token, when there is one), and the body's hash; nothing
//! else of the request (the hop count and the trace headers may differ between attempts
//! without a new signature).

use std::fmt::Write as _;
use std::time::SystemTime;

use ::http::HeaderValue;
use ::http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName};
use bytes::Bytes;
use http_body_util::Full;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use ring::{digest, hmac};

use crate::provider::auth::aws::AwsCredentials;

/// The service name Bedrock's runtime signs under.
const SERVICE: &str = "bedrock";
const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const X_AMZ_DATE: HeaderName = HeaderName::from_static("x-amz-date");
const X_AMZ_SECURITY_TOKEN: HeaderName = HeaderName::from_static("x-amz-security-token");

/// The canonical URI encodes the (already encoded) path again: every byte but the unreserved
/// ones and `/`, as AWS's signers do for every service but S3.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Signs `req` (whose body is `body`) for `region` at `now`.
pub fn sign_request(
    req: &mut ::http::Request<Full<Bytes>>,
    body: &[u8],
    creds: &AwsCredentials,
    region: &str,
    now: SystemTime,
) -> Result<(), String> {
    let uri = req.uri();
    if uri.query().is_some() {
        return Err("a Bedrock URL with a query string cannot be signed".into());
    }
    let host = host(uri).ok_or("the request has no host to sign")?;
    let (date, stamp) = stamps(now);
    let token = creds.session_token.as_ref().map(|t| t.expose());
    let content_type = req.headers().get(CONTENT_TYPE).map(HeaderValue::as_bytes);
    let signed = match (content_type.is_some(), token.is_some()) {
        (true, true) => "content-type;host;x-amz-date;x-amz-security-token",
        (true, false) => "content-type;host;x-amz-date",
        (false, true) => "host;x-amz-date;x-amz-security-token",
        (false, false) => "host;x-amz-date",
    };

    // The canonical request, one line at a time (AWS's "Create a canonical request").
    let path = if uri.path().is_empty() {
        "/"
    } else {
        uri.path()
    };
    let mut canonical = String::with_capacity(320 + path.len() + token.map_or(0, str::len));
    let _ = write!(
        canonical,
        "{}\n{}\n\n",
        req.method(),
        utf8_percent_encode(path, PATH)
    );
    if let Some(ct) = content_type {
        canonical.push_str("content-type:");
        canonical.push_str(&trim_all(ct));
        canonical.push('\n');
    }
    let _ = write!(canonical, "host:{host}\nx-amz-date:{stamp}\n");
    if let Some(t) = token {
        let _ = writeln!(canonical, "x-amz-security-token:{t}");
    }
    canonical.push('\n');
    canonical.push_str(signed);
    canonical.push('\n');
    push_hex(
        &mut canonical,
        digest::digest(&digest::SHA256, body).as_ref(),
    );

    let scope = format!("{date}/{region}/{SERVICE}/aws4_request");
    let mut to_sign = String::with_capacity(160);
    let _ = write!(to_sign, "{ALGORITHM}\n{stamp}\n{scope}\n");
    push_hex(
        &mut to_sign,
        digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref(),
    );
    let key = signing_key(creds.secret_access_key.expose(), &date, region);
    let signature = hmac::sign(&key, to_sign.as_bytes());

    let mut auth = String::with_capacity(200);
    let _ = write!(
        auth,
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed}, Signature=",
        creds.access_key_id
    );
    push_hex(&mut auth, signature.as_ref());
    let headers = req.headers_mut();
    let value = |s: &str| HeaderValue::from_str(s).map_err(|_| "a credential is no header value");
    headers.insert(X_AMZ_DATE, value(&stamp)?);
    // The credentials' headers are secrets: never printed by the HTTP stack.
    let mut auth = value(&auth)?;
    auth.set_sensitive(true);
    headers.insert(AUTHORIZATION, auth);
    if let Some(t) = token {
        let mut t = value(t)?;
        t.set_sensitive(true);
        headers.insert(X_AMZ_SECURITY_TOKEN, t);
    }
    Ok(())
}

/// The host as signed: the URL's authority, its port left out when it is the scheme's default.
fn host(uri: &::http::Uri) -> Option<String> {
    let host = uri.host()?;
    let default = matches!(
        (uri.scheme_str(), uri.port_u16()),
        (Some("http"), Some(80)) | (Some("https"), Some(443))
    );
    Some(match uri.port_u16() {
        Some(p) if !default => format!("{host}:{p}"),
        _ => host.to_string(),
    })
}

/// `20270115` and `20270115T080000Z` for `now`, in UTC.
fn stamps(now: SystemTime) -> (String, String) {
    // "2027-01-15T08:00:00Z" without its separators.
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    (stamp[..8].to_string(), stamp)
}

/// The day's key: the secret through HMAC with the date, the region, the service and the
/// request type, in that order.
fn signing_key(secret: &str, date: &str, region: &str) -> hmac::Key {
    let mut k = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, format!("AWS4{secret}").as_bytes()),
        date.as_bytes(),
    );
    for part in [region, SERVICE, "aws4_request"] {
        k = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, k.as_ref()),
            part.as_bytes(),
        );
    }
    hmac::Key::new(hmac::HMAC_SHA256, k.as_ref())
}

/// A header value as canonical: trimmed, inner runs of spaces made one.
fn trim_all(v: &[u8]) -> std::borrow::Cow<'_, str> {
    let s = String::from_utf8_lossy(v);
    if s.trim() == s && !s.contains("  ") {
        return s;
    }
    s.split_ascii_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .into()
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::secret::Secret;

    /// AWS's own signer over the same request: the reference every signature must equal.
    fn reference(
        req: &mut ::http::Request<Full<Bytes>>,
        body: &[u8],
        creds: &AwsCredentials,
        region: &str,
        now: SystemTime,
    ) {
        use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
        let identity: aws_smithy_runtime_api::client::identity::Identity =
            aws_credential_types::Credentials::new(
                creds.access_key_id.clone(),
                creds.secret_access_key.expose().to_string(),
                creds.session_token.as_ref().map(|t| t.expose().to_string()),
                None,
                "test",
            )
            .into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(SERVICE)
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .unwrap()
            .into();
        let uri = req.uri().to_string();
        let headers = req
            .headers()
            .iter()
            .filter(|(n, _)| *n == CONTENT_TYPE)
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()));
        let signable =
            SignableRequest::new("POST", &uri, headers, SignableBody::Bytes(body)).unwrap();
        let (instructions, _) = sign(signable, &params).unwrap().into_parts();
        instructions.apply_to_request_http1x(req);
    }

    fn request(url: &str, content_type: Option<&str>, body: &[u8]) -> ::http::Request<Full<Bytes>> {
        let mut b = ::http::Request::post(url).header("x-switchyard-hops", "1");
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        b.body(Full::new(Bytes::copy_from_slice(body))).unwrap()
    }

    #[test]
    fn every_signature_is_the_one_aws_sigv4_makes() {
        let long = "x".repeat(5000);
        let urls = [
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse",
            "https://bedrock-runtime.eu-west-1.amazonaws.com:443/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123456789012%3Ainference-profile%2Fabc/converse-stream",
            "http://127.0.0.1:8123/model/amazon.nova-pro-v1%3A0/invoke-with-response-stream",
            "http://localhost:80/vpce/base/model/meta.llama3-70b-instruct-v1%3A0/invoke",
            "https://vpce-0a1b.bedrock-runtime.us-west-2.vpce.amazonaws.com/model/a~b_c.d-e/converse",
        ];
        let bodies: [&[u8]; 3] = [
            b"",
            br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#,
            long.as_bytes(),
        ];
        let tokens = [
            None,
            Some("IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ=="),
        ];
        let types = [
            Some("application/json"),
            Some("  application/json;   charset=utf-8 "),
            None,
        ];
        let mut checked = 0;
        for (i, url) in urls.iter().enumerate() {
            for body in bodies {
                for token in tokens {
                    for ct in types {
                        let creds = AwsCredentials {
                            access_key_id: "AKIDEXAMPLE".into(),
                            secret_access_key: Secret::new(
                                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                            ),
                            session_token: token.map(Secret::new),
                            expires: None,
                        };
                        let region = ["us-east-1", "eu-west-1", "us-west-2"][i % 3];
                        let now = SystemTime::UNIX_EPOCH
                            + Duration::from_secs(1_800_000_000 + 86_399 * i as u64);
                        let (mut ours, mut theirs) =
                            (request(url, ct, body), request(url, ct, body));
                        sign_request(&mut ours, body, &creds, region, now).unwrap();
                        reference(&mut theirs, body, &creds, region, now);
                        for h in ["authorization", "x-amz-date", "x-amz-security-token"] {
                            assert_eq!(
                                ours.headers().get(h),
                                theirs.headers().get(h),
                                "{h} for {url}, token {token:?}, content type {ct:?}, {} bytes",
                                body.len()
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 90);
    }

    #[test]
    fn the_credential_headers_are_sensitive_and_a_query_is_refused() {
        let creds = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("secret"),
            session_token: Some(Secret::new("session")),
            expires: None,
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut req = request(
            "https://h.example/model/m/converse",
            Some("application/json"),
            b"{}",
        );
        sign_request(&mut req, b"{}", &creds, "us-east-1", at).unwrap();
        let h = req.headers();
        assert!(h["authorization"].is_sensitive());
        assert!(h["x-amz-security-token"].is_sensitive());
        assert_eq!(h["x-amz-date"], "20270115T080000Z");
        let mut req = request("https://h.example/model/m/converse?x=1", None, b"{}");
        assert!(sign_request(&mut req, b"{}", &creds, "us-east-1", at).is_err());
    }
}
