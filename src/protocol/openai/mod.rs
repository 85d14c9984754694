//! OpenAI Chat Completions: `from_*` (wire JSON → canonical) and `to_*` (canonical → wire JSON).
//!
//! Parsing moves values out of the already-parsed body (no second parse, no string copies);
//! serialising writes straight from the canonical types through `Serialize` views, so a request
//! costs one parse in and one write out per attempt.
//!
//! One module per direction (OpenAI is a client protocol and an upstream protocol both):
//! - `from_client`: a client's chat or embeddings request → canonical;
//! - `to_client`: a canonical response → the client's body, and the error envelope;
//! - `stream_out`: canonical chunks → the client's `data:` lines;
//! - `to_upstream`: a canonical request → an upstream's body;
//! - `from_upstream`: an upstream's answer and stream chunks → canonical;
//! - `read` and `write`: the field readers and the `Serialize` views both sides share.

mod from_client;
mod from_upstream;
mod read;
mod scan;
mod stream_out;
mod to_client;
mod to_upstream;
mod write;

#[cfg(test)]
mod tests;

pub use from_client::{GATEWAY_FIELDS, embeddings_from_value, request_from_value};
pub use from_upstream::{chunk_from_str, chunk_from_value, response_from_value};
pub use read::ReadError;
pub use scan::{scan_answer, scan_chunk};
pub use stream_out::ChunkBody;
pub use to_client::{ResponseBody, error_body};
pub use to_upstream::{EmbeddingsBody, RequestBody};
