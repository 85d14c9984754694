//! Reading the server-sent events of a streamed answer.

use serde_json::Value;

/// An SSE body split into its `data:` payloads.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// The concatenated content deltas of an SSE body.
pub fn sse_text(body: &str) -> String {
    sse_data(body)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}
