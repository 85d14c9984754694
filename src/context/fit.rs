//! Fitting a request to a model's window, pure: counts it once per tokenizer, trims it per
//! model when trimming is on, and says when it overflows a model so that the route's context
//! fallbacks can take it. Exec asks once per model of the chain; answers are cached.

use std::sync::Arc;

use serde_json::Value;

use super::catalog::{Catalog, ModelInfo};
use super::count::{Counted, Tokenizer, count_request};
use super::trim::{TooLong, trim};
use crate::protocol::{ChatRequest, Protocol};

/// What fitting did, for the response headers and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Note {
    /// Prompt tokens of the request as sent (counted, or estimated for models without an
    /// offline tokenizer).
    pub prompt_tokens: u64,
    /// Whole groups of history removed.
    pub trimmed_turns: usize,
    pub exact: bool,
}

/// The request for one model.
#[derive(Debug, Clone)]
pub enum Plan {
    /// Nothing to check for this model: sent as the client wrote it.
    AsIs,
    /// Counted: it fits, or was trimmed to (`request` is then the trimmed copy).
    Fit {
        request: Option<Arc<ChatRequest>>,
        note: Note,
    },
    /// It does not fit: with trimming on, not even the minimum (instructions, tools, latest
    /// turn); with it off, the whole request. A context fallback may take it.
    Exceeds { overflow: Overflow, trimming: bool },
}

/// The counts a `context_length_exceeded` answer gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    pub model: Arc<str>,
    /// Prompt tokens the request needs at least (all of it, when trimming is off).
    pub needed: u64,
    /// Prompt tokens the model can take with `reserved` kept for the reply.
    pub budget: u64,
    pub context_window: u64,
    pub reserved: u64,
    /// Counted with the model's own tokenizer (else estimated).
    pub exact: bool,
}

pub struct Fitter<'a> {
    req: &'a ChatRequest,
    catalog: &'a Catalog,
    /// The key's or request's choice; `None` leaves it to each model's route.
    trim: Option<bool>,
    counts: Vec<(Tokenizer, Counted)>,
    plans: Vec<(Arc<str>, Plan)>,
}

impl<'a> Fitter<'a> {
    /// `None` when nothing could need fitting: no trimming asked for anywhere and no route
    /// with context fallbacks, so requests are not even counted.
    pub fn new(req: &'a ChatRequest, catalog: &'a Catalog, trim: Option<bool>) -> Option<Self> {
        if trim != Some(true) && !catalog.any_context_settings() {
            return None;
        }
        Some(Fitter {
            req,
            catalog,
            trim,
            counts: Vec::new(),
            plans: Vec::new(),
        })
    }

    /// The request for `model` (the model as routed).
    pub fn plan(&mut self, model: &str) -> Plan {
        self.plan_counted(model, false)
    }

    /// `always`: count even where the model's route neither trims nor falls back (to know
    /// whether it can be a fallback).
    fn plan_counted(&mut self, model: &str, always: bool) -> Plan {
        let cached = self.plans.iter().position(|(m, _)| **m == *model);
        if let Some(i) = cached
            && !(always && matches!(self.plans[i].1, Plan::AsIs))
        {
            return self.plans[i].1.clone();
        }
        let plan = match self.catalog.lookup(model) {
            Some(info) => {
                let trim = self.trim.unwrap_or(info.trim);
                if always || trim || !info.context_fallbacks.is_empty() {
                    let req = self.req;
                    let counted = self.counted(tokenizer(model, info));
                    fit(req, counted, info, model, trim)
                } else {
                    Plan::AsIs
                }
            }
            None => Plan::AsIs,
        };
        match cached {
            Some(i) => self.plans[i].1 = plan.clone(),
            None => self.plans.push((model.into(), plan.clone())),
        }
        plan
    }

    /// The first of `route`'s context fallbacks, not yet tried, with a larger window than
    /// `than` (the model that did not take the request), usable by the caller, that the request
    /// fits (trimmed if trimming is on for it).
    pub fn fallback(
        &mut self,
        route: &str,
        than: &str,
        tried: &[Arc<str>],
        usable: impl Fn(&str) -> bool,
    ) -> Option<Arc<str>> {
        let fallbacks = self.catalog.lookup(route)?.context_fallbacks.clone();
        let window = self.catalog.lookup(than).map_or(0, |i| i.context_window);
        for fb in fallbacks {
            let larger = self
                .catalog
                .lookup(&fb)
                .is_some_and(|i| i.context_window > window);
            if !larger || tried.contains(&fb) || !usable(&fb) {
                continue;
            }
            if matches!(self.plan_counted(&fb, true), Plan::Fit { .. }) {
                return Some(fb);
            }
        }
        None
    }

    fn counted(&mut self, tok: Tokenizer) -> &Counted {
        let i = match self.counts.iter().position(|(t, _)| *t == tok) {
            Some(i) => i,
            None => {
                self.counts.push((tok, count_request(self.req, tok)));
                self.counts.len() - 1
            }
        };
        &self.counts[i].1
    }
}

/// `req`'s prompt tokens for `model`, counted as trimming counts them (a token-counting
/// endpoint's local answer).
pub fn count_for(req: &ChatRequest, model: &str, catalog: &Catalog) -> Counted {
    let tok = match catalog.lookup(model) {
        Some(info) => tokenizer(model, info),
        None => Tokenizer::for_model(model),
    };
    count_request(req, tok)
}

/// The model's own tokenizer, or its catalog family's (an alias such as `smart` configured
/// for a GPT model counts by its family only if named like one).
fn tokenizer(model: &str, info: &ModelInfo) -> Tokenizer {
    match Tokenizer::for_model(model) {
        Tokenizer::Estimate(_) => Tokenizer::for_model(&info.name),
        exact => exact,
    }
}

fn fit(req: &ChatRequest, counted: &Counted, info: &ModelInfo, model: &str, trim: bool) -> Plan {
    let reserved = req.max_tokens.map_or(info.max_output_tokens, |(_, n)| n);
    let budget = info.budget(reserved);
    let total = counted.total();
    let overflow = |needed| Overflow {
        model: model.into(),
        needed,
        budget,
        context_window: info.context_window,
        reserved,
        exact: counted.exact,
    };
    let note = |prompt_tokens, trimmed_turns| Note {
        prompt_tokens,
        trimmed_turns,
        exact: counted.exact,
    };
    if total <= budget {
        return Plan::Fit {
            request: None,
            note: note(total, 0),
        };
    }
    if !trim {
        return Plan::Exceeds {
            overflow: overflow(total),
            trimming: false,
        };
    }
    match trim_request(req, counted, budget, info.target(reserved)) {
        Ok((request, t)) => Plan::Fit {
            request: Some(Arc::new(request)),
            note: note(t.tokens, t.removed_groups),
        },
        Err(TooLong { minimum, .. }) => Plan::Exceeds {
            overflow: overflow(minimum),
            trimming: true,
        },
    }
}

/// The request with only the kept messages, its raw body (for a same-protocol channel) cut the
/// same way.
fn trim_request(
    req: &ChatRequest,
    counted: &Counted,
    budget: u64,
    target: u64,
) -> Result<(ChatRequest, super::trim::Trimmed), TooLong> {
    let t = trim(
        &req.messages,
        &counted.per_message,
        counted.fixed,
        budget,
        target,
    )?;
    let messages: Vec<_> = t.kept.iter().map(|&i| req.messages[i].clone()).collect();
    let mut kept = vec![false; req.messages.len()];
    t.kept.iter().for_each(|&i| kept[i] = true);
    let raw = req.raw.as_ref().map(|raw| {
        let list = match req.origin {
            Protocol::AnthropicMessages => "messages",
            Protocol::Gemini => "contents",
            Protocol::OpenAiResponses => "input",
            // OpenAI's chat path keeps no raw body.
            Protocol::OpenAiChat => return raw.clone(),
        };
        // Each canonical message owns the raw items from just after the previous one's up to
        // its own source: a client message split in two is one group, so it goes whole, and an
        // item with no canonical form (a Responses reasoning item, an empty Anthropic turn) goes
        // with the message it precedes. Items after the last message are never ours to cut.
        let mut dropped = std::collections::HashSet::new();
        let mut next = 0u32;
        for (k, m) in req.messages.iter().enumerate() {
            let Some(s) = m.source else {
                continue;
            };
            if !kept[k] {
                dropped.extend(next..=s);
            }
            next = next.max(s + 1);
        }
        let mut raw = raw.clone();
        if let Some(Value::Array(items)) = raw.get_mut(list) {
            let mut i = 0u32;
            items.retain(|_| {
                let keep = !dropped.contains(&i);
                i += 1;
                keep
            });
        }
        raw
    });
    Ok((req.with_messages(messages, raw), t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::catalog::NameMatch;
    use serde_json::json;

    fn catalog() -> Catalog {
        let mut c = Catalog::builtin();
        let mut small = ModelInfo::new("small", 1_000, 100);
        small.context_fallbacks = vec!["tiny".into(), "big".into()];
        c.push(NameMatch::Exact, small);
        c.push(NameMatch::Exact, ModelInfo::new("tiny", 500, 50));
        c.push(NameMatch::Exact, ModelInfo::new("big", 100_000, 1_000));
        let mut trims = ModelInfo::new("trims", 1_000, 100);
        trims.trim = true;
        c.push(NameMatch::Exact, trims);
        c
    }

    /// An Anthropic agent history: a system prompt, an old exchange, then one user turn whose
    /// tool results and follow-up text share a client message.
    fn anthropic(turns: usize, words: usize) -> ChatRequest {
        let text = "lorem ipsum ".repeat(words);
        let mut messages = Vec::new();
        for i in 0..turns {
            messages.push(json!({"role": "user", "content": format!("question {i}: {text}")}));
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": format!("t{i}"), "name": "read", "input": {"path": "a"}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": text.clone()},
                {"type": "text", "text": "and then?"}]}));
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
        }
        messages.push(json!({"role": "user", "content": "latest"}));
        crate::protocol::anthropic::request_from_value(json!({
            "model": "small", "max_tokens": 100, "system": "be brief", "messages": messages,
        }))
        .unwrap()
    }

    #[test]
    fn nothing_is_counted_when_nothing_asks_for_it() {
        let req = anthropic(1, 1);
        assert!(Fitter::new(&req, &Catalog::builtin(), None).is_none());
        assert!(Fitter::new(&req, &Catalog::builtin(), Some(true)).is_some());
        let c = catalog();
        let mut f = Fitter::new(&req, &c, Some(false)).unwrap();
        // No trimming and no fallbacks for a built-in family: sent as is.
        assert!(matches!(f.plan("gpt-4o"), Plan::AsIs));
        assert!(matches!(f.plan("unknown"), Plan::AsIs));
    }

    #[test]
    fn trimming_cuts_the_raw_body_by_whole_client_messages() {
        let req = anthropic(6, 40);
        let c = catalog();
        let mut f = Fitter::new(&req, &c, None).unwrap();
        let Plan::Fit {
            request: Some(trimmed),
            note,
        } = f.plan("trims")
        else {
            panic!("expected a trimmed request");
        };
        assert!(note.trimmed_turns > 0);
        assert!(note.prompt_tokens <= c.lookup("trims").unwrap().target(100));
        let raw = trimmed.raw.as_ref().unwrap()["messages"]
            .as_array()
            .unwrap();
        // The system prompt is top-level and stays; the history opens with a user turn; the
        // latest turn is last; every tool_result still follows its tool_use.
        assert_eq!(trimmed.raw.as_ref().unwrap()["system"], "be brief");
        assert_eq!(raw[0]["role"], "user");
        assert_eq!(raw.last().unwrap()["content"], "latest");
        assert!(raw.len() < 6 * 4 + 1);
        for (i, m) in raw.iter().enumerate() {
            let results = m["content"].as_array().into_iter().flatten();
            for b in results.filter(|b| b["type"] == "tool_result") {
                let prev = &raw[i - 1]["content"][0];
                assert_eq!(prev["type"], "tool_use");
                assert_eq!(prev["id"], b["tool_use_id"]);
            }
        }
        // The canonical messages were cut the same way.
        assert_eq!(
            trimmed.messages.iter().filter_map(|m| m.source).max(),
            Some(24)
        );
        let kept: std::collections::BTreeSet<u32> =
            trimmed.messages.iter().filter_map(|m| m.source).collect();
        assert_eq!(kept.len(), raw.len());
    }

    #[test]
    fn each_model_gets_its_own_cut_and_too_long_says_by_how_much() {
        let req = anthropic(6, 40);
        let mut c = catalog();
        let mut roomy = ModelInfo::new("roomy", 2_500, 100);
        roomy.trim = true;
        c.push(NameMatch::Exact, roomy);
        let mut f = Fitter::new(&req, &c, None).unwrap();
        let turns = |p: Plan| match p {
            Plan::Fit { note, .. } => note.trimmed_turns,
            other => panic!("{other:?}"),
        };
        assert!(turns(f.plan("trims")) > turns(f.plan("roomy")));
        // The same answer twice: counted once, cached.
        assert_eq!(turns(f.plan("trims")), turns(f.plan("trims")));
        // A system prompt larger than the window: nothing can be cut to fit.
        let mut big = anthropic(1, 1);
        big.messages[0] =
            crate::protocol::Message::new(crate::protocol::Role::System, "rules ".repeat(2_000));
        let mut f = Fitter::new(&big, &c, None).unwrap();
        let Plan::Exceeds {
            overflow: o,
            trimming: true,
        } = f.plan("trims")
        else {
            panic!()
        };
        assert_eq!((o.context_window, o.reserved), (1_000, 100));
        assert!(o.needed > o.budget, "{o:?}");
    }

    #[test]
    fn a_request_too_long_for_its_model_falls_back_to_the_first_larger_that_fits() {
        let req = anthropic(6, 40);
        let c = catalog();
        let mut f = Fitter::new(&req, &c, Some(false)).unwrap();
        assert!(matches!(
            f.plan("small"),
            Plan::Exceeds {
                trimming: false,
                ..
            }
        ));
        // `tiny` is listed first but is smaller; `big` fits.
        let any = |_: &str| true;
        assert_eq!(
            f.fallback("small", "small", &[], any).as_deref(),
            Some("big")
        );
        assert_eq!(f.fallback("small", "small", &["big".into()], any), None);
        // Not usable by the caller (another group's model): not chosen.
        assert_eq!(f.fallback("small", "small", &[], |m| m != "big"), None);
        // Larger than the model that refused it, not only than the route's own.
        assert_eq!(f.fallback("small", "big", &[], any), None);
        // A short request fits as it is.
        let short = anthropic(0, 1);
        let mut f = Fitter::new(&short, &c, None).unwrap();
        assert!(matches!(f.plan("small"), Plan::Fit { request: None, .. }));
    }
}
