//! The SSE frame parser the upstream decoders read through: the grammar's cases, each fed
//! whole, byte by byte, and split at every boundary, must give the same events.

use switchyard::provider::{Frame, Frames, NotUtf8};

fn frame(name: Option<&str>, data: &str) -> Frame {
    Frame {
        name: name.map(str::to_string),
        data: data.to_string(),
    }
}

/// Every event in `parts`, fed in order, then the end of the bytes.
fn parse(parts: &[&[u8]]) -> Result<Vec<Frame>, NotUtf8> {
    let mut f = Frames::default();
    let mut out = Vec::new();
    for p in parts {
        f.push(p);
        while let Some(ev) = f.next(false)? {
            out.push(ev);
        }
    }
    while let Some(ev) = f.next(true)? {
        out.push(ev);
    }
    Ok(out)
}

/// The same result whole, byte by byte, and split in two at every boundary.
fn parse_every_way(input: &[u8]) -> Result<Vec<Frame>, NotUtf8> {
    let whole = parse(&[input]);
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(parse(&bytes), whole, "byte by byte: {input:?}");
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        assert_eq!(parse(&[a, b]), whole, "split at {i}: {input:?}");
    }
    whole
}

#[test]
fn the_grammar_cut_every_way() {
    let cases: Vec<(&str, &[u8], Vec<Frame>)> =
        vec![
        ("one unnamed event", b"data: {\"a\":1}\n\n", vec![frame(None, "{\"a\":1}")]),
        (
            "named events",
            b"event: ping\ndata: {}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            vec![
                frame(Some("ping"), "{}"),
                frame(Some("message_stop"), "{\"type\":\"message_stop\"}"),
            ],
        ),
        (
            "`message` is the default name",
            b"event: message\ndata: x\n\n",
            vec![frame(None, "x")],
        ),
        (
            "CRLF and CR line ends",
            b"data: a\r\n\r\ndata: b\r\rdata: c\n\n",
            vec![frame(None, "a"), frame(None, "b"), frame(None, "c")],
        ),
        (
            "data lines join with LF; no space after the colon is fine; one space is dropped",
            b"data:first\ndata:  second\n\n",
            vec![frame(None, "first\n second")],
        ),
        (
            "comments, id, retry and unknown fields are dropped; a field with no colon is empty",
            b": keep-alive\nid: 7\nretry: 10\nfoo: bar\ndata\n\n",
            vec![frame(None, "")],
        ),
        (
            "an event with no data is no event, and its name does not leak into the next",
            b"event: ping\n\ndata: after\n\n",
            vec![frame(None, "after")],
        ),
        (
            "a byte-order mark at the start is dropped",
            b"\xEF\xBB\xBFdata: x\n\n",
            vec![frame(None, "x")],
        ),
        (
            "an unfinished event at the end is dropped",
            b"data: whole\n\ndata: half",
            vec![frame(None, "whole")],
        ),
        (
            "an unfinished event ended by a line but no blank line is dropped too",
            b"data: whole\n\ndata: [DONE]\n",
            vec![frame(None, "whole")],
        ),
        (
            "multi-byte characters, wherever the bytes split",
            "data: 日本語 é\n\n".as_bytes(),
            vec![frame(None, "日本語 é")],
        ),
        ("nothing at all", b"", vec![]),
    ];
    for (what, input, want) in cases {
        assert_eq!(parse_every_way(input), Ok(want), "{what}");
    }
}

#[test]
fn bytes_that_are_not_utf8_are_an_error_not_a_panic() {
    assert_eq!(parse_every_way(b"data: \xFF\xFE\n\n"), Err(NotUtf8));
}

#[test]
fn a_cr_at_the_end_of_what_came_so_far_waits_for_a_possible_lf() {
    let mut f = Frames::default();
    f.push(b"data: a\r\r");
    // The second CR could be the first half of a CRLF ending a blank line; either way the
    // event ends with it, but only the next byte says whether an LF is part of it.
    assert_eq!(f.next(false), Ok(None));
    f.push(b"\n");
    assert_eq!(f.next(false), Ok(Some(frame(None, "a"))));
    f.push(b"data: b\n\n");
    assert_eq!(f.next(false), Ok(Some(frame(None, "b"))));
}
