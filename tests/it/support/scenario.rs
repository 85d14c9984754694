//! Failover scenarios as table rows. A [`Scenario`] is channels in front of fresh upstreams
//! (mock servers with a spec, or nothing listening), requests sent in turn with what each must
//! give (status, serving channel, the attempts' reasons, error code, headers, time taken), and
//! how many calls each upstream got in the end. [`scenarios`] runs a table of them, all at once,
//! and reports every row that failed.

use std::ops::Range;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use serde_json::Value;
use switchyard::provider::mock::{MockServer, MockSpec, Received};

use super::gateway::{Gateway, KEY, UPSTREAM_KEY, chat_body, gateway_with, reasons};
use super::mock::{eventually, mock, refused_url};

/// One channel of a scenario: an `openai` channel serving models `m` and `e`.
pub struct Ch {
    pub name: &'static str,
    pub priority: u32,
    pub up: Up,
    /// More channel lines (`max_retries = 2`, `timeout_ms = 300`).
    pub extra: &'static str,
    pub keys: Keys,
}

/// What a channel's base URL points at.
pub enum Up {
    /// A mock server started for the row with this spec.
    Mock(Box<MockSpec>),
    /// Nothing listening: every attempt is refused.
    Refused,
}

/// How a channel authenticates to its upstream.
pub enum Keys {
    /// `api_keys = [UPSTREAM_KEY]`, as every test channel.
    Upstream,
    /// None at all (an Ollama-style upstream): a cooldown is the channel's own, not a key's.
    Keyless,
    /// A credential pool: the inside of `credentials = [...]`.
    Pool(&'static str),
}

/// A channel `name` at `priority` in front of a mock with `spec`, with [`Keys::Upstream`].
pub fn ch(name: &'static str, priority: u32, spec: MockSpec) -> Ch {
    Ch {
        name,
        priority,
        up: Up::Mock(Box::new(spec)),
        extra: "",
        keys: Keys::Upstream,
    }
}

/// A channel `name` at `priority` whose base URL refuses connections.
pub fn refused(name: &'static str, priority: u32) -> Ch {
    Ch {
        up: Up::Refused,
        ..ch(name, priority, MockSpec::default())
    }
}

impl Ch {
    /// With more channel lines.
    pub fn with(self, extra: &'static str) -> Ch {
        Ch { extra, ..self }
    }

    /// With these upstream credentials.
    pub fn keys(self, keys: Keys) -> Ch {
        Ch { keys, ..self }
    }

    fn toml(&self, base_url: &str) -> String {
        let keys = match self.keys {
            Keys::Upstream => format!("api_keys = [\"{UPSTREAM_KEY}\"]\n"),
            Keys::Keyless => String::new(),
            Keys::Pool(creds) => format!("credentials = [{creds}]\n"),
        };
        format!(
            "[[channels]]\nname = \"{}\"\nprovider = \"openai\"\nbase_url = \"{base_url}\"\n\
             {keys}models = [\"m\", \"e\"]\npriority = {}\n{}\n\n",
            self.name, self.priority, self.extra
        )
    }
}

/// One thing a scenario does, in order.
pub enum Step {
    /// Sends a request; the answer must be as expected.
    Send(Expect),
    /// Moves the gateway's clock on (cooldowns, rate buckets).
    Advance(Duration),
}

/// A request and what its answer must be. Every field is checked: an empty `reasons` means
/// the answer lists no attempts (a single attempt that succeeded, an upstream's own error).
#[derive(Default)]
pub struct Expect {
    /// `POST path` with this JSON body; `None`: `chat_body(false)` to `/v1/chat/completions`.
    pub request: Option<(&'static str, Value)>,
    pub status: u16,
    /// `x-switchyard-channel`, if the answer must name the channel that served it.
    pub served: Option<&'static str>,
    /// The `reason` of every attempt, as the failover report (a success) or the error envelope
    /// (anything else) lists them.
    pub reasons: &'static [&'static str],
    /// `error.code`. Every non-2xx answer must be an OpenAI error envelope, coded or not.
    pub code: Option<&'static str>,
    /// Headers with the value they must have; `""` for one that must be absent.
    pub headers: &'static [(&'static str, &'static str)],
    /// How long the request must take.
    pub took: Option<Range<Duration>>,
}

/// How many calls the upstreams received for the row's requests once every step is done
/// (see [`Ran::calls`]).
#[derive(Default)]
pub enum Calls {
    #[default]
    Unchecked,
    /// Per channel, in the order of `channels` (a refused channel's is 0).
    Each(&'static [u64]),
    /// All channels together (which ones is up to the weights).
    Total(u64),
}

/// A table row: a gateway in front of these channels, the steps, and what they must leave.
#[derive(Default)]
pub struct Scenario {
    /// Names the row in failure messages: the name of the test it was.
    pub name: &'static str,
    /// `[server]` lines (`max_attempts = 3`, `request_timeout_ms = 500`).
    pub server: &'static str,
    pub channels: Vec<Ch>,
    pub steps: Vec<Step>,
    pub calls: Calls,
    /// Channels whose upstream must see its call go away (a cancelled attempt).
    pub cancelled: &'static [&'static str],
    /// Further checks on what happened, after all the others.
    pub check: Option<fn(&Ran)>,
}

/// One answer a scenario got.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    /// The body as JSON (`Null` if it is not: a stream).
    pub body: Value,
    pub took: Duration,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The attempts the answer lists: the failover report's, or the error envelope's.
    pub fn attempts(&self) -> &Value {
        if (200..300).contains(&self.status) {
            &self.body["switchyard"]["failover"]["attempts"]
        } else {
            &self.body["error"]["attempts"]
        }
    }
}

/// What a scenario left, for its `check`: upstreams, answers, and the health view at the end.
pub struct Ran {
    pub name: &'static str,
    /// Up until the checks are done: dropped, it would cancel what it still runs.
    _gw: Gateway,
    ups: Vec<(&'static str, Option<MockServer>)>,
    /// One per [`Step::Send`], in order.
    pub answers: Vec<Answer>,
    /// `/admin/health` rows once every step is done.
    pub health: Vec<Value>,
}

impl Ran {
    /// The mock behind `channel`.
    pub fn up(&self, channel: &str) -> &MockServer {
        self.ups
            .iter()
            .find(|(n, _)| *n == channel)
            .and_then(|(_, m)| m.as_ref())
            .unwrap_or_else(|| panic!("{}: no mock behind channel {channel}", self.name))
    }

    /// Calls each upstream got for the row's requests, in channel order. What the gateway's
    /// background prober sends a doubtful channel meanwhile (a one-token `ping`, or
    /// `GET /models`) is not one of them.
    pub fn calls(&self) -> Vec<u64> {
        let for_client = |r: &Received| {
            let probe = r.path.ends_with("/models")
                || (r.body["max_tokens"] == 1 && r.body["messages"][0]["content"] == "ping");
            !probe
        };
        self.ups
            .iter()
            .map(|(_, m)| {
                m.as_ref().map_or(0, |m| {
                    m.received().iter().filter(|r| for_client(r)).count() as u64
                })
            })
            .collect()
    }
}

impl Scenario {
    /// Runs the row, asserting everything it expects.
    async fn run(self) {
        let name = self.name;
        let mut ups = Vec::new();
        let mut channels = String::new();
        for c in &self.channels {
            let (url, up) = match &c.up {
                Up::Mock(spec) => {
                    let m = mock(MockSpec::clone(spec)).await;
                    (m.base_url(), Some(m))
                }
                Up::Refused => (refused_url().await, None),
            };
            channels.push_str(&c.toml(&url));
            ups.push((c.name, up));
        }
        let gw = gateway_with(self.server, &channels).await;
        let mut answers = Vec::new();
        for (i, step) in self.steps.into_iter().enumerate() {
            match step {
                Step::Advance(d) => gw.clock.advance(d),
                Step::Send(want) => {
                    answers.push(send(&gw, &format!("{name}, step {i}"), want).await)
                }
            }
        }
        let ran = Ran {
            name,
            health: gw.admin_health().await,
            _gw: gw,
            ups,
            answers,
        };
        match self.calls {
            Calls::Unchecked => {}
            Calls::Each(want) => assert_eq!(ran.calls(), want, "{name}: calls per upstream"),
            Calls::Total(want) => {
                assert_eq!(
                    ran.calls().iter().sum::<u64>(),
                    want,
                    "{name}: calls in all"
                )
            }
        }
        for channel in self.cancelled {
            let what = format!("{name}: {channel}'s call cancelled");
            eventually(ran.up(channel), &what, |m| m.aborted() >= 1).await;
        }
        if let Some(check) = self.check {
            check(&ran);
        }
    }
}

async fn send(gw: &Gateway, at: &str, want: Expect) -> Answer {
    let (path, body) = want
        .request
        .unwrap_or_else(|| ("/v1/chat/completions", chat_body(false)));
    let t0 = Instant::now();
    let resp = gw.post_as(path, KEY, &[], body).await;
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let text = resp.text().await.expect("the answer's body");
    let a = Answer {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        took: t0.elapsed(),
    };
    assert_eq!(a.status, want.status, "{at}: status; body {text}");
    if let Some(ch) = want.served {
        assert_eq!(a.header("x-switchyard-channel"), ch, "{at}: served by");
    }
    assert_eq!(
        reasons(a.attempts()),
        want.reasons,
        "{at}: reasons; body {text}"
    );
    if !(200..300).contains(&a.status) {
        let e = &a.body["error"];
        assert!(
            e["message"].is_string() && e["type"].is_string(),
            "{at}: {text}"
        );
        assert!(
            e["code"].is_string() && e.get("param").is_some(),
            "{at}: {text}"
        );
    }
    if let Some(code) = want.code {
        assert_eq!(a.body["error"]["code"], code, "{at}: error code");
    }
    for (name, value) in want.headers {
        assert_eq!(a.header(name), *value, "{at}: header {name}");
    }
    if let Some(took) = want.took {
        assert!(
            took.contains(&a.took),
            "{at}: took {:?}, not in {took:?}",
            a.took
        );
    }
    a
}

/// Runs every row at once, each on its own task, and fails listing every row that failed.
pub async fn scenarios(rows: Vec<Scenario>) {
    let runs: Vec<_> = rows
        .into_iter()
        .map(|row| {
            let name = row.name;
            (name, tokio::spawn(row.run()))
        })
        .collect();
    let mut failed = Vec::new();
    for (name, run) in runs {
        if let Err(e) = run.await {
            let why = match e.try_into_panic() {
                Ok(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            failed.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} row(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
