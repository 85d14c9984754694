//! Token counting and turn-aware trimming, pure. Counts are the provider's own where an
//! offline tokenizer exists: OpenAI's BPE ranks (o200k_base for gpt-4o, gpt-4.1, gpt-5 and the
//! o-series; cl100k_base for older models), bundled by the `tiktoken` crate, loaded once;
//! calibrated estimates for the rest (`count`). The `catalog` says each model's window; `trim`
//! picks whole groups of history to drop; `fit` puts them together per model for exec.

pub mod catalog;
pub mod count;
pub mod fit;
pub mod trim;

/// The BPE encoding OpenAI uses for `model`, if it is an OpenAI model the tokenizer knows.
pub fn encoding_for(model: &str) -> Option<&'static str> {
    tiktoken::model_to_encoding(model).filter(|e| matches!(*e, "o200k_base" | "cl100k_base"))
}

/// Tokens of `text` in `encoding` (special tokens counted as the plain text they are spelled
/// with, as a user's text is). `None` for an encoding this build does not carry.
pub fn count(encoding: &str, text: &str) -> Option<usize> {
    tiktoken::get_encoding(encoding).map(|bpe| bpe.count(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_equal_an_independent_implementation_on_the_fixtures() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tokens/counts.json"
        );
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let texts = fixture["texts"].as_array().unwrap();
        assert!(texts.len() >= 10);
        for t in texts {
            let text = t["text"].as_str().unwrap();
            for enc in ["o200k_base", "cl100k_base"] {
                assert_eq!(
                    count(enc, text),
                    Some(t[enc].as_u64().unwrap() as usize),
                    "{enc}: {text:?}"
                );
            }
        }
    }

    #[test]
    fn models_map_to_their_encodings() {
        assert_eq!(encoding_for("gpt-4o-mini"), Some("o200k_base"));
        assert_eq!(encoding_for("gpt-5"), Some("o200k_base"));
        assert_eq!(encoding_for("gpt-4"), Some("cl100k_base"));
        assert_eq!(encoding_for("claude-sonnet-4"), None);
    }
}
