//! What SigV4 signing adds to a Bedrock request: the gateway's `sign_request` (AWS's own
//! signer, `aws-sigv4`) on a Converse body of the size the load benchmarks send, a 20 KiB one
//! and a coding agent's 200 KiB turn (the body's SHA-256 grows with it), against what an
//! OpenAI-compatible channel does in its place (one bearer header).
//!
//!   cargo bench --bench sigv4

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::Full;
use switchyard::provider::auth::aws::AwsCredentials;
use switchyard::provider::bedrock::sign::sign_request;
use switchyard::secret::Secret;

// The gateway's allocator: signing allocates many small strings, and mimalloc is what the
// gateway gives them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const URL: &str = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse";

fn request(body: &Bytes) -> http::Request<Full<Bytes>> {
    http::Request::post(URL)
        .header("content-type", "application/json")
        .header("x-switchyard-hops", "1")
        .body(Full::new(body.clone()))
        .expect("a valid request")
}

/// A Converse body of about `size` bytes.
fn body(size: usize) -> Bytes {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(size / 45 + 1);
    let v = serde_json::json!({
        "system": [{"text": "You are terse."}],
        "messages": [{"role": "user", "content": [{"text": &text[..size.saturating_sub(120)]}]}],
        "inferenceConfig": {"maxTokens": 256}
    });
    Bytes::from(serde_json::to_vec(&v).expect("JSON"))
}

fn signing(c: &mut Criterion) {
    let creds = AwsCredentials {
        access_key_id: "AKIABENCH00000001".into(),
        secret_access_key: Secret::new("bench-secret-access-key-0000000000000000"),
        session_token: Some(Secret::new("bench-session-token")),
        expires: None,
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut g = c.benchmark_group("bedrock");
    for (name, size) in [("300B", 300), ("20KiB", 20 << 10), ("200KiB", 200 << 10)] {
        let b = body(size);
        g.bench_function(format!("bearer_{name}"), |t| {
            t.iter(|| {
                let mut r = request(&b);
                r.headers_mut().insert(
                    "authorization",
                    http::HeaderValue::from_static("Bearer sk-upstream-bench"),
                );
                black_box(r)
            })
        });
        g.bench_function(format!("sigv4_{name}"), |t| {
            t.iter(|| {
                let mut r = request(&b);
                sign_request(&mut r, &b, &creds, "us-east-1", now).expect("signed");
                black_box(r)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, signing);
criterion_main!(benches);
