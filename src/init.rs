//! `switchyard init`: a commented starter config for the providers a user names. Every secret
//! is a `${VAR}` the gateway reads from its environment; the file never holds one.

use std::fmt::Write as _;

use crate::provider::ProviderKind;

/// Every provider `init` can write a channel for, as `--provider` names them.
pub const PROVIDERS: &[ProviderKind] = &[
    ProviderKind::Openai,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
    ProviderKind::Azure,
    ProviderKind::Bedrock,
    ProviderKind::Vertex,
    ProviderKind::Groq,
    ProviderKind::Together,
    ProviderKind::Fireworks,
    ProviderKind::Deepseek,
    ProviderKind::Mistral,
    ProviderKind::Xai,
    ProviderKind::Openrouter,
    ProviderKind::Cerebras,
    ProviderKind::Perplexity,
    ProviderKind::Ollama,
    ProviderKind::Vllm,
    ProviderKind::Lmstudio,
    ProviderKind::Mock,
];

/// The environment variable the gateway key is read from.
pub const KEY_VAR: &str = "SWITCHYARD_KEY";

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("unknown provider {0:?}; one of: {list}", list = names())]
    UnknownProvider(String),
    #[error("name at least one provider (--provider openai,anthropic,...); one of: {list}", list = names())]
    NoProvider,
    #[error("provider {0:?} is named twice")]
    Twice(String),
}

/// Every provider's name, as `--provider` takes them.
pub fn names() -> String {
    let v: Vec<&str> = PROVIDERS.iter().map(|p| p.as_str()).collect();
    v.join(", ")
}

/// The providers of a comma-separated list, in its order.
pub fn parse_providers(list: &str) -> Result<Vec<ProviderKind>, InitError> {
    let mut out: Vec<ProviderKind> = Vec::new();
    for word in list
        .split([',', ' '])
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        let word = word.to_ascii_lowercase();
        let kind = PROVIDERS
            .iter()
            .copied()
            .find(|p| p.as_str() == word)
            .ok_or_else(|| InitError::UnknownProvider(word.clone()))?;
        if out.contains(&kind) {
            return Err(InitError::Twice(word));
        }
        out.push(kind);
    }
    if out.is_empty() {
        return Err(InitError::NoProvider);
    }
    Ok(out)
}

/// The environment variables the written config reads, in the order a user sets them.
pub fn variables(providers: &[ProviderKind]) -> Vec<&'static str> {
    let mut out = vec![KEY_VAR];
    for p in providers {
        out.extend(channel(*p).vars);
    }
    out
}

/// A model: the name clients use, and the upstream's where it differs.
type Model = (&'static str, Option<&'static str>);

/// What one provider's channel says: its lines before `models`, its models and the variables
/// the lines read.
struct Channel {
    lines: &'static str,
    models: &'static [Model],
    vars: &'static [&'static str],
}

fn channel(p: ProviderKind) -> Channel {
    use ProviderKind as K;
    let (lines, models, vars): (&str, &[Model], &[&str]) = match p {
        K::Openai => (
            "base_url = \"https://api.openai.com/v1\"\napi_keys = [\"${OPENAI_API_KEY}\"]\n",
            &[("gpt-5.4-mini", None), ("gpt-4o", None)],
            &["OPENAI_API_KEY"],
        ),
        K::Anthropic => (
            "base_url = \"https://api.anthropic.com\"\napi_keys = [\"${ANTHROPIC_API_KEY}\"]\n",
            &[("claude-sonnet-4-5", None), ("claude-haiku-4-5", None)],
            &["ANTHROPIC_API_KEY"],
        ),
        K::Gemini => (
            "base_url = \"https://generativelanguage.googleapis.com\"\napi_keys = [\"${GEMINI_API_KEY}\"]\n",
            &[("gemini-2.5-flash", None), ("gemini-2.5-pro", None)],
            &["GEMINI_API_KEY"],
        ),
        K::Azure => (
            "base_url = \"${AZURE_OPENAI_ENDPOINT}\"       # https://<resource>.openai.azure.com\napi_version = \"2024-10-21\"\napi_keys = [\"${AZURE_OPENAI_API_KEY}\"]\n# Each model's upstream is your deployment's name.\n",
            &[("gpt-4o", Some("gpt-4o"))],
            &["AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY"],
        ),
        K::Bedrock => (
            "region = \"us-east-1\"\n# Credentials: the standard AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,\n# AWS_PROFILE, or a role); docs/bedrock.md.\n",
            &[(
                "claude-sonnet-4-5",
                Some("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            )],
            &["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
        ),
        K::Vertex => (
            "project = \"${GOOGLE_CLOUD_PROJECT}\"\nlocation = \"us-east5\"                 # global or a region\n# Credentials: GOOGLE_APPLICATION_CREDENTIALS (a service account's key file), else the\n# metadata server; docs/vertex.md.\n",
            &[
                ("gemini-2.5-flash", None),
                ("claude-sonnet-4-5", Some("claude-sonnet-4-5@20250929")),
            ],
            &["GOOGLE_CLOUD_PROJECT"],
        ),
        K::Groq => (
            "api_keys = [\"${GROQ_API_KEY}\"]\n",
            &[("llama-3.3-70b-versatile", None)],
            &["GROQ_API_KEY"],
        ),
        K::Together => (
            "api_keys = [\"${TOGETHER_API_KEY}\"]\n",
            &[("meta-llama/Llama-3.3-70B-Instruct-Turbo", None)],
            &["TOGETHER_API_KEY"],
        ),
        K::Fireworks => (
            "api_keys = [\"${FIREWORKS_API_KEY}\"]\n",
            &[("accounts/fireworks/models/llama-v3p3-70b-instruct", None)],
            &["FIREWORKS_API_KEY"],
        ),
        K::Deepseek => (
            "api_keys = [\"${DEEPSEEK_API_KEY}\"]\n",
            &[("deepseek-chat", None), ("deepseek-reasoner", None)],
            &["DEEPSEEK_API_KEY"],
        ),
        K::Mistral => (
            "api_keys = [\"${MISTRAL_API_KEY}\"]\n",
            &[
                ("mistral-large-latest", None),
                ("mistral-small-latest", None),
            ],
            &["MISTRAL_API_KEY"],
        ),
        K::Xai => (
            "api_keys = [\"${XAI_API_KEY}\"]\n",
            &[("grok-4", None)],
            &["XAI_API_KEY"],
        ),
        K::Openrouter => (
            "api_keys = [\"${OPENROUTER_API_KEY}\"]\n",
            &[
                ("openai/gpt-4o", None),
                ("anthropic/claude-sonnet-4.5", None),
            ],
            &["OPENROUTER_API_KEY"],
        ),
        K::Cerebras => (
            "api_keys = [\"${CEREBRAS_API_KEY}\"]\n",
            &[("llama-3.3-70b", None)],
            &["CEREBRAS_API_KEY"],
        ),
        K::Perplexity => (
            "api_keys = [\"${PERPLEXITY_API_KEY}\"]\n",
            &[("sonar", None), ("sonar-pro", None)],
            &["PERPLEXITY_API_KEY"],
        ),
        K::Ollama => (
            "# base_url = \"http://127.0.0.1:11434/v1\"   # the default; no key\n",
            &[("llama3.2", None)],
            &[],
        ),
        K::Vllm => (
            "# base_url = \"http://127.0.0.1:8000/v1\"    # the default; no key unless vLLM's --api-key\n",
            &[("my-model", None)],
            &[],
        ),
        K::Lmstudio => (
            "# base_url = \"http://127.0.0.1:1234/v1\"    # the default; no key\n",
            &[("my-model", None)],
            &[],
        ),
        K::Mock => (
            "# Answers in-process: for trying things out.\n",
            &[("demo", None)],
            &[],
        ),
    };
    Channel {
        lines,
        models,
        vars,
    }
}

/// Writes the config's JSON Schema at `path` (what the `#:schema` line names), unless a file
/// there is not one of ours (then `false`: it is left alone). Ours is refreshed: it is
/// generated, and this binary's is the one that matches the config it checks.
pub fn write_schema(path: &std::path::Path) -> std::io::Result<bool> {
    let schema = crate::config::schema::schema();
    if let Ok(old) = std::fs::read(path) {
        let ours = serde_json::from_slice::<serde_json::Value>(&old)
            .is_ok_and(|v| v["title"] == crate::config::schema::TITLE);
        if !ours {
            return Ok(false);
        }
    }
    let text = serde_json::to_string_pretty(&schema).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")?;
    Ok(true)
}

/// The whole config for `providers`.
pub fn render(providers: &[ProviderKind]) -> String {
    let mut s = String::from(HEAD);
    let _ = writeln!(
        s,
        "# A request naming the first model is served by the next when it cannot be (a chain):\n\
         # failover_defaults = {{ models = [{}], first_token_timeout_ms = 10000 }}",
        chain_example(providers)
    );
    s.push_str(KEY_TAIL);
    for p in providers {
        let name = p.as_str();
        let c = channel(*p);
        let models: Vec<String> = c
            .models
            .iter()
            .map(|(m, upstream)| match upstream {
                Some(u) => format!("{{ name = \"{m}\", upstream = \"{u}\" }}"),
                None => format!("\"{m}\""),
            })
            .collect();
        let _ = write!(
            s,
            "\n[[channels]]\nname = \"{name}\"\nprovider = \"{name}\"\n{}models = [{}]\npriority = 1                         # lower is preferred; a tier is tried before the next\n",
            c.lines,
            models.join(", ")
        );
    }
    s.push_str(TAIL);
    s
}

/// Two different models the providers serve, quoted: each provider's first, then each one's
/// second, and so on.
fn chain_example(providers: &[ProviderKind]) -> String {
    let lists: Vec<&[Model]> = providers.iter().map(|p| channel(*p).models).collect();
    let longest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
    let mut picked: Vec<&str> = Vec::new();
    for (m, _) in (0..longest).flat_map(|i| lists.iter().filter_map(move |l| l.get(i))) {
        if !picked.contains(m) && picked.len() < 2 {
            picked.push(m);
        }
    }
    let quoted: Vec<String> = picked.iter().map(|m| format!("\"{m}\"")).collect();
    quoted.join(", ")
}

const HEAD: &str = r#"#:schema ./switchyard.schema.json
# Switchyard config, written by `switchyard init`. Every secret is a ${VAR} read from the
# environment when the gateway starts; none is written here. Reference: docs/config.md.
#   switchyard check --config switchyard.toml     # what would be served, or what is wrong
#   switchyard serve --config switchyard.toml     # run it (SIGHUP re-reads this file)

[server]
listen = "127.0.0.1:8080"          # 0.0.0.0:8080 to take connections from other machines
# admin_token = "${SWITCHYARD_ADMIN_TOKEN}"   # the admin API and the console at /console

[log]
sqlite_path = "switchyard.db"      # the request log (embedded SQLite)

[[keys]]                           # what clients present as their API key
name = "default"
key = "${SWITCHYARD_KEY}"
"#;

const KEY_TAIL: &str = r#"# budget = { usd = 50, period = "month" }    # spend per period, exact across replicas
# rpm = 600                                  # requests per minute
"#;

const TAIL: &str = r#"
# Tiers: a channel with `priority = 2` serves a model only when every priority-1 channel of it
# cannot; `weight` shares first tries inside a tier. docs/config.md#channels

# Keep a conversation on the channel that served its first turn (providers' prompt caches stay
# warm); with several replicas, share it through Redis. docs/affinity.md
# [affinity]
# ttl_seconds = 86400
# [state]
# url = "redis://127.0.0.1:6379"

# Channels and keys managed through the admin API and the console, secrets sealed at rest;
# PostgreSQL when replicas share it. docs/admin.md
# [store]
# url = "sqlite://store.db"
# master_key = "${SWITCHYARD_MASTER_KEY}"   # openssl rand -base64 32
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_example_names_two_models_the_channels_serve() {
        let one = [ProviderKind::Openai];
        assert_eq!(chain_example(&one), "\"gpt-5.4-mini\", \"gpt-4o\"");
        let two = [ProviderKind::Bedrock, ProviderKind::Anthropic];
        assert_eq!(
            chain_example(&two),
            "\"claude-sonnet-4-5\", \"claude-haiku-4-5\""
        );
    }
}
