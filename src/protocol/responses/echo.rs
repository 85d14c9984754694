//! What a Response object repeats of its request, and the conversation kept after it.

use serde_json::{Map, Value, json};

/// What the answer must echo of the request, and what reading it dropped.
#[derive(Debug, Clone)]
pub struct Echo {
    pub id: String,
    pub created_at: u64,
    /// The request's own fields the Response object repeats (instructions, tools...).
    pub(super) fields: Map<String, Value>,
    /// Names of `custom` tools: a call to one is answered as a `custom_tool_call`.
    pub(super) custom_tools: Vec<String>,
    /// Named by field or tool type, never by value.
    pub losses: Vec<String>,
    /// The client lets responses be kept (`store` is not `false`).
    pub store: bool,
    /// The conversation as sent (input items), to keep with the answer (empty with `store: false`).
    pub(super) conversation: Vec<Value>,
}

/// What the gateway keeps of a Response it answered (JSON text each), when the client lets
/// it and it is within the size cap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Kept {
    /// The conversation after it, as input items: what continues it.
    pub items: Option<String>,
    /// The Response object: what `GET /v1/responses/{id}` answers.
    pub response: Option<String>,
}

impl Echo {
    /// The conversation to keep after this answer: what was sent, then `output`; `None` when
    /// the client said `store: false` or it is over the size cap.
    pub fn kept_with(&self, output: &[Value]) -> Option<String> {
        if !self.store {
            return None;
        }
        let mut all = self.conversation.clone();
        all.extend(output.iter().cloned());
        serde_json::to_string(&all)
            .ok()
            .filter(|t| t.len() <= MAX_KEPT_BYTES)
    }

    /// What to keep of `response` (a Response object this gateway wrote): the conversation
    /// after it, and itself, each within the size cap (nothing with `store: false`).
    pub fn kept(&self, response: &Value) -> Kept {
        let output = response["output"].as_array().map_or(&[][..], Vec::as_slice);
        let items = self.kept_with(output);
        let response = items.as_ref().and_then(|_| {
            serde_json::to_string(response)
                .ok()
                .filter(|t| t.len() <= MAX_KEPT_BYTES)
        });
        Kept { items, response }
    }

    /// A tool call as its output item: a `custom_tool_call` for a custom tool (its `input`
    /// taken back out of the arguments), else a `function_call`.
    pub(super) fn call_item(
        &self,
        id: &str,
        call_id: &str,
        name: &str,
        args: &str,
        status: &str,
    ) -> Value {
        if self.custom_tools.iter().any(|t| t == name) {
            let input = serde_json::from_str::<Value>(args)
                .ok()
                .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| args.to_string());
            return json!({"type": "custom_tool_call", "id": id, "call_id": call_id,
                "name": name, "input": input, "status": status});
        }
        json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
            "arguments": args, "status": status})
    }
}

/// Largest kept conversation (JSON bytes); a longer one keeps only its channel.
pub const MAX_KEPT_BYTES: usize = 1 << 20;

/// The Response object's fields that do not depend on the answer.
pub(super) fn skeleton(echo: &Echo, model: &str, status: &str) -> Value {
    let mut r = json!({
        "id": echo.id,
        "object": "response",
        "created_at": echo.created_at,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": [],
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": true,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": null,
        "metadata": {},
    });
    for (k, v) in &echo.fields {
        r[k.as_str()] = v.clone();
    }
    r
}
