//! Hostile clients at the socket: slow heads, idle and surplus connections, oversized heads,
//! pipelined garbage, and a client that stops reading its stream. Raw TCP, so the test sees
//! exactly what a misbehaving client would.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

async fn connect(gw: &Gateway) -> TcpStream {
    TcpStream::connect(gw.running.addr).await.expect("connect")
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n";

/// Reads until the gateway closes the connection (or `within` passes): what it sent, and when
/// it closed (`None`: still open).
async fn read_to_close(tcp: &mut TcpStream, within: Duration) -> (String, Option<Duration>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (String::from_utf8_lossy(&got).into(), Some(start.elapsed()));
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), None),
        }
    }
}

/// Reads one whole response to `GET /healthz` (its body is short and ends the read).
async fn read_response(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into()
}

async fn plain_gateway(server_extra: &str) -> Gateway {
    let up = mock(text_spec("hi")).await;
    let gw = gateway_with(server_extra, &openai_channel("a", &up.base_url(), 1, "")).await;
    // The mock must outlive the test's requests.
    std::mem::forget(up);
    gw
}

#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_is_cut_off_at_the_header_read_timeout() {
    let gw = plain_gateway("header_read_timeout_ms = 400").await;
    let mut tcp = connect(&gw).await;
    let (mut rd, mut wr) = tcp.split();
    let start = Instant::now();
    // Slowloris: a byte every 50 ms, so each byte arrives well within any per-read timeout.
    // Not a wait: the sleeps are the pace of the attack under test.
    let trickle = async {
        wr.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nx-a: ")
            .await
            .expect("write");
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if wr.write_all(b"a").await.is_err() {
                break;
            }
        }
    };
    let closed = async {
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    };
    let took = tokio::select! {
        t = closed => t,
        () = trickle => panic!("the trickled head was never cut off"),
    };
    assert!(took >= Duration::from_millis(400), "closed early: {took:?}");
    assert!(took < Duration::from_millis(2500), "closed late: {took:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_outlives_the_header_read_timeout() {
    let gw = plain_gateway("header_read_timeout_ms = 200").await;
    let mut tcp = connect(&gw).await;
    tcp.write_all(HEALTHZ).await.expect("write");
    assert!(read_response(&mut tcp).await.starts_with("HTTP/1.1 200"));
    // Idle for three header timeouts: no head is being read, so nothing is due. Not a wait:
    // the idle time is what is under test.
    tokio::time::sleep(Duration::from_millis(600)).await;
    tcp.write_all(HEALTHZ).await.expect("write");
    assert!(read_response(&mut tcp).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn idle_connections_are_closed_at_the_idle_timeout() {
    let gw = plain_gateway("idle_timeout_ms = 300").await;
    // One that never sent a byte, one idle after a request.
    let mut silent = connect(&gw).await;
    let silent_since = Instant::now();
    let mut served = connect(&gw).await;
    served.write_all(HEALTHZ).await.expect("write");
    assert!(read_response(&mut served).await.starts_with("HTTP/1.1 200"));
    let served_since = Instant::now();
    for (tcp, since) in [(&mut silent, silent_since), (&mut served, served_since)] {
        let (_, closed) = read_to_close(tcp, Duration::from_secs(5)).await;
        assert!(closed.is_some(), "the idle connection is closed");
        let took = since.elapsed();
        assert!(took >= Duration::from_millis(250), "closed early: {took:?}");
    }
}

#[tokio::test]
async fn past_max_connections_a_client_waits_for_a_slot() {
    let gw = plain_gateway("max_connections = 2").await;
    let mut held = vec![connect(&gw).await, connect(&gw).await];
    for tcp in &mut held {
        tcp.write_all(HEALTHZ).await.expect("write");
        assert!(read_response(tcp).await.starts_with("HTTP/1.1 200"));
    }
    // The kernel completes the third handshake, but the gateway does not take it yet.
    let mut third = connect(&gw).await;
    third.write_all(HEALTHZ).await.expect("write");
    let (got, closed) = read_to_close(&mut third, Duration::from_millis(500)).await;
    assert!(
        got.is_empty() && closed.is_none(),
        "served past the limit: {got:?}"
    );
    drop(held.pop());
    assert!(read_response(&mut third).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn oversized_heads_are_refused_with_431_and_the_gateway_keeps_serving() {
    let gw = plain_gateway("").await;
    let long = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nx-big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let many = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n{}\r\n",
        (0..200)
            .map(|i| format!("x-h{i}: v\r\n"))
            .collect::<String>()
    );
    for (what, head) in [("a 100 KiB header", long), ("200 headers", many)] {
        let mut tcp = connect(&gw).await;
        // The gateway may close before taking it all: a failed write is part of the answer.
        let _ = tcp.write_all(head.as_bytes()).await;
        let (got, _) = read_to_close(&mut tcp, Duration::from_secs(5)).await;
        assert!(got.starts_with("HTTP/1.1 431"), "{what}: {got:?}");
    }
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn pipelined_garbage_after_a_request_gets_a_400_and_the_gateway_keeps_serving() {
    let gw = plain_gateway("").await;
    let mut tcp = connect(&gw).await;
    let mut bytes = HEALTHZ.to_vec();
    bytes.extend_from_slice(b"\x00\x01\x02 NOT HTTP\r\n\r\n");
    tcp.write_all(&bytes).await.expect("write");
    let (got, closed) = read_to_close(&mut tcp, Duration::from_secs(5)).await;
    assert!(
        closed.is_some(),
        "the connection is closed after the garbage"
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");
    assert!(got.contains("HTTP/1.1 400"), "{got:?}");
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
}

#[tokio::test]
async fn a_client_that_stops_reading_its_stream_is_cut_off_and_the_upstream_cancelled() {
    let up = endless_stream().await;
    let gw = gateway_with(
        "client_write_timeout_ms = 500",
        &openai_channel("a", &format!("http://{}/v1", up.addr), 1, ""),
    )
    .await;
    let mut tcp = connect(&gw).await;
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
            .to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEY}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    // The client reads the first bytes of its stream, then nothing more.
    let mut first = [0u8; 64];
    let n = tcp.read(&mut first).await.expect("read");
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), up.closed)
        .await
        .expect("the upstream call is cancelled")
        .expect("the upstream saw its connection closed");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "cut off early: {took:?}"
    );
    // Backpressure held the upstream back: what it could write is what the sockets buffer,
    // not everything it had (it would have written gigabytes in that time).
    let written = up.written.load(std::sync::atomic::Ordering::Relaxed);
    assert!(written < 64 << 20, "the gateway read {written} bytes ahead");
    drop(tcp);
}

#[tokio::test]
async fn two_thousand_idle_connections_do_not_stop_service() {
    // Each connection is two descriptors in this process (the test's end and the gateway's).
    let limit = rlimit::increase_nofile_limit(u64::MAX).expect("open-file limit");
    assert!(
        limit >= 4_500,
        "this machine allows only {limit} open files"
    );
    let gw = plain_gateway("").await;
    let mut idle = Vec::with_capacity(2_000);
    for _ in 0..2_000 {
        idle.push(connect(&gw).await);
    }
    let start = Instant::now();
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // The first and the last of them were accepted and are served.
    for i in [0, idle.len() - 1] {
        idle[i].write_all(HEALTHZ).await.expect("write");
        assert!(
            read_response(&mut idle[i])
                .await
                .starts_with("HTTP/1.1 200")
        );
    }
}
