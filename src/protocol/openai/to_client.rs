//! A canonical response → the client's body, and OpenAI's error envelope.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::write::{MessageView, Seq, UsageView, write_extra, write_head};
use crate::protocol::{ChatResponse, Choice};

/// Canonical response → client body, with Switchyard's failover report when there is one.
pub struct ResponseBody<'a> {
    pub resp: &'a ChatResponse,
    pub report: Option<&'a Value>,
}

impl Serialize for ResponseBody<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.resp;
        let mut m = s.serialize_map(None)?;
        write_head(&mut m, &r.id, "chat.completion", r.created, &r.model)?;
        struct ChoiceView<'a>(&'a Choice);
        impl Serialize for ChoiceView<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let c = self.0;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("index", &c.index)?;
                m.serialize_entry("message", &MessageView(&c.message))?;
                m.serialize_entry("finish_reason", &c.finish_reason)?;
                write_extra(&mut m, &c.extra)?;
                m.end()
            }
        }
        m.serialize_entry("choices", &Seq(&r.choices, ChoiceView))?;
        if let Some(u) = &r.usage {
            m.serialize_entry("usage", &UsageView(u))?;
        }
        for (k, v) in &r.extra {
            if k != "switchyard" {
                m.serialize_entry(k, v)?;
            }
        }
        if let Some(rep) = self.report {
            m.serialize_entry("switchyard", rep)?;
        }
        m.end()
    }
}

/// The OpenAI error envelope: `{"error": {"message","type","param","code", ...extra}}`.
pub fn error_body(
    message: &str,
    kind: &str,
    code: &str,
    param: Option<&str>,
    extra: Option<(&str, Value)>,
) -> Value {
    let mut e = Map::new();
    e.insert("message".into(), Value::String(message.into()));
    e.insert("type".into(), Value::String(kind.into()));
    e.insert(
        "param".into(),
        param.map_or(Value::Null, |p| Value::String(p.into())),
    );
    e.insert("code".into(), Value::String(code.into()));
    if let Some((k, v)) = extra {
        e.insert(k.into(), v);
    }
    let mut outer = Map::new();
    outer.insert("error".into(), Value::Object(e));
    Value::Object(outer)
}
