//! Property tests of translation (proptest), over generated conversations and answers:
//!
//! - a request with a system prompt, text, images, tool calls and their results, written for an
//!   upstream of each protocol and read back as that protocol's client request, says the same
//!   (every field both protocols express: roles, text, images, calls with their arguments, which
//!   call each result answers, the tools offered);
//! - an answer with text, reasoning, tool calls, a finish reason and usage, written in each
//!   protocol's answer and read back as that protocol's upstream answer, says the same;
//! - the same answer streamed (in pieces of generated sizes), written by the gateway's encoder
//!   for each client protocol and decoded by the upstream decoder of that protocol, reassembles
//!   to what the whole answer says.

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::fuzz::{Facts, encode};
use crate::protocol::{
    ChatRequest, ChatResponse, Content, Part, Protocol, Role, StreamChunk, Tool, ToolCall,
    anthropic, gemini, openai, responses,
};
use crate::provider::decode_stream;

// ---- generated inputs ----

/// Text every protocol keeps as sent: not empty, not only spaces, no spaces at either end.
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9é][a-zA-Z0-9é ,.!?]{0,24}[a-zA-Z0-9.!?]"
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z_]{0,10}"
}

/// Tool-call arguments: a JSON object (what Gemini's `args` can hold).
fn args() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        any::<i32>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    proptest::collection::btree_map("[a-z]{1,6}", scalar, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// An inline image, as a data URL.
fn image() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("image/png"), Just("image/jpeg")],
        proptest::collection::vec(any::<u8>(), 1..24),
    )
        .prop_map(|(mime, bytes)| {
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            format!("data:{mime};base64,{b64}")
        })
}

#[derive(Debug, Clone)]
enum UserPart {
    Text(String),
    Image(String),
}

#[derive(Debug, Clone)]
struct AssistantTurn {
    text: Option<String>,
    calls: Vec<(String, Value)>,
    /// One result text per call.
    results: Vec<String>,
}

#[derive(Debug, Clone)]
struct Conversation {
    system: Option<String>,
    turns: Vec<(Vec<UserPart>, Option<AssistantTurn>)>,
    last: String,
}

fn user_parts() -> impl Strategy<Value = Vec<UserPart>> {
    let part = prop_oneof![
        3 => text().prop_map(UserPart::Text),
        1 => image().prop_map(UserPart::Image),
    ];
    proptest::collection::vec(part, 1..4)
}

fn assistant() -> impl Strategy<Value = AssistantTurn> {
    (
        proptest::option::of(text()),
        proptest::collection::vec((name(), args(), text()), 0..3),
    )
        .prop_filter("an assistant turn says something", |(t, c)| {
            t.is_some() || !c.is_empty()
        })
        .prop_map(|(text, calls)| AssistantTurn {
            text,
            results: calls.iter().map(|c| c.2.clone()).collect(),
            calls: calls.into_iter().map(|(n, a, _)| (n, a)).collect(),
        })
}

fn conversation() -> impl Strategy<Value = Conversation> {
    (
        proptest::option::of(text()),
        proptest::collection::vec((user_parts(), proptest::option::of(assistant())), 1..4),
        text(),
    )
        .prop_map(|(system, turns, last)| Conversation {
            system,
            turns,
            last,
        })
}

impl Conversation {
    /// The conversation as a Chat Completions body, the canonical form's own shape.
    fn body(&self) -> Value {
        let mut msgs = Vec::new();
        let mut tools: Vec<String> = Vec::new();
        if let Some(s) = &self.system {
            msgs.push(json!({"role": "system", "content": s}));
        }
        let mut call_no = 0;
        for (parts, reply) in &self.turns {
            msgs.push(json!({"role": "user", "content": user_content(parts)}));
            let Some(a) = reply else {
                continue;
            };
            let mut m = json!({"role": "assistant", "content": a.text});
            let mut results = Vec::new();
            let calls: Vec<Value> = a
                .calls
                .iter()
                .zip(&a.results)
                .map(|((name, args), result)| {
                    call_no += 1;
                    let id = format!("call_{call_no}");
                    if !tools.contains(name) {
                        tools.push(name.clone());
                    }
                    results.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
                    json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            if !calls.is_empty() {
                m["tool_calls"] = Value::Array(calls);
            }
            msgs.push(m);
            msgs.extend(results);
        }
        msgs.push(json!({"role": "user", "content": self.last}));
        let mut body = json!({"model": "m", "max_tokens": 256, "messages": msgs});
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|n| {
                    json!({"type": "function", "function": {"name": n,
                    "parameters": {"type": "object", "properties": {}}}})
                })
                .collect();
        }
        body
    }
}

fn user_content(parts: &[UserPart]) -> Value {
    if let [UserPart::Text(t)] = parts {
        return json!(t);
    }
    parts
        .iter()
        .map(|p| match p {
            UserPart::Text(t) => json!({"type": "text", "text": t}),
            UserPart::Image(url) => json!({"type": "image_url", "image_url": {"url": url}}),
        })
        .collect()
}

// ---- what a request says ----

/// One thing a conversation says, in order.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    User(String),
    Image(String),
    Assistant(String),
    /// A tool call: its name and arguments.
    Call(String, Value),
    /// A tool's result: the name of the call it answers, and its text.
    Result(String, String),
}

#[derive(Debug, PartialEq)]
struct Conv {
    system: String,
    said: Vec<Said>,
    tools: Vec<String>,
}

fn conv(req: &ChatRequest) -> Conv {
    let call_names: Vec<(String, String)> = req
        .messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .filter_map(|c| match c {
            ToolCall::Function { id, name, .. } => Some((id.clone()?, name.clone())),
            ToolCall::Other(_) => None,
        })
        .collect();
    let mut c = Conv {
        system: String::new(),
        said: Vec::new(),
        tools: req
            .tools
            .iter()
            .filter_map(|t| match t {
                Tool::Function { name, .. } => Some(name.clone()),
                Tool::Other(_) => None,
            })
            .collect(),
    };
    for m in &req.messages {
        match m.role {
            Role::System | Role::Developer => {
                c.system
                    .push_str(&m.content.as_ref().map(Content::text).unwrap_or_default());
            }
            Role::User => match &m.content {
                Some(Content::Text(t)) => c.said.push(Said::User(t.clone())),
                Some(Content::Parts(ps)) => c.said.extend(ps.iter().filter_map(|p| match p {
                    Part::Text { text, .. } => Some(Said::User(text.clone())),
                    Part::Image { url, .. } => Some(Said::Image(url.clone())),
                    Part::Other(_) => None,
                })),
                None => {}
            },
            Role::Assistant => {
                if let Some(t) = m
                    .content
                    .as_ref()
                    .map(Content::text)
                    .filter(|t| !t.is_empty())
                {
                    c.said.push(Said::Assistant(t));
                }
                for call in &m.tool_calls {
                    if let ToolCall::Function {
                        name, arguments, ..
                    } = call
                    {
                        let args = arguments.as_deref().unwrap_or("{}");
                        let args = serde_json::from_str(args).unwrap_or(Value::Null);
                        c.said.push(Said::Call(name.clone(), args));
                    }
                }
            }
            Role::Tool => {
                let answered = m.tool_call_id.as_ref().and_then(|id| {
                    call_names
                        .iter()
                        .find(|(i, _)| i == id)
                        .map(|(_, n)| n.clone())
                });
                let name = answered.or_else(|| m.name.clone()).unwrap_or_default();
                let text = m.content.as_ref().map(Content::text).unwrap_or_default();
                c.said.push(Said::Result(name, text));
            }
            Role::Other(_) => {}
        }
    }
    c
}

/// The request written for an upstream of `p`, then read as a client of `p` would send it.
fn through(p: Protocol, req: &ChatRequest) -> ChatRequest {
    let read = match p {
        Protocol::OpenAiChat => {
            let body = serde_json::to_value(openai::RequestBody {
                req,
                model: "m",
                force_usage: false,
            })
            .unwrap_or_default();
            openai::request_from_value(body)
        }
        Protocol::AnthropicMessages => {
            anthropic::request_from_value(anthropic::request_to_value(req, "m"))
        }
        Protocol::Gemini => gemini::request_from_value(gemini::request_to_value(req), "m", false),
        Protocol::OpenAiResponses => unreachable!("the Responses API is not an upstream kind"),
    };
    match read {
        Ok(r) => r,
        Err(e) => panic!("{p:?} refused what the gateway wrote for it: {e:?}"),
    }
}

// ---- what an answer says ----

#[derive(Debug, Clone)]
struct AnswerSpec {
    text: Option<String>,
    reasoning: Option<String>,
    calls: Vec<(String, Value)>,
    /// `length` instead of `stop` (an answer with calls ends with them).
    cut: bool,
    usage: (u64, u64),
    /// How many characters each streamed piece carries.
    piece: usize,
}

fn answer() -> impl Strategy<Value = AnswerSpec> {
    (
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::collection::vec((name(), args()), 0..3),
        any::<bool>(),
        (1u64..5000, 1u64..5000),
        1usize..9,
    )
        .prop_filter("an answer says something", |(t, _, c, ..)| {
            t.is_some() || !c.is_empty()
        })
        .prop_map(|(text, reasoning, calls, cut, usage, piece)| AnswerSpec {
            text,
            reasoning,
            calls,
            cut,
            usage,
            piece,
        })
}

impl AnswerSpec {
    fn finish(&self) -> &'static str {
        if !self.calls.is_empty() {
            "tool_calls"
        } else if self.cut {
            "length"
        } else {
            "stop"
        }
    }

    fn call_id(i: usize) -> String {
        format!("call_{i}")
    }

    /// The whole answer, as a Chat Completions upstream sends it.
    fn response(&self) -> ChatResponse {
        let mut msg = json!({"role": "assistant", "content": self.text});
        if let Some(r) = &self.reasoning {
            msg["reasoning_content"] = json!(r);
        }
        if !self.calls.is_empty() {
            msg["tool_calls"] = self
                .calls
                .iter()
                .enumerate()
                .map(|(i, (n, a))| {
                    json!({"id": Self::call_id(i), "type": "function",
                    "function": {"name": n, "arguments": a.to_string()}})
                })
                .collect();
        }
        let (i, o) = self.usage;
        let v = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
            "model": "m", "choices": [{"index": 0, "message": msg,
            "finish_reason": self.finish()}],
            "usage": {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}});
        match openai::response_from_value(v) {
            Ok(r) => r,
            Err(e) => panic!("a generated answer is read: {e:?}"),
        }
    }

    /// The same answer as Chat Completions stream chunks, strings cut into pieces.
    fn chunks(&self) -> Vec<StreamChunk> {
        let mut deltas = vec![json!({"role": "assistant"})];
        let pieces = |s: &str| -> Vec<String> {
            let cs: Vec<char> = s.chars().collect();
            cs.chunks(self.piece).map(|c| c.iter().collect()).collect()
        };
        for r in self.reasoning.iter().flat_map(|r| pieces(r)) {
            deltas.push(json!({"reasoning_content": r}));
        }
        for t in self.text.iter().flat_map(|t| pieces(t)) {
            deltas.push(json!({"content": t}));
        }
        for (i, (n, a)) in self.calls.iter().enumerate() {
            deltas.push(json!({"tool_calls": [{"index": i, "id": Self::call_id(i),
                "type": "function", "function": {"name": n, "arguments": ""}}]}));
            for p in pieces(&a.to_string()) {
                deltas.push(json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}));
            }
        }
        let mut events: Vec<Value> = deltas
            .into_iter()
            .map(|d| json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]}))
            .collect();
        events.push(json!({"choices": [{"index": 0, "delta": {},
            "finish_reason": self.finish()}]}));
        let (i, o) = self.usage;
        events.push(json!({"choices": [], "usage": {"prompt_tokens": i,
            "completion_tokens": o, "total_tokens": i + o}}));
        events
            .into_iter()
            .map(|mut e| {
                e["id"] = json!("chatcmpl-1");
                e["object"] = json!("chat.completion.chunk");
                e["model"] = json!("m");
                match openai::chunk_from_value(e) {
                    Ok(c) => c,
                    Err(err) => panic!("a generated chunk is read: {err:?}"),
                }
            })
            .collect()
    }
}

/// What an answer says: text, reasoning, calls (name, arguments as JSON), finish, usage.
#[derive(Debug, PartialEq)]
struct Answer {
    text: String,
    reasoning: String,
    calls: Vec<(String, Value)>,
    finish: String,
    usage: (Option<u64>, Option<u64>),
}

fn parsed(args: &str) -> Value {
    serde_json::from_str(if args.is_empty() { "{}" } else { args }).unwrap_or(Value::Null)
}

fn said_by(resp: &ChatResponse) -> Answer {
    let choice = resp.choices.first();
    let msg = choice.map(|c| &c.message);
    let calls = msg
        .map(|m| &m.tool_calls[..])
        .unwrap_or_default()
        .iter()
        .filter_map(|c| match c {
            ToolCall::Function {
                name, arguments, ..
            } => Some((name.clone(), parsed(arguments.as_deref().unwrap_or("")))),
            ToolCall::Other(_) => None,
        })
        .collect();
    Answer {
        text: msg
            .and_then(|m| m.content.as_ref())
            .map(Content::text)
            .unwrap_or_default(),
        reasoning: msg.and_then(|m| m.reasoning.clone()).unwrap_or_default(),
        calls,
        finish: choice
            .and_then(|c| c.finish_reason.clone())
            .unwrap_or_default(),
        usage: resp
            .usage
            .as_ref()
            .map_or((None, None), |u| (u.input_tokens, u.output_tokens)),
    }
}

fn said_in(f: &Facts) -> Answer {
    Answer {
        text: f.text.get(&0).cloned().unwrap_or_default(),
        reasoning: f.reasoning.get(&0).cloned().unwrap_or_default(),
        calls: f
            .calls
            .iter()
            .filter(|((choice, _), _)| *choice == 0)
            .map(|(_, (n, a))| (n.clone(), parsed(a)))
            .collect(),
        finish: f.finish.get(&0).cloned().unwrap_or_default(),
        usage: f.usage.unwrap_or((None, None)),
    }
}

fn echo() -> responses::Echo {
    match responses::request_from_value(json!({"model": "m", "input": "hi"})) {
        Ok((_, echo)) => echo,
        Err(e) => panic!("a minimal Responses request is read: {e:?}"),
    }
}

/// The answer written as `p`'s answer to a client, then read as `p`'s upstream answer.
fn answered_through(p: Protocol, resp: &ChatResponse) -> ChatResponse {
    let read = match p {
        Protocol::OpenAiChat => {
            let body = openai::ResponseBody { resp, report: None };
            openai::response_from_value(serde_json::to_value(body).unwrap_or_default())
        }
        Protocol::AnthropicMessages => {
            anthropic::response_from_value(&anthropic::response_to_value(resp, "m"))
        }
        Protocol::Gemini => gemini::response_from_value(&gemini::response_to_value(resp, "m")),
        Protocol::OpenAiResponses => {
            responses::response_from_value(responses::response_to_value(resp, &echo(), "m"))
        }
    };
    match read {
        Ok(r) => r,
        Err(e) => panic!("{p:?} could not read the answer the gateway wrote: {e:?}"),
    }
}

const UPSTREAMS: [Protocol; 3] = [
    Protocol::OpenAiChat,
    Protocol::AnthropicMessages,
    Protocol::Gemini,
];
const CLIENTS: [Protocol; 4] = [
    Protocol::OpenAiChat,
    Protocol::AnthropicMessages,
    Protocol::Gemini,
    Protocol::OpenAiResponses,
];

proptest! {
    // 256 cases each (proptest's default); `PROPTEST_CASES=n` for more.
    #[test]
    fn a_request_says_the_same_through_every_upstream_protocol(c in conversation()) {
        let req = match openai::request_from_value(c.body()) {
            Ok(r) => r,
            Err(e) => panic!("a generated request is read: {e:?}"),
        };
        let want = conv(&req);
        for p in UPSTREAMS {
            let got = conv(&through(p, &req));
            prop_assert_eq!(&got, &want, "through {:?}", p);
        }
    }

    #[test]
    fn an_answer_says_the_same_in_every_protocol(a in answer()) {
        let resp = a.response();
        let want = said_by(&resp);
        for p in CLIENTS {
            let got = said_by(&answered_through(p, &resp));
            prop_assert_eq!(&got, &want, "through {:?}", p);
        }
    }

    #[test]
    fn a_streamed_answer_reassembles_to_the_whole_one_in_every_protocol(a in answer()) {
        let want = said_by(&a.response());
        let chunks = a.chunks().into_iter().map(Box::new).collect::<Vec<_>>();
        for p in CLIENTS {
            let bytes = encode(p, &chunks);
            let decoded: Vec<Box<StreamChunk>> = decode_stream(p, false, &[&bytes])
                .into_iter()
                .map_while(Result::ok)
                .collect();
            let got = said_in(&Facts::of(&decoded));
            prop_assert_eq!(&got, &want, "through {:?}: {}", p, String::from_utf8_lossy(&bytes));
        }
    }
}
