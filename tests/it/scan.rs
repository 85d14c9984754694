//! The borrowed scans that let same-protocol answers and events pass as they came must agree
//! with the full readers on everything the gateway reads from them, or decline (`None`).

use switchyard::protocol::openai::{chunk_from_str, response_from_value, scan_answer, scan_chunk};

/// Chunks of many shapes: each scanned one must say what the full reader says.
const CHUNKS: &[&str] = &[
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#,
    r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
    r#"{"choices":[{"delta":{"content":"é\n\"q\""},"index":3}]}"#,
    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":""}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"audio":{"data":"AA"}}}]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.1}]}}]}"#,
    r#"{"error":{"message":"overloaded"}}"#,
    r#"{"id":7,"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
    r#"{"choices":[{"index":"zero","delta":{"content":"x"}}]}"#,
    r#"{"choices":[{"index":0,"delta":null,"finish_reason":"length"}],"x_vendor":[1,{"a":null}]}"#,
    r#"{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":5},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1.5,"completion_tokens":2}}"#,
];

/// A usage's counts, as the gateway reads them.
type Counts = (
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
);

fn counts(usage: &Option<switchyard::protocol::Usage>) -> Option<Counts> {
    usage.as_ref().map(|u| {
        (
            u.input_tokens,
            u.output_tokens,
            u.total_tokens,
            u.cached_tokens,
            u.reasoning_tokens,
        )
    })
}

#[test]
fn a_scanned_chunk_says_what_the_full_reader_says() {
    let mut scanned = 0;
    for data in CHUNKS {
        let full = chunk_from_str(data);
        let Some(s) = scan_chunk(data, true) else {
            continue;
        };
        scanned += 1;
        let full = full
            .unwrap_or_else(|e| panic!("scanned what the full reader refuses: {data}: {e:?}"))
            .unwrap_or_else(|| panic!("scanned an error event: {data}"));
        assert_eq!(s.has_content(), full.has_content(), "{data}");
        assert_eq!(s.has_finish(), full.has_finish(), "{data}");
        // The counts the gateway reads (the details stay in the event's bytes).
        assert_eq!(counts(&s.usage), counts(&full.usage), "{data}");
        assert_eq!((&s.id, &s.model), (&full.id, &full.model), "{data}");
        let facts = |c: &switchyard::protocol::StreamChunk| {
            c.choices
                .iter()
                .map(|ch| (ch.index, ch.finish_reason.clone(), ch.delta.content.clone()))
                .collect::<Vec<_>>()
        };
        let text = |c: Option<String>| c.filter(|t| !t.is_empty());
        let (a, b) = (facts(&s), facts(&full));
        assert_eq!(a.len(), b.len(), "{data}");
        for (x, y) in a.into_iter().zip(b) {
            assert_eq!((x.0, x.1, text(x.2)), (y.0, y.1, text(y.2)), "{data}");
        }
    }
    // The common shapes are scanned, not all declined.
    assert!(scanned >= 6, "only {scanned} scanned");
    // What the scan must decline: errors, tool calls, refusals, other output, bad types.
    for declined in [6, 7, 8, 11, 12, 13, 16] {
        assert!(
            scan_chunk(CHUNKS[declined], true).is_none(),
            "{}",
            CHUNKS[declined]
        );
    }
    // Only the first chunk's id and model are kept.
    let later = scan_chunk(CHUNKS[1], false).unwrap();
    assert_eq!((later.id, later.model), (None, None));
}

#[test]
fn a_scanned_answer_says_what_the_full_reader_says() {
    let answers = [
        r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":0}}}"#,
        r#"{"choices":[{"message":{"content":null,"reasoning_content":"hm"},"finish_reason":"length"},{"index":1,"message":{"role":"assistant","content":"b"}}]}"#,
    ];
    for data in answers {
        let s = scan_answer(data.as_bytes()).expect("scanned");
        let full = response_from_value(serde_json::from_str(data).unwrap()).unwrap();
        assert_eq!(
            (&s.id, &s.model, s.created),
            (&full.id, &full.model, full.created)
        );
        let facts = |r: &switchyard::protocol::ChatResponse| {
            r.choices
                .iter()
                .map(|c| {
                    let text = c.message.content.as_ref().map(|t| t.text());
                    (
                        c.index,
                        c.finish_reason.clone(),
                        text,
                        c.message.reasoning.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(facts(&s), facts(&full), "{data}");

        assert_eq!(counts(&s.usage), counts(&full.usage), "{data}");
    }
    // Tool calls, content parts and what is not a chat completion are read whole.
    for declined in [
        r#"{"choices":[{"message":{"role":"assistant","tool_calls":[]}}]}"#,
        r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}"#,
        r#"{"choices":"nope"}"#,
        r#"{"object":"error"}"#,
    ] {
        assert!(scan_answer(declined.as_bytes()).is_none(), "{declined}");
    }
}
