//! The gateway's own upstream connections (HTTP/1.1, `provider::pool`): one connection carries
//! request after request of every kind, and a kept connection the upstream has closed is
//! replaced, never answered with an error.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn one_upstream_connection_carries_request_after_request() {
    let up = mock(text_spec("kept")).await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    for i in 0..8 {
        let stream = i % 2 == 1;
        let resp = gw.chat(chat_body(stream)).await;
        assert_eq!(resp.status(), 200, "request {i}");
        let body = resp.text().await.expect("body");
        let text = if stream {
            sse_text(&body)
        } else {
            serde_json::from_str::<serde_json::Value>(&body).expect("json")["choices"][0]["message"]
                ["content"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(text, "kept", "request {i}: {body}");
    }
    assert_eq!(up.requests(), 8);
    // Each answer was read to its end, so its connection went back and was taken again.
    assert_eq!(up.connections(), 1);
}

/// An OpenAI chat completion answering "fresh", as a whole HTTP/1.1 response.
fn completion_response() -> String {
    let body = json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fresh"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    })
    .to_string();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_kept_connection_the_upstream_closed_is_replaced() {
    // It hangs up 100 ms after answering, once the gateway has kept the connection: the
    // next request finds it dead and must go on a new one at once, not wait for a timeout.
    let up = raw_upstream(
        vec![completion_response()],
        Duration::from_millis(100),
        true,
    )
    .await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    for i in 0..4u64 {
        let started = std::time::Instant::now();
        let resp = gw.chat(chat_body(false)).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "request {i} waited {:?}",
            started.elapsed()
        );
        assert_eq!(resp.status(), 200, "request {i}");
        let body: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(body["choices"][0]["message"]["content"], "fresh");
        // The upstream hangs up after answering: the connection the gateway kept is dead.
        up.answered_past(i).await;
    }
    assert_eq!(up.accepted(), 4);
}

#[tokio::test]
async fn a_stream_whose_body_ends_after_its_done_event_keeps_its_connection() {
    // The events and `[DONE]` in one chunk; the chunked body's end 50 ms later. The gateway
    // has finished the client's stream by then, and reads that end on its own.
    let events = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
                  \"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"},\
                  \"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
         {:x}\r\n{events}\r\n",
        events.len()
    );
    let up = raw_upstream(
        vec![head, "0\r\n\r\n".into()],
        Duration::from_millis(50),
        false,
    )
    .await;
    let gw = gateway(&openai_channel("up", &up.base_url(), 1, "")).await;
    for i in 0..3u64 {
        let resp = gw.chat(chat_body(true)).await;
        assert_eq!(resp.status(), 200, "request {i}");
        assert_eq!(sse_text(&resp.text().await.expect("body")), "late");
        up.answered_past(i).await;
    }
    assert_eq!(up.accepted(), 1);
}
