//! The streaming commit point: failover before the first token is invisible; after it, the
//! channel never changes and a fault becomes an error frame.

use serde_json::Value;
use switchyard::provider::mock::{Fault, MockSpec};

use crate::support::*;

fn stream_body(include_usage: bool) -> Value {
    let mut b = chat_body(true);
    if include_usage {
        b["stream_options"] = serde_json::json!({"include_usage": true});
    }
    b
}

#[tokio::test]
async fn streams_chunk_by_chunk_and_ends_with_done() {
    let up = mock(text_spec("abcdefghi")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-type"), "text/event-stream");
    assert_eq!(header(&resp, "x-switchyard-channel"), "up");
    let body = resp.text().await.unwrap();
    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(sse_text(&body), "abcdefghi");
    // The usage chunk the gateway asked for is stripped: the client did not ask.
    assert!(!body.contains("\"usage\""), "{body}");
    assert_eq!(
        up.received()[0].body["stream_options"]["include_usage"],
        true
    );
}

#[tokio::test]
async fn usage_chunk_is_passed_when_the_client_asks() {
    let up = mock(text_spec("abc")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let body = gw.chat(stream_body(true)).await.text().await.unwrap();
    let data = sse_data(&body);
    let usage: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn a_500_before_the_first_byte_is_invisible() {
    let (_bad, _good, gw) = two_tiers(
        ("bad", faulty("BAD", status(500)), ""),
        ("good", text_spec("good answer")),
    )
    .await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    let body = resp.text().await.unwrap();
    assert_eq!(sse_text(&body), "good answer");
    assert!(body.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn a_hang_past_first_token_timeout_fails_over_invisibly() {
    // The hanging upstream sends headers and a role-only chunk, then nothing.
    let (hang, _good, gw) = two_tiers(
        (
            "hang",
            faulty(
                "HANG",
                Fault {
                    hang: true,
                    ..Fault::default()
                },
            ),
            "first_token_timeout_ms = 300",
        ),
        ("good", text_spec("served by backup")),
    )
    .await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    let body = resp.text().await.unwrap();
    assert_eq!(sse_text(&body), "served by backup");
    // Exactly one role chunk reached the client: the hung channel's buffered one was discarded.
    assert_eq!(body.matches("\"role\":\"assistant\"").count(), 1);
    eventually(&hang, "aborted >= 1", |m| m.aborted() >= 1).await;
}

#[tokio::test]
async fn a_cut_after_the_first_token_is_an_error_frame_without_done() {
    let (_cut, backup, gw) = two_tiers(
        ("cut", after_chunks(2, true), ""),
        ("backup", text_spec("backup")),
    )
    .await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-channel"), "cut");
    let body = resp.text().await.unwrap();
    let data = sse_data(&body);
    assert!(!body.contains("[DONE]"), "{body}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted");
    // Content from one channel only, and the backup never asked.
    assert_eq!(sse_text(&body), "AAAABBBB");
    assert_eq!(backup.requests(), 0);
}

#[tokio::test]
async fn a_stall_after_commit_ends_with_a_timeout_frame() {
    let stall = mock(after_chunks(1, false)).await;
    let gw = gateway_with(
        "stream_idle_timeout_ms = 300",
        &openai_channel("stall", &stall.base_url(), 1, ""),
    )
    .await;
    let body = gw.chat(stream_body(false)).await.text().await.unwrap();
    assert!(!body.contains("[DONE]"), "{body}");
    let data = sse_data(&body);
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "stream_timeout");
    assert_eq!(sse_text(&body), "AAAA");
}

#[tokio::test]
async fn a_stream_longer_than_the_idle_timeout_is_not_cut_while_chunks_keep_coming() {
    let slow = mock(paced("aaabbbcccdddeeefff", 6, 120)).await;
    let gw = gateway_with(
        "stream_idle_timeout_ms = 300",
        &openai_channel("slow", &slow.base_url(), 1, ""),
    )
    .await;
    // ~600 ms in all, no gap past 300 ms: the idle timer fires once early and waits out the rest.
    let body = gw.chat(stream_body(false)).await.text().await.unwrap();
    assert_eq!(sse_text(&body), "aaabbbcccdddeeefff");
    assert!(body.contains("[DONE]"), "{body}");
}

#[tokio::test]
async fn a_client_gone_before_commit_cancels_the_upstream_call() {
    let hang = mock(faulty(
        "x",
        Fault {
            hang: true,
            ..Fault::default()
        },
    ))
    .await;
    let gw = gateway(&openai_channel("hang", &hang.base_url(), 1, "")).await;
    let url = gw.chat_url();
    let request = tokio::spawn(async move {
        client()
            .post(url)
            .bearer_auth(KEY)
            .json(&chat_body(true))
            .send()
            .await
    });
    eventually(&hang, "requests >= 1", |m| m.requests() >= 1).await;
    assert_eq!(hang.aborted(), 0);
    // The client gives up while the gateway still holds the response.
    request.abort();
    let _ = request.await;
    eventually(&hang, "aborted >= 1", |m| m.aborted() >= 1).await;
    // The request log records the abandoned request.
    let rows = gw.admin_requests().await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], 499);
    assert_eq!(rows[0]["outcome"], "client_closed");
    assert_eq!(rows[0]["key_name"], "team-a");
    // Counted, but with no overhead measure: the request stopped half way.
    let m = &gw.running.state.telemetry.metrics;
    let closed = m.requests.series();
    assert!(
        closed
            .iter()
            .any(|(l, c)| &*l.0[2] == "client_closed" && c.get() == 1)
    );
    let measured: u64 = m.overhead.iter().map(|h| h.read().1).sum();
    assert_eq!(measured, 0);
}

#[tokio::test]
async fn a_client_gone_after_commit_cancels_the_upstream_stream_and_is_logged() {
    let slow = mock(paced(&"x".repeat(100), 100, 50)).await;
    let gw = gateway(&openai_channel("slow", &slow.base_url(), 1, "")).await;
    let mut resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 200);
    // Read the first content, then hang up.
    let first = resp.chunk().await.unwrap();
    assert!(first.is_some());
    drop(resp);
    eventually(&slow, "aborted >= 1", |m| m.aborted() >= 1).await;
    let rows = gw.admin_requests().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["outcome"], "client_closed");
    assert_eq!(rows[0]["status"], 499);
}

#[tokio::test]
async fn an_empty_answer_still_commits() {
    let empty = mock(text_spec("")).await;
    let gw = gateway(&openai_channel("empty", &empty.base_url(), 1, "")).await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.contains("\"finish_reason\":\"stop\""), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn in_process_mock_channels_stream_and_fail_over() {
    let gw = gateway(
        "[[channels]]\nname = \"mock-bad\"\nprovider = \"mock\"\nmodels = [\"m\"]\npriority = 1\n\
         mock = { fault = { status = 503 } }\n\n\
         [[channels]]\nname = \"mock-good\"\nprovider = \"mock\"\nmodels = [\"m\"]\npriority = 2\n\
         mock = { text = \"in process\", chunks = 2 }\n",
    )
    .await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "mock-good");
    let body = resp.text().await.unwrap();
    assert_eq!(sse_text(&body), "in process");
    assert!(!body.contains("\"usage\""));
}

#[tokio::test]
async fn a_stream_that_ends_without_an_answer_fails_over() {
    let (_empty, _good, gw) = two_tiers(
        (
            "empty",
            faulty(
                "x",
                Fault {
                    empty: true,
                    ..Fault::default()
                },
            ),
            "",
        ),
        ("good", text_spec("real answer")),
    )
    .await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-channel"), "good");
    let body = resp.text().await.unwrap();
    assert_eq!(sse_text(&body), "real answer");
    // The failover report rides on the first chunk of a stream.
    let first: Value = serde_json::from_str(&sse_data(&body)[0]).unwrap();
    assert_eq!(
        first["switchyard"]["failover"]["attempts"][0]["reason"],
        "server_error"
    );
    assert_eq!(first["switchyard"]["served_channel"], "good");
    assert_eq!(body.matches("\"switchyard\"").count(), 1);
}

#[tokio::test]
async fn the_usage_request_can_be_turned_off_per_channel() {
    let up = mock(text_spec("abc")).await;
    let gw = gateway(&openai_channel(
        "up",
        &up.base_url(),
        1,
        "stream_usage = false",
    ))
    .await;
    let body = gw.chat(stream_body(false)).await.text().await.unwrap();
    assert_eq!(sse_text(&body), "abc");
    assert!(up.received()[0].body.get("stream_options").is_none());
    // Asked by the client, it still goes through.
    let body = gw.chat(stream_body(true)).await.text().await.unwrap();
    assert!(body.contains("\"completion_tokens\""));
    assert_eq!(
        up.received()[1].body["stream_options"]["include_usage"],
        true
    );
}

#[tokio::test]
async fn a_slow_client_holds_the_upstream_back_instead_of_filling_memory() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // 48 MiB of answer in 1 KiB chunks, sent as fast as the sockets take it: more than the
    // kernel's socket buffers on the way can hold (up to 32 MiB + 4 MiB autotuned here).
    let big = mock(MockSpec {
        text: "x".repeat(48 << 20),
        chunks: 48 << 10,
        ..MockSpec::default()
    })
    .await;
    let gw = gateway(&openai_channel("big", &big.base_url(), 1, "")).await;
    // A raw client with a small receive buffer, so the kernel cannot absorb the answer for it.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut conn = sock.connect(gw.running.addr).await.unwrap();
    let body = serde_json::to_string(&stream_body(false)).unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut first = vec![0u8; 4096];
    let n = conn.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    // The client stops reading. Nothing may drain the upstream for it: the mock must stay
    // blocked mid-answer (a gateway buffering the stream takes all 48 MiB in well under 1 s).
    never_within(
        &big,
        "the upstream finished while the client was not reading",
        std::time::Duration::from_secs(1),
        |m| m.completed() > 0,
    )
    .await;
    // The client reads again: everything arrives, in order, ending with [DONE].
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).await.unwrap();
    let rest = String::from_utf8_lossy(&rest);
    let tail = &rest[rest.len().saturating_sub(64)..];
    // The last event, then the end of the chunked body.
    assert!(
        tail.contains("data: [DONE]\n\n") && tail.ends_with("0\r\n\r\n"),
        "{tail}"
    );
    eventually(&big, "completed >= 1", |m| m.completed() >= 1).await;
}

#[tokio::test]
async fn chunks_reach_the_client_as_they_are_produced() {
    let slow = mock(paced("aaaabbbbccccdddd", 4, 150)).await;
    let gw = gateway(&openai_channel("slow", &slow.base_url(), 1, "")).await;
    let mut resp = gw.chat(stream_body(false)).await;
    let mut first_content_at = None;
    let mut text = String::new();
    while let Some(bytes) = resp.chunk().await.unwrap() {
        let got = sse_text(&String::from_utf8_lossy(&bytes));
        if !got.is_empty() && first_content_at.is_none() {
            first_content_at = Some(std::time::Instant::now());
        }
        text.push_str(&got);
    }
    let after_first = first_content_at.unwrap().elapsed();
    assert_eq!(text, "aaaabbbbccccdddd");
    // Three more chunks 150 ms apart came after the first one reached the client.
    assert!(
        after_first >= std::time::Duration::from_millis(400),
        "{after_first:?}"
    );
}

#[tokio::test]
async fn a_burst_of_events_is_written_together() {
    let up = mock(paced("abcdefghijklmnopqrst", 20, 0)).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    let mut resp = gw.chat(stream_body(false)).await;
    let (mut writes, mut text, mut first) = (0, String::new(), None);
    // Each body frame the client reads is (at least) one HTTP chunk the gateway wrote.
    while let Some(bytes) = resp.chunk().await.unwrap() {
        writes += 1;
        let got = sse_text(&String::from_utf8_lossy(&bytes));
        first.get_or_insert(got.clone());
        text.push_str(&got);
    }
    assert_eq!(text, "abcdefghijklmnopqrst");
    // The first token leaves with what came beside it: nothing already here waits.
    assert!(
        first.as_deref().is_some_and(|f| f.starts_with('a')),
        "{first:?}"
    );
    // 22 events (role, 20 tokens, the finish) came in one burst: one write each before the
    // gateway gathered them; the connection driven by the request's own task reads them at once.
    assert!(writes <= 3, "{writes} writes for one burst");
}

#[tokio::test]
async fn an_upstream_400_on_a_stream_is_returned_as_is() {
    let (_picky, backup, gw) = two_tiers(
        ("picky", faulty("x", status(400)), ""),
        ("backup", text_spec("ok")),
    )
    .await;
    let resp = gw.chat(stream_body(false)).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "mock_client_error");
    assert_eq!(backup.requests(), 0);
}

/// An OpenAI-compatible upstream's events as real ones come: spaces after colons, fields in
/// its own order and of its own (`system_fingerprint`, `logprobs`, `x_vendor`), `data:` with no
/// space, a refusal-null first delta, a tool call, `usage: null` on each chunk and a usage chunk.
const VENDOR_STREAM: &str = "data: {\"id\": \"c-1\", \"object\": \"chat.completion.chunk\", \"created\": 7, \"model\": \"up-model\", \"system_fingerprint\": \"fp_1\", \"choices\": [{\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"\", \"refusal\": null}, \"logprobs\": null, \"finish_reason\": null}], \"usage\": null}\n\n\
data:{\"choices\":[{\"delta\":{\"content\":\"Hel\"},\"index\":0,\"finish_reason\":null}],\"model\":\"up-model\",\"id\":\"c-1\",\"created\":7,\"object\":\"chat.completion.chunk\",\"x_vendor\":{\"k\":[1,2]},\"usage\":null}\n\n\
data: {\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"up-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\\n\"},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"up-model\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"up-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n\
data: {\"id\":\"c-1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"up-model\",\"choices\":[],\"usage\": {\"prompt_tokens\": 9,\"completion_tokens\":4,\"total_tokens\":13,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n\
data: [DONE]\n\n";

/// The upstream's `data:` payloads, as sent.
fn vendor_events() -> Vec<String> {
    sse_data(&VENDOR_STREAM.replace("data:{", "data: {"))
}

#[tokio::test]
async fn a_chat_client_gets_the_upstreams_events_byte_for_byte() {
    let addr = canned_upstream(VENDOR_STREAM, serde_json::json!({})).await;
    let gw = gateway(&openai_channel("up", &format!("http://{addr}/v1"), 1, "")).await;
    let body = gw.chat(stream_body(true)).await.text().await.unwrap();
    let got = sse_data(&body);
    let want = vendor_events();
    assert_eq!(got.len(), want.len(), "{body}");
    // Every event as it came but the usage chunk, which gains the gateway's cost beside it.
    let usage = want.len() - 2;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if i != usage {
            assert_eq!(g, w, "event {i}");
        }
    }
    // The upstream's bytes, then the cost as the event's last member.
    let upstream = want[usage].strip_suffix('}').unwrap();
    let cost = got[usage].strip_prefix(upstream).unwrap_or_default();
    assert!(
        cost.starts_with(",\"switchyard\":{\"cost_micros\":"),
        "{}",
        got[usage]
    );
    let mut g: Value = serde_json::from_str(&got[usage]).unwrap();
    assert!(g["switchyard"]["cost_micros"].is_u64(), "{g}");
    g.as_object_mut().unwrap().remove("switchyard");
    assert_eq!(g, serde_json::from_str::<Value>(&want[usage]).unwrap());
    // The log read the stream all the same: usage, and the tool call as output.
    gw.flush_log().await;
    let row = &gw.admin_requests().await[0];
    assert_eq!(row["input_tokens"], 9, "{row}");
    assert_eq!(row["output_tokens"], 4, "{row}");
}

#[tokio::test]
async fn usage_the_client_did_not_ask_for_is_taken_out_of_the_passed_events() {
    let addr = canned_upstream(VENDOR_STREAM, serde_json::json!({})).await;
    let gw = gateway(&openai_channel("up", &format!("http://{addr}/v1"), 1, "")).await;
    let body = gw.chat(stream_body(false)).await.text().await.unwrap();
    assert!(!body.contains("\"usage\""), "{body}");
    let got = sse_data(&body);
    let want = vendor_events();
    // The usage chunk is gone; every other event is the upstream's without its `usage: null`.
    assert_eq!(got.len(), want.len() - 1, "{body}");
    for (g, w) in got
        .iter()
        .zip(want.iter().filter(|w| !w.contains("\"choices\":[]")))
    {
        if w == "[DONE]" {
            assert_eq!(g, w);
            continue;
        }
        // Where the upstream wrote it last, it is cut and the rest kept byte for byte.
        if let Some(kept) = w.strip_suffix(",\"usage\":null}") {
            assert_eq!(g, &format!("{kept}}}"));
            continue;
        }
        let mut w: Value = serde_json::from_str(w).unwrap();
        w.as_object_mut().unwrap().remove("usage");
        assert_eq!(serde_json::from_str::<Value>(g).unwrap(), w);
    }
}
