//! Which request-log rows a reader asks for: filters and a keyset cursor, as one SQL text for
//! either backend. Pages are cut by `(ts_ms, seq)` (SQLite's rowid, PostgreSQL's `seq`), never
//! by an offset, so a deep page costs what the first does: the index on `ts_ms` (or on
//! `(column, ts_ms)` for a filtered column) is entered at the cursor.

use serde_json::{Value, json};

/// A position in the log, newest first: the last row a page showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub ts_ms: i64,
    pub seq: i64,
}

impl Cursor {
    /// `"<ts_ms>-<seq>"`, as answered in `next`.
    pub fn parse(s: &str) -> Option<Cursor> {
        let (ts, seq) = s.split_once('-')?;
        Some(Cursor {
            ts_ms: ts.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }

    pub fn text(self) -> String {
        format!("{}-{}", self.ts_ms, self.seq)
    }
}

/// What a page of the log is: every filter optional, newest first.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub limit: u32,
    pub before: Option<Cursor>,
    /// One request, by its full id (`x-request-id`).
    pub id: Option<String>,
    pub key: Option<String>,
    /// The model the client asked for.
    pub model: Option<String>,
    /// The channel that served (an MCP tool call: its server).
    pub channel: Option<String>,
    /// What was called: `chat.completions`, `messages`, `mcp.tools/call`...
    pub endpoint: Option<String>,
    pub status: Option<u16>,
    pub outcome: Option<String>,
    /// Only requests that made more than one attempt.
    pub failed_over: bool,
    /// `[since_ms, until_ms)`.
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// Leave out requests sent with `x-switchyard-test`.
    pub hide_test: bool,
}

/// A bound value, in order of its placeholder.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(i64),
    Text(String),
}

/// Which SQL the text is written for: placeholders and the tie-breaking column differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    fn seq(self) -> &'static str {
        match self {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "seq",
        }
    }
}

/// The columns every reader answers, in the JSON shape `row_json` builds.
pub const COLUMNS: &str = "id, ts_ms, key_name, endpoint, requested_model, served_model, channel,
    status, outcome, attempts, stream, total_ms, ttfb_ms, input_tokens, output_tokens,
    tokens_per_s, translation, session, affinity, prompt_tokens, trimmed_turns, cost_micros,
    attempt_count, test, route_reason, cache, request_bytes, response_bytes, bodies";

impl LogQuery {
    /// The SELECT for this page and its parameters: [`COLUMNS`] and the row's sequence last.
    pub fn sql(&self, d: Dialect) -> (String, Vec<Param>) {
        let mut params = Vec::new();
        let at = |p: Param, params: &mut Vec<Param>| {
            params.push(p);
            match d {
                Dialect::Sqlite => format!("?{}", params.len()),
                Dialect::Postgres => format!("${}", params.len()),
            }
        };
        let mut wheres: Vec<String> = Vec::new();
        let text = |s: &Option<String>| s.clone().map(Param::Text);
        for (column, value) in [
            ("id", text(&self.id)),
            ("key_name", text(&self.key)),
            ("requested_model", text(&self.model)),
            ("channel", text(&self.channel)),
            ("endpoint", text(&self.endpoint)),
            ("outcome", text(&self.outcome)),
            ("status", self.status.map(|s| Param::Int(i64::from(s)))),
        ] {
            if let Some(v) = value {
                wheres.push(format!("{column} = {}", at(v, &mut params)));
            }
        }
        if self.failed_over {
            wheres.push("attempt_count > 1".into());
        }
        if self.hide_test {
            wheres.push(match d {
                Dialect::Sqlite => "test = 0".into(),
                Dialect::Postgres => "NOT test".into(),
            });
        }
        if let Some(s) = self.since_ms {
            wheres.push(format!("ts_ms >= {}", at(Param::Int(s), &mut params)));
        }
        if let Some(u) = self.until_ms {
            wheres.push(format!("ts_ms < {}", at(Param::Int(u), &mut params)));
        }
        let seq = d.seq();
        if let Some(c) = self.before {
            // The first conjunct bounds the index range; the second breaks ties in it.
            let ts = at(Param::Int(c.ts_ms), &mut params);
            let n = at(Param::Int(c.seq), &mut params);
            wheres.push(format!("ts_ms <= {ts} AND (ts_ms < {ts} OR {seq} < {n})"));
        }
        let filter = if wheres.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", wheres.join(" AND "))
        };
        let limit = at(Param::Int(i64::from(self.limit.max(1))), &mut params);
        let sql = format!(
            "SELECT {COLUMNS}, {seq} AS seq FROM requests {filter}
             ORDER BY ts_ms DESC, {seq} DESC LIMIT {limit}"
        );
        (sql, params)
    }
}

/// What the performance figures are computed from: one request, without the text columns
/// a page shows.
#[derive(Debug, Clone)]
pub struct Sample {
    pub ts_ms: i64,
    pub channel: Option<String>,
    pub model: Option<String>,
    pub ttfb_ms: Option<i64>,
    pub tokens_per_s: Option<f64>,
    /// The attempts' JSON: each call's channel, model and reason.
    pub attempts: String,
}

/// The samples since `?1`/`$1`, newest first, at most `?2`/`$2`; test traffic left out.
pub fn samples_sql(d: Dialect) -> String {
    let (since, limit) = match d {
        Dialect::Sqlite => ("?1", "?2"),
        Dialect::Postgres => ("$1", "$2"),
    };
    format!(
        "SELECT ts_ms, channel, served_model, ttfb_ms, tokens_per_s, attempts FROM requests
         WHERE ts_ms >= {since} AND test = false ORDER BY ts_ms DESC LIMIT {limit}"
    )
}

/// One row as read, whichever backend: what [`Row::json`] answers.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: String,
    pub ts_ms: i64,
    pub key_name: Option<String>,
    pub endpoint: String,
    pub requested_model: Option<String>,
    pub served_model: Option<String>,
    pub channel: Option<String>,
    pub status: i64,
    pub outcome: String,
    pub attempts: String,
    pub stream: bool,
    pub total_ms: i64,
    pub ttfb_ms: Option<i64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub tokens_per_s: Option<f64>,
    pub translation: Option<String>,
    pub session: Option<String>,
    pub affinity: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub trimmed_turns: Option<i64>,
    pub cost_micros: Option<i64>,
    pub attempt_count: i64,
    pub test: bool,
    pub route_reason: Option<String>,
    pub cache: Option<String>,
    pub request_bytes: Option<i64>,
    pub response_bytes: Option<i64>,
    pub bodies: Option<String>,
}

impl Row {
    pub fn json(self) -> Value {
        json!({
            "id": self.id,
            "ts_ms": self.ts_ms,
            "key_name": self.key_name,
            "endpoint": self.endpoint,
            "requested_model": self.requested_model,
            "served_model": self.served_model,
            "channel": self.channel,
            "status": self.status,
            "outcome": self.outcome,
            "attempts": serde_json::from_str::<Value>(&self.attempts).unwrap_or(Value::Null),
            "attempt_count": self.attempt_count,
            "route_reason": self.route_reason,
            "cache": self.cache,
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "bodies": self.bodies.as_deref().and_then(|b| serde_json::from_str::<Value>(b).ok()),
            "stream": self.stream,
            "total_ms": self.total_ms,
            "ttfb_ms": self.ttfb_ms,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tokens_per_s": self.tokens_per_s,
            "translation": self.translation,
            "session": self.session,
            "affinity": self.affinity,
            "prompt_tokens": self.prompt_tokens,
            "trimmed_turns": self.trimmed_turns,
            "cost_micros": self.cost_micros,
            "test": self.test,
        })
    }
}

/// The page's rows as JSON, and the cursor after the last one when the page is full (there
/// may be more).
pub fn finish(q: &LogQuery, rows: Vec<(Row, i64)>) -> (Vec<Value>, Option<Cursor>) {
    let next = match rows.last() {
        Some((r, seq)) if rows.len() as u32 >= q.limit.max(1) => Some(Cursor {
            ts_ms: r.ts_ms,
            seq: *seq,
        }),
        _ => None,
    };
    (rows.into_iter().map(|(r, _)| r.json()).collect(), next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_become_placeholders_in_order_for_each_dialect() {
        let q = LogQuery {
            limit: 50,
            key: Some("team-a".into()),
            status: Some(502),
            failed_over: true,
            hide_test: true,
            before: Some(Cursor { ts_ms: 10, seq: 7 }),
            ..LogQuery::default()
        };
        let (sql, params) = q.sql(Dialect::Sqlite);
        assert!(sql.contains("key_name = ?1 AND status = ?2 AND attempt_count > 1 AND test = 0"));
        assert!(
            sql.contains("ts_ms <= ?3 AND (ts_ms < ?3 OR rowid < ?4)"),
            "{sql}"
        );
        assert!(sql.ends_with("LIMIT ?5"));
        assert_eq!(
            params,
            vec![
                Param::Text("team-a".into()),
                Param::Int(502),
                Param::Int(10),
                Param::Int(7),
                Param::Int(50)
            ]
        );
        let (pg, _) = q.sql(Dialect::Postgres);
        assert!(pg.contains("NOT test") && pg.contains("seq < $4") && pg.ends_with("LIMIT $5"));
    }

    #[test]
    fn a_cursor_reads_back_what_it_writes_and_refuses_the_rest() {
        let c = Cursor {
            ts_ms: 1_700_000_000_123,
            seq: 42,
        };
        assert_eq!(Cursor::parse(&c.text()), Some(c));
        for bad in ["", "12", "a-1", "1-b", "1-2-3"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }
}
