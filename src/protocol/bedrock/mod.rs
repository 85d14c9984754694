//! AWS Bedrock as an upstream. Its Converse API ↔ canonical, one file per direction:
//! `to_upstream` writes a Converse request (system, messages with text, images, documents,
//! `toolUse`/`toolResult`, `inferenceConfig`, `toolConfig`, `additionalModelRequestFields`)
//! and the InvokeModel body an Anthropic model takes (the Messages body with Bedrock's
//! `anthropic_version`); `from_upstream` reads a Converse answer and ConverseStream's events.
//! An Anthropic model's InvokeModel answers are Anthropic's own (`protocol::anthropic`).

mod from_upstream;
mod to_upstream;

#[cfg(test)]
mod tests;

pub use from_upstream::{StreamDecoder, response_from_value};
pub use to_upstream::{BEDROCK_ANTHROPIC_VERSION, invoke_body, request_to_value};
