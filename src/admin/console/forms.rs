//! The pages with forms that write: channels and keys (create, edit; for admins only) and the
//! route playground (reads only). Every control has a label.

use maud::{Markup, html};

use super::parts::{field, table};

pub fn channels(admin: bool) -> Markup {
    html! {
        @if admin {
            div.actions { button #new-channel type="button" { "New channel" } }
            form #channel-form.editor hidden {
                h2 #channel-form-title { "New channel" }
                (field("ch-name", "Name", "text", "Letters, digits, - and _"))
                div.field {
                    label for="ch-provider" { "Provider" }
                    select id="ch-provider" name="provider" {
                        @for p in ["openai", "anthropic", "azure", "gemini", "mock"] { option value=(p) { (p) } }
                    }
                }
                (field("ch-base_url", "Base URL", "url", "For example https://api.openai.com/v1"))
                (field("ch-models", "Models", "text", "Comma-separated"))
                (field("ch-api_keys", "API keys", "password", "Comma-separated; kept sealed, shown as their last 4 characters. Left empty on edit: unchanged"))
                (field("ch-priority", "Tier (priority)", "number", "0 is tried first"))
                (field("ch-weight", "Weight", "number", "Share within its tier"))
                div.checks { label { input #ch-enabled name="enabled" type="checkbox" checked; " Enabled" } }
                div.actions {
                    button type="submit" { "Save channel" }
                    button #channel-cancel type="button" { "Cancel" }
                }
            }
        }
        (table("channels", "Channels by model and tier", &["Channel", "Models", "Tier", "Provider",
            "Weight", "Health", "Circuit", "Credentials", "Requests (1 h)", "Error rate", "Source",
            "Actions"]))
    }
}

pub fn keys(admin: bool) -> Markup {
    html! {
        @if admin {
            div.actions { button #new-key type="button" { "New key" } }
            form #key-form.editor hidden {
                h2 #key-form-title { "New key" }
                (field("k-name", "Name", "text", ""))
                (field("k-groups", "Groups", "text", "Comma-separated; empty: every channel"))
                (field("k-rpm", "Requests per minute", "number", "Empty: no limit"))
                (field("k-budget", "Budget (USD per month)", "number", "Empty: no budget"))
                div.actions {
                    button type="submit" { "Save key" }
                    button #key-cancel type="button" { "Cancel" }
                }
            }
            section #secret.secret hidden aria-labelledby="secret-title" {
                h2 #secret-title { "The new key" }
                p { "Shown once: copy it now. The gateway keeps only its hash." }
                div.copy {
                    label for="secret-value" { "Key" }
                    input #secret-value type="text" readonly;
                    button #copy-secret type="button" { "Copy" }
                }
            }
        }
        (table("keys", "Gateway keys", &["Key", "Groups", "Limits", "Budget", "Spend to date",
            "Expires", "Source", "Actions"]))
    }
}

pub fn playground() -> Markup {
    html! {
        form #explain-form.editor {
            div.field {
                label for="x-model" { "Model" }
                input #x-model name="model" type="text" required autocomplete="off" value="auto";
            }
            div.field {
                label for="x-key" { "Key" }
                select #x-key name="key" required {}
            }
            div.field.wide {
                label for="x-prompt" { "Prompt" }
                textarea #x-prompt name="prompt" rows="4" required {}
            }
            div.actions { button type="submit" { "Explain the route" } }
        }
        section #plan hidden aria-labelledby="plan-title" {
            h2 #plan-title { "The plan" }
            dl #plan-facts.facts {}
            (table("candidates", "Candidates by chain step", &["Step", "Model", "Channel", "Tier",
                "Share", "Health", "Circuit", "Latency (ms)", "In flight", "Est. cost (USD)"]))
            (table("excluded", "Left out", &["Step", "Channel", "Why"]))
            (table("scores", "Semantic scores", &["Router", "Instance", "Score", "Winner"]))
            details { summary { "The whole answer (JSON)" } pre #plan-json {} }
        }
    }
}
