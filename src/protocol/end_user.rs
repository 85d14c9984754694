//! Who a request's end user is (issue 38, being built), as each client protocol says it: the
//! `user` of OpenAI Chat and the Responses API (or its `safety_identifier`), Anthropic's
//! `metadata.user_id`, the `user` label of a Gemini request's `labels`, and from any client the
//! `x-switchyard-user` header, which wins. Pure: borrowed from the request, so a request that
//! names one costs no copy until its team counts it.

use serde_json::Value;

use super::{InvalidRequest, Protocol};

/// The header any client may name its end user in.
pub const HEADER: &str = "x-switchyard-user";
/// An end user's id is at most this many characters.
pub const MAX_CHARS: usize = 256;

/// The request's end user, if it names one; a name that cannot be an id (empty, too long,
/// control characters) is the client's mistake, naming where it was.
pub fn end_user<'a>(
    p: Protocol,
    body: &'a Value,
    header: Option<&'a [u8]>,
) -> Result<Option<&'a str>, InvalidRequest> {
    if let Some(h) = header {
        let text =
            std::str::from_utf8(h).map_err(|_| InvalidRequest::new(HEADER, "must be UTF-8"))?;
        return checked(text, HEADER).map(Some);
    }
    let (param, found) = match p {
        Protocol::OpenAiChat => ("user", body.get("user")),
        Protocol::OpenAiResponses => match body.get("user") {
            Some(u) => ("user", Some(u)),
            None => ("safety_identifier", body.get("safety_identifier")),
        },
        Protocol::AnthropicMessages => ("metadata.user_id", body.pointer("/metadata/user_id")),
        Protocol::Gemini => ("labels.user", body.pointer("/labels/user")),
    };
    match found {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => checked(s, param).map(Some),
        Some(_) => Err(InvalidRequest::new(param, "must be a string")),
    }
}

fn checked<'a>(id: &'a str, param: &str) -> Result<&'a str, InvalidRequest> {
    let id = id.trim();
    if id.is_empty() {
        return Err(InvalidRequest::new(param, "must not be empty"));
    }
    if id.chars().count() > MAX_CHARS {
        return Err(InvalidRequest::new(
            param,
            format!("at most {MAX_CHARS} characters"),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(InvalidRequest::new(
            param,
            "must not hold control characters",
        ));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A protocol, a body, a header, and the user read (or the param refused).
    type Case = (
        Protocol,
        Value,
        Option<&'static str>,
        Result<Option<&'static str>, &'static str>,
    );

    #[test]
    fn each_protocol_names_its_user_where_it_says_it() {
        // (protocol, body, header, the user, or the param refused)
        let long = "u".repeat(MAX_CHARS + 1);
        let cases: Vec<Case> = vec![
            (
                Protocol::OpenAiChat,
                json!({"user": "alice"}),
                None,
                Ok(Some("alice")),
            ),
            (Protocol::OpenAiChat, json!({}), None, Ok(None)),
            (Protocol::OpenAiChat, json!({"user": null}), None, Ok(None)),
            (Protocol::OpenAiChat, json!({"user": 7}), None, Err("user")),
            (
                Protocol::OpenAiChat,
                json!({"user": "  "}),
                None,
                Err("user"),
            ),
            (
                Protocol::OpenAiChat,
                json!({"user": long}),
                None,
                Err("user"),
            ),
            (
                Protocol::OpenAiChat,
                json!({"user": "a\u{7}b"}),
                None,
                Err("user"),
            ),
            (
                Protocol::OpenAiResponses,
                json!({"safety_identifier": "s-1"}),
                None,
                Ok(Some("s-1")),
            ),
            (
                Protocol::OpenAiResponses,
                json!({"user": "u", "safety_identifier": "s"}),
                None,
                Ok(Some("u")),
            ),
            (
                Protocol::AnthropicMessages,
                json!({"metadata": {"user_id": "bob"}}),
                None,
                Ok(Some("bob")),
            ),
            (
                Protocol::AnthropicMessages,
                json!({"user": "not here"}),
                None,
                Ok(None),
            ),
            (
                Protocol::Gemini,
                json!({"labels": {"user": "carol"}}),
                None,
                Ok(Some("carol")),
            ),
            // The header wins over the body, from any client.
            (
                Protocol::Gemini,
                json!({"labels": {"user": "carol"}}),
                Some("dave"),
                Ok(Some("dave")),
            ),
            (
                Protocol::OpenAiChat,
                json!({"user": "alice"}),
                Some(""),
                Err(HEADER),
            ),
        ];
        for (p, body, header, want) in cases {
            let got = end_user(p, &body, header.map(str::as_bytes));
            match want {
                Ok(u) => assert_eq!(got.unwrap(), u, "{p:?} {body}"),
                Err(param) => {
                    assert_eq!(
                        got.unwrap_err().param.as_deref(),
                        Some(param),
                        "{p:?} {body}"
                    )
                }
            }
        }
        assert!(end_user(Protocol::OpenAiChat, &json!({}), Some(b"\xff")).is_err());
    }
}
