//! What counting and trimming cost on a long agent history (release build):
//!
//!   cargo run --release --example context_bench
//!
//! Builds a 200k-token OpenAI chat history (a task, then tool exchanges carrying code, JSON and
//! prose), and reports, as medians over repeated runs:
//! - counting throughput in MB/s of message text, with o200k_base (exact) and the Claude
//!   estimate, against parsing the same body into a request (the gateway does that anyway);
//! - the latency trimming adds for a 128k-window model (count, choose groups, build the cut
//!   request), as milliseconds and as a multiple of that same parse.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard::context::catalog::{Catalog, ModelInfo, NameMatch};
use switchyard::context::count::{CLAUDE, Tokenizer, count_request};
use switchyard::context::fit::{Fitter, Plan};
use switchyard::protocol::openai::request_from_value;

const CODE: &str = r#"fn parse(input: &str) -> Result<Vec<Token>, Error> {
    let mut out = Vec::with_capacity(input.len() / 4);
    for (i, c) in input.char_indices() {
        match c {
            '(' | ')' => out.push(Token::Paren(c == '(')),
            ' ' | '\n' => continue,
            _ if c.is_ascii_digit() => out.push(Token::Digit(c as u8 - b'0')),
            _ => return Err(Error::Unexpected { at: i, found: c }),
        }
    }
    Ok(out)
}
"#;
const JSON: &str = r#"{"path": "src/parser.rs", "matches": [{"line": 42, "text": "let mut out = Vec::new();"}, {"line": 97, "text": "return Err(Error::Eof);"}], "truncated": false}"#;
const PROSE: &str = "The parser reads the input once, left to right, and keeps no state between \
tokens except the position; errors carry that position so the caller can point at it. ";

/// Text that does not repeat: the fixed snippets with every word run through a seeded
/// shuffle of suffixes, so no tokenizer cache sees the same piece twice in a row.
fn varied(rng: &mut fastrand::Rng, base: &str) -> String {
    base.split(' ')
        .map(|w| match rng.u8(0..4) {
            0 => format!("{w}{}", rng.u16(..)),
            1 => format!(
                "{w}_{}",
                ["id", "pos", "len", "buf", "err"][rng.usize(0..5)]
            ),
            _ => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A task, then `steps` exchanges: an assistant call with its result, and a short comment.
fn history(steps: usize) -> Value {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut messages = vec![
        json!({"role": "system", "content": "You are a careful coding agent. Use the tools."}),
        json!({"role": "user", "content": "Refactor the parser so that errors carry positions."}),
    ];
    for i in 0..steps {
        messages.push(json!({"role": "assistant", "content": varied(&mut rng, PROSE), "tool_calls": [
            {"id": format!("call_{i}"), "type": "function",
             "function": {"name": "read_file", "arguments": format!("{{\"path\": \"src/f{i}.rs\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"),
            "content": varied(&mut rng, &format!("{CODE}{JSON}{PROSE}"))}));
    }
    json!({"model": "agent", "max_tokens": 4096, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]})
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let _ = f();
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let body = history(425);
    let bytes = serde_json::to_vec(&body).expect("serialises");
    let req = request_from_value(body).expect("valid request");
    let text_bytes: usize = req
        .messages
        .iter()
        .map(|m| m.content.as_ref().map_or(0, |c| c.text_len()))
        .sum();
    let exact = Tokenizer::for_model("gpt-4o");
    let tokens = count_request(&req, exact).total();
    println!(
        "history: {} messages, {:.2} MB of JSON, {:.2} MB of text, {tokens} tokens (o200k_base)",
        req.messages.len(),
        bytes.len() as f64 / 1e6,
        text_bytes as f64 / 1e6
    );

    let runs = 15;
    let parse = time(runs, || {
        request_from_value(serde_json::from_slice(&bytes).expect("json")).expect("valid")
    });
    let count_exact = time(runs, || count_request(&req, exact));
    let count_claude = time(runs, || count_request(&req, Tokenizer::Estimate(CLAUDE)));
    let mbps = |d: Duration| text_bytes as f64 / 1e6 / d.as_secs_f64();
    println!(
        "parse body (baseline): {:>8.2} ms  {:>7.1} MB/s of text",
        parse.as_secs_f64() * 1e3,
        mbps(parse)
    );
    for (name, d) in [
        ("o200k_base", count_exact),
        ("claude estimate", count_claude),
    ] {
        println!(
            "count, {name:<16} {:>8.2} ms  {:>7.1} MB/s  = {:.2}x the parse",
            d.as_secs_f64() * 1e3,
            mbps(d),
            d.as_secs_f64() / parse.as_secs_f64()
        );
    }

    let mut catalog = Catalog::builtin();
    let mut info = ModelInfo::new("agent", 128_000, 16_384);
    info.trim = true;
    catalog.push(NameMatch::Exact, info);
    let mut kept = 0;
    let trim = time(runs, || {
        let mut f = Fitter::new(&req, &catalog, None).expect("trimming is on");
        if let Plan::Fit {
            request: Some(r), ..
        } = f.plan("agent")
        {
            kept = r.messages.len();
        }
    });
    println!(
        "trim to a 128k window: {:>8.2} ms  = {:.2}x the parse ({} of {} messages kept)",
        trim.as_secs_f64() * 1e3,
        trim.as_secs_f64() / parse.as_secs_f64(),
        kept,
        req.messages.len()
    );
}
