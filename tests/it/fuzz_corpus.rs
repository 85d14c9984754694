//! The fuzz corpora (`fuzz/corpus/<target>/`, seeds and what the fuzzer kept, and
//! `fuzz/regressions/<target>/`, every input that once failed) replayed through the very
//! functions the fuzz targets call (`switchyard::fuzz`): their properties hold on every
//! `cargo test`, with no sanitizer build.

use std::path::Path;

use switchyard::fuzz;
use switchyard::protocol::Protocol;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 17] = [
    ("ingress_openai", |d| fuzz::ingress(Protocol::OpenAiChat, d)),
    ("ingress_anthropic", |d| {
        fuzz::ingress(Protocol::AnthropicMessages, d)
    }),
    ("ingress_gemini", |d| fuzz::ingress(Protocol::Gemini, d)),
    ("ingress_responses", |d| {
        fuzz::ingress(Protocol::OpenAiResponses, d)
    }),
    ("stream_openai", |d| fuzz::stream(Protocol::OpenAiChat, d)),
    ("stream_anthropic", |d| {
        fuzz::stream(Protocol::AnthropicMessages, d)
    }),
    ("stream_gemini", |d| fuzz::stream(Protocol::Gemini, d)),
    ("stream_responses", |d| {
        fuzz::stream(Protocol::OpenAiResponses, d)
    }),
    ("ingress_openai_shaped", |d| {
        fuzz::ingress_shaped(Protocol::OpenAiChat, d)
    }),
    ("ingress_anthropic_shaped", |d| {
        fuzz::ingress_shaped(Protocol::AnthropicMessages, d)
    }),
    ("ingress_gemini_shaped", |d| {
        fuzz::ingress_shaped(Protocol::Gemini, d)
    }),
    ("ingress_responses_shaped", |d| {
        fuzz::ingress_shaped(Protocol::OpenAiResponses, d)
    }),
    ("stream_bedrock", fuzz::stream_bedrock),
    ("headers", fuzz::headers),
    ("config", fuzz::config),
    ("tokens", fuzz::tokens),
    ("mcp_message", fuzz::mcp_message),
];

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    files.sort();
    files
}

#[test]
fn every_corpus_input_keeps_its_targets_properties() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    for (name, target) in TARGETS {
        let corpus = inputs(&root.join("corpus").join(name));
        assert!(!corpus.is_empty(), "{name}: no corpus");
        for file in corpus
            .iter()
            .chain(&inputs(&root.join("regressions").join(name)))
        {
            let data = std::fs::read(file).expect("read corpus file");
            let run = std::panic::catch_unwind(|| target(&data));
            assert!(run.is_ok(), "{name}: {} fails", file.display());
        }
    }
}

#[test]
fn every_fuzz_target_is_replayed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    let mut on_disk: Vec<String> = inputs(&dir)
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    on_disk.sort();
    let mut replayed: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    replayed.sort();
    assert_eq!(on_disk, replayed);
}
