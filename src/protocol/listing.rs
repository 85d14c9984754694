//! Model lists and model objects in each client protocol's shape (OpenAI's `object: "model"`,
//! Anthropic's `type: "model"` with `has_more`/`first_id`/`last_id` pages, Gemini's
//! `models/{name}` with `nextPageToken`), and their paging over names in sorted order. Pure.

use serde_json::{Value, json};

/// One model a key may use, as the lists show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    pub id: String,
    /// From the model catalog, when it knows the model's family.
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
}

/// The creation time a gateway model has: none is known, and Anthropic's API documents the
/// epoch for an unknown release date.
const EPOCH: &str = "1970-01-01T00:00:00Z";

pub fn openai(c: &Card) -> Value {
    json!({"id": c.id, "object": "model", "created": 0, "owned_by": "switchyard"})
}

pub fn anthropic(c: &Card) -> Value {
    json!({
        "type": "model",
        "id": c.id,
        "display_name": c.id,
        "created_at": EPOCH,
        "lifecycle": "active",
        "max_input_tokens": c.context_window,
        "max_tokens": c.max_output_tokens,
    })
}

pub fn gemini(c: &Card) -> Value {
    let mut v = json!({
        "name": format!("models/{}", c.id),
        "baseModelId": c.id,
        "version": "switchyard",
        "displayName": c.id,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    });
    if let Some(n) = c.context_window {
        v["inputTokenLimit"] = n.into();
    }
    if let Some(n) = c.max_output_tokens {
        v["outputTokenLimit"] = n.into();
    }
    v
}

/// A page of `cards` (sorted by id): the `limit` after `after`, or the `limit` just before
/// `before`; and whether more lie beyond it in the direction read.
pub fn page<'c>(
    cards: &'c [Card],
    after: Option<&str>,
    before: Option<&str>,
    limit: usize,
) -> (&'c [Card], bool) {
    let start = after.map_or(0, |a| cards.partition_point(|c| c.id.as_str() <= a));
    let end = before.map_or(cards.len(), |b| {
        cards.partition_point(|c| c.id.as_str() < b)
    });
    let end = end.max(start);
    if before.is_some() && after.is_none() {
        let from = end.saturating_sub(limit).max(start);
        return (&cards[from..end], from > start);
    }
    let to = (start + limit).min(end);
    (&cards[start..to], to < end)
}

/// OpenAI's list: every model, no pages.
pub fn openai_list(cards: &[Card]) -> Value {
    let data: Vec<Value> = cards.iter().map(openai).collect();
    json!({"object": "list", "data": data})
}

/// Anthropic's page.
pub fn anthropic_list(cards: &[Card], has_more: bool) -> Value {
    let data: Vec<Value> = cards.iter().map(anthropic).collect();
    json!({
        "data": data,
        "has_more": has_more,
        "first_id": cards.first().map(|c| &c.id),
        "last_id": cards.last().map(|c| &c.id),
    })
}

/// Gemini's page; the next page's token is the last name shown (names are sorted).
pub fn gemini_list(cards: &[Card], has_more: bool) -> Value {
    let models: Vec<Value> = cards.iter().map(gemini).collect();
    let mut v = json!({ "models": models });
    if has_more && let Some(last) = cards.last() {
        v["nextPageToken"] = last.id.clone().into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cards(ids: &[&str]) -> Vec<Card> {
        ids.iter()
            .map(|id| Card {
                id: id.to_string(),
                context_window: None,
                max_output_tokens: None,
            })
            .collect()
    }

    fn ids(page: &[Card]) -> Vec<&str> {
        page.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn pages_forward_and_back() {
        let all = cards(&["a", "b", "c", "d", "e"]);
        // after, before, limit → the page, and whether more lie beyond it.
        type Case<'a> = (Option<&'a str>, Option<&'a str>, usize, &'a [&'a str], bool);
        let table: &[Case] = &[
            (None, None, 2, &["a", "b"], true),
            (Some("b"), None, 2, &["c", "d"], true),
            (Some("d"), None, 2, &["e"], false),
            (Some("e"), None, 2, &[], false),
            (None, Some("e"), 2, &["c", "d"], true),
            (None, Some("b"), 2, &["a"], false),
            (Some("a"), Some("e"), 9, &["b", "c", "d"], false),
            (Some("bb"), None, 1, &["c"], true),
            (None, None, 9, &["a", "b", "c", "d", "e"], false),
        ];
        for (after, before, limit, want, more) in table {
            let (p, m) = page(&all, *after, *before, *limit);
            assert_eq!((ids(p), m), (want.to_vec(), *more), "{after:?} {before:?}");
        }
    }

    #[test]
    fn each_shape_names_the_model_its_way() {
        let c = Card {
            id: "claude-x".into(),
            context_window: Some(200_000),
            max_output_tokens: Some(64_000),
        };
        assert_eq!(openai(&c)["object"], "model");
        let a = anthropic(&c);
        assert_eq!(
            (&a["type"], &a["display_name"]),
            (&json!("model"), &json!("claude-x"))
        );
        assert_eq!(a["max_input_tokens"], 200_000);
        let g = gemini(&c);
        assert_eq!(g["name"], "models/claude-x");
        assert_eq!(
            (
                g["inputTokenLimit"].as_u64(),
                g["outputTokenLimit"].as_u64()
            ),
            (Some(200_000), Some(64_000))
        );
        let l = gemini_list(std::slice::from_ref(&c), true);
        assert_eq!(l["nextPageToken"], "claude-x");
        let l = anthropic_list(std::slice::from_ref(&c), false);
        assert_eq!(
            (&l["first_id"], &l["has_more"]),
            (&json!("claude-x"), &json!(false))
        );
    }
}
