//! AWS credentials for SigV4: given in the channel (`aws = { access_key_id, ... }`), or found
//! by the standard chain, in its order: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
//! `AWS_SESSION_TOKEN`; the `AWS_PROFILE` (else `default`) profile of the shared credentials and
//! config files (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`), its keys or its web
//! identity role; web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, STS
//! `AssumeRoleWithWebIdentity` at `AWS_ENDPOINT_URL_STS`, else the regional endpoint); the
//! container credentials endpoint (`AWS_CONTAINER_CREDENTIALS_FULL_URI` or `_RELATIVE_URI`,
//! with `AWS_CONTAINER_AUTHORIZATION_TOKEN` or `_FILE`). Temporary ones refresh through
//! [`super::Refreshing`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use http_body_util::BodyExt;

use super::{Fetch, Fetched, Refreshing};
use crate::provider::http::{self, Client};
use crate::secret::Secret;

/// One set of AWS credentials.
#[derive(Clone)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
    pub expires: Option<SystemTime>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Where a channel's AWS credentials come from.
#[derive(Clone)]
pub enum AwsSource {
    /// Given (the channel's `aws`, the environment, a profile's keys): they do not expire here.
    Static(AwsCredentials, &'static str),
    /// Fetched and refreshed (web identity, the container endpoint).
    Refreshing(Arc<Refreshing<Remote>>),
}

impl std::fmt::Debug for AwsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl AwsSource {
    pub async fn credentials(&self) -> Result<AwsCredentials, String> {
        match self {
            AwsSource::Static(c, _) => Ok(c.clone()),
            AwsSource::Refreshing(r) => r.get().await,
        }
    }

    /// Where the credentials come from, for `switchyard check` (never a secret).
    pub fn describe(&self) -> String {
        match self {
            AwsSource::Static(c, from) => format!("SigV4, {from} (key {})", c.access_key_id),
            AwsSource::Refreshing(r) => format!("SigV4, {}", r.status().source),
        }
    }

    pub fn status(&self) -> Option<super::AuthStatus> {
        match self {
            AwsSource::Static(..) => None,
            AwsSource::Refreshing(r) => Some(r.status()),
        }
    }
}

/// The process environment, or a test's.
pub type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

/// The standard chain's first source that applies; `channel` names the cache that keeps a
/// fetched source's value across reloads.
pub fn chain(channel: &str, region: &str, env: &Env, client: Client) -> Result<AwsSource, String> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    if let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        let c = AwsCredentials {
            access_key_id: id,
            secret_access_key: Secret::new(secret),
            session_token: var("AWS_SESSION_TOKEN").map(Secret::new),
            expires: None,
        };
        return Ok(AwsSource::Static(c, "AWS_ACCESS_KEY_ID"));
    }
    let sts = |token_file: String, role: String, session: Option<String>| {
        let endpoint = var("AWS_ENDPOINT_URL_STS")
            .or_else(|| var("AWS_ENDPOINT_URL"))
            .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
        let remote = Remote::WebIdentity {
            endpoint,
            role,
            session: session.unwrap_or_else(|| "switchyard".into()),
            token_file,
            client: client.clone(),
        };
        let key = format!("aws:{channel}:{}", super::fingerprint(&remote.identity()));
        AwsSource::Refreshing(super::shared(key, || remote))
    };
    if let Some(p) = profile(env)? {
        if let (Some(id), Some(secret)) =
            (p.get("aws_access_key_id"), p.get("aws_secret_access_key"))
        {
            let c = AwsCredentials {
                access_key_id: id.clone(),
                secret_access_key: Secret::new(secret.as_str()),
                session_token: p.get("aws_session_token").map(|t| Secret::new(t.as_str())),
                expires: None,
            };
            return Ok(AwsSource::Static(c, "shared credentials file"));
        }
        if let (Some(file), Some(role)) = (p.get("web_identity_token_file"), p.get("role_arn")) {
            return Ok(sts(
                file.clone(),
                role.clone(),
                p.get("role_session_name").cloned(),
            ));
        }
    }
    if let (Some(file), Some(role)) = (var("AWS_WEB_IDENTITY_TOKEN_FILE"), var("AWS_ROLE_ARN")) {
        return Ok(sts(file, role, var("AWS_ROLE_SESSION_NAME")));
    }
    let container = var("AWS_CONTAINER_CREDENTIALS_FULL_URI").or_else(|| {
        var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").map(|p| format!("http://169.254.170.2{p}"))
    });
    if let Some(uri) = container {
        let remote = Remote::Container {
            uri,
            token: var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
            token_file: var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
            client,
        };
        let key = format!("aws:{channel}:{}", super::fingerprint(&remote.identity()));
        return Ok(AwsSource::Refreshing(super::shared(key, || remote)));
    }
    Err("no AWS credentials: give `aws` or `credentials`, or set AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or AWS_CONTAINER_CREDENTIALS_FULL_URI".into())
}

/// The profile's settings from the shared credentials file, then the config file (`[profile
/// name]` there, `[default]` as is); `None` when neither file names it.
fn profile(env: &Env) -> Result<Option<HashMap<String, String>>, String> {
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let home = env("HOME").unwrap_or_default();
    let name = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
    let files = [
        (
            env("AWS_SHARED_CREDENTIALS_FILE")
                .unwrap_or_else(|| format!("{home}/.aws/credentials")),
            name.clone(),
        ),
        (
            env("AWS_CONFIG_FILE").unwrap_or_else(|| format!("{home}/.aws/config")),
            if name == "default" {
                name.clone()
            } else {
                format!("profile {name}")
            },
        ),
    ];
    let mut found: Option<HashMap<String, String>> = None;
    for (path, section) in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if let Some(s) = ini_section(&text, &section) {
            let all = found.get_or_insert_with(HashMap::new);
            for (k, v) in s {
                all.entry(k).or_insert(v);
            }
        }
    }
    if found.is_none() && env("AWS_PROFILE").is_some() {
        return Err(format!("AWS_PROFILE {name:?} is in neither shared file"));
    }
    Ok(found)
}

/// The `key = value` lines of `[section]` in an INI file (AWS's shared files).
fn ini_section(text: &str, section: &str) -> Option<HashMap<String, String>> {
    let mut inside = false;
    let mut out: Option<HashMap<String, String>> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            if inside {
                out.get_or_insert_with(HashMap::new);
            }
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.get_or_insert_with(HashMap::new)
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    out
}

/// A source that is fetched over HTTP.
pub enum Remote {
    /// STS `AssumeRoleWithWebIdentity` with the token file's token (read anew each time: the
    /// platform rotates it).
    WebIdentity {
        endpoint: String,
        role: String,
        session: String,
        token_file: String,
        client: Client,
    },
    /// The container credentials endpoint (ECS, EKS Pod Identity).
    Container {
        uri: String,
        token: Option<String>,
        token_file: Option<String>,
        client: Client,
    },
}

impl Remote {
    /// What identifies the source (no secret: a role, a file path, a URI).
    fn identity(&self) -> [&str; 2] {
        match self {
            Remote::WebIdentity {
                role, token_file, ..
            } => [role, token_file],
            Remote::Container { uri, .. } => [uri, ""],
        }
    }
}

impl Fetch for Remote {
    type Value = AwsCredentials;

    async fn fetch(&self) -> Result<Fetched<AwsCredentials>, String> {
        let c = match self {
            Remote::WebIdentity {
                endpoint,
                role,
                session,
                token_file,
                client,
            } => {
                let token = std::fs::read_to_string(token_file)
                    .map_err(|e| format!("reading the web identity token file: {e}"))?;
                let form = [
                    ("Action", "AssumeRoleWithWebIdentity"),
                    ("Version", "2011-06-15"),
                    ("RoleArn", role),
                    ("RoleSessionName", session),
                    ("WebIdentityToken", token.trim()),
                ];
                let body = form_encode(&form);
                let text = call(client, "POST", endpoint, Some(body), None).await?;
                sts_credentials(&text)?
            }
            Remote::Container {
                uri,
                token,
                token_file,
                client,
            } => {
                let auth = match (token, token_file) {
                    (Some(t), _) => Some(t.clone()),
                    (None, Some(f)) => Some(
                        std::fs::read_to_string(f)
                            .map_err(|e| format!("reading the container token file: {e}"))?
                            .trim()
                            .to_string(),
                    ),
                    (None, None) => None,
                };
                let text = call(client, "GET", uri, None, auth).await?;
                container_credentials(&text)?
            }
        };
        Ok(Fetched {
            expires: c.expires,
            value: c,
        })
    }

    fn describe(&self) -> String {
        match self {
            Remote::WebIdentity { role, endpoint, .. } => {
                format!("sts:AssumeRoleWithWebIdentity {role} at {endpoint}")
            }
            Remote::Container { uri, .. } => format!("container credentials at {uri}"),
        }
    }
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, NON_ALPHANUMERIC)))
        .collect::<Vec<_>>()
        .join("&")
}

/// One request to a credentials endpoint: its body as text, or why not (status only: an
/// endpoint's error text may quote what it was sent).
async fn call(
    client: &Client,
    method: &str,
    url: &str,
    form: Option<String>,
    auth: Option<String>,
) -> Result<String, String> {
    let mut b = ::http::Request::builder().method(method).uri(url);
    if form.is_some() {
        b = b.header("content-type", "application/x-www-form-urlencoded");
    }
    if let Some(a) = auth {
        let mut v = ::http::HeaderValue::from_str(&a).map_err(|_| "invalid authorization token")?;
        v.set_sensitive(true);
        b = b.header("authorization", v);
    }
    let req = b
        .body(http_body_util::Full::new(bytes::Bytes::from(
            form.unwrap_or_default(),
        )))
        .map_err(|_| format!("not a valid URL: {}", http::redact_url(url)))?;
    let resp = tokio::time::timeout(std::time::Duration::from_secs(10), client.request(req))
        .await
        .map_err(|_| format!("{} did not answer in 10 s", http::redact_url(url)))?
        .map_err(|e| format!("{}: {}", http::redact_url(url), http::error_chain(&*e)))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{} answered HTTP {}",
            http::redact_url(url),
            status.as_u16()
        ));
    }
    String::from_utf8(body.to_vec()).map_err(|_| "the answer is not UTF-8".into())
}

/// STS's XML answer: the `Credentials` element's four values.
fn sts_credentials(xml: &str) -> Result<AwsCredentials, String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut at = String::new();
    let mut got: HashMap<String, String> = HashMap::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => at = e.local_name().as_ref().to_string(),
            Ok(Event::Text(t)) if !at.is_empty() => {
                let raw = t.into_inner();
                let text = quick_xml::escape::unescape(&raw).map_err(|_| "STS answer: bad text")?;
                got.insert(at.clone(), text.trim().to_string());
            }
            Ok(Event::End(_)) => at.clear(),
            Ok(Event::Eof) => break,
            Err(_) => return Err("STS answered something that is not XML".into()),
            _ => {}
        }
    }
    let take = |k: &str| got.get(k).cloned().ok_or(format!("STS answer without {k}"));
    Ok(AwsCredentials {
        access_key_id: take("AccessKeyId")?,
        secret_access_key: Secret::new(take("SecretAccessKey")?),
        session_token: Some(Secret::new(take("SessionToken")?)),
        expires: Some(rfc3339(&take("Expiration")?)?),
    })
}

/// The container endpoint's JSON answer.
fn container_credentials(text: &str) -> Result<AwsCredentials, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|_| "the container endpoint's answer is not JSON")?;
    let s = |k: &str| {
        v[k].as_str()
            .map(str::to_string)
            .ok_or(format!("the container endpoint's answer has no {k}"))
    };
    Ok(AwsCredentials {
        access_key_id: s("AccessKeyId")?,
        secret_access_key: Secret::new(s("SecretAccessKey")?),
        session_token: s("Token").ok().map(Secret::new),
        expires: match s("Expiration") {
            Ok(e) => Some(rfc3339(&e)?),
            Err(_) => None,
        },
    })
}

fn rfc3339(s: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339(s.trim())
        .or_else(|_| humantime::parse_rfc3339_weak(s.trim()))
        .map_err(|_| format!("not a time: {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_and_container_answers_are_read() {
        let xml = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
          <AssumeRoleWithWebIdentityResult><Credentials>
            <AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>s3cr3t</SecretAccessKey>
            <SessionToken>tok</SessionToken><Expiration>2026-12-07T03:04:05Z</Expiration>
          </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"#;
        let c = sts_credentials(xml).unwrap();
        assert_eq!(c.access_key_id, "ASIAEXAMPLE");
        assert_eq!(c.secret_access_key.expose(), "s3cr3t");
        assert!(c.expires.is_some());
        assert!(sts_credentials("<x>").is_err());
        let j = r#"{"AccessKeyId":"AK","SecretAccessKey":"S","Token":"T","Expiration":"2026-12-07T03:04:05Z"}"#;
        let c = container_credentials(j).unwrap();
        assert_eq!(c.session_token.unwrap().expose(), "T");
    }

    #[test]
    fn the_chain_takes_the_environment_then_a_profile() {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        std::fs::write(&creds, "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sd\n\n[work]\naws_access_key_id = AKWORK\naws_secret_access_key = sw\naws_session_token = tw\n").unwrap();
        let path = creds.display().to_string();
        let client = crate::provider::HttpClients::default()
            .client(
                &"http://127.0.0.1/".parse().unwrap(),
                false,
                std::time::Duration::from_secs(1),
            )
            .unwrap();
        let run = |vars: Vec<(&'static str, String)>| {
            let env = move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
            chain("c", "us-east-1", &env, client.clone())
        };
        let from_env = run(vec![
            ("AWS_ACCESS_KEY_ID", "AKENV".into()),
            ("AWS_SECRET_ACCESS_KEY", "x".into()),
        ]);
        assert!(from_env.unwrap().describe().contains("AKENV"));
        let default = run(vec![("AWS_SHARED_CREDENTIALS_FILE", path.clone())]).unwrap();
        assert!(
            default.describe().contains("AKDEF"),
            "{}",
            default.describe()
        );
        let work = run(vec![
            ("AWS_SHARED_CREDENTIALS_FILE", path.clone()),
            ("AWS_PROFILE", "work".into()),
        ]);
        assert!(work.unwrap().describe().contains("AKWORK"));
        let missing = run(vec![
            ("AWS_SHARED_CREDENTIALS_FILE", path),
            ("AWS_PROFILE", "nope".into()),
        ]);
        assert!(missing.is_err());
        let web = run(vec![
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t".into()),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r".into()),
            ("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9".into()),
            ("HOME", "/nonexistent".into()),
        ]);
        assert!(
            web.unwrap()
                .describe()
                .contains("AssumeRoleWithWebIdentity")
        );
        assert!(run(vec![("HOME", "/nonexistent".into())]).is_err());
    }
}
