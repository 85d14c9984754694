//! The console's HTML: one layout (navigation, the page's one `<h1>`, sign out) and each
//! page's static part (its forms, filters and empty tables). Each page's script fills the
//! tables from the admin API and refreshes them in place. A viewer's pages carry no write
//! control at all (not hidden: absent).

use maud::{DOCTYPE, Markup, html};

use super::parts::{field, table};

/// Every page: its path segment, its title (the `<h1>`), and a one-line purpose.
pub const PAGES: [(&str, &str, &str); 9] = [
    (
        "channels",
        "Channels",
        "Every channel by model and tier, with live health",
    ),
    (
        "keys",
        "Keys",
        "Gateway keys, their limits, budgets and spend",
    ),
    (
        "logs",
        "Request log",
        "Every request, newest first, with its attempts",
    ),
    (
        "performance",
        "Performance",
        "Time to first byte, throughput and errors per channel",
    ),
    (
        "health",
        "Health",
        "Circuits, probes, cooldowns and shared state",
    ),
    ("usage", "Usage", "Spend by key, model, channel and day"),
    (
        "playground",
        "Route playground",
        "Where a request would go, without sending it",
    ),
    (
        "mcp",
        "MCP",
        "MCP servers with their health and tools, and every tool call",
    ),
    (
        "audit",
        "Audit and events",
        "Admin changes, routing events and webhook deliveries",
    ),
];

/// Who is looking, for the layout.
pub struct Viewer<'a> {
    pub name: &'a str,
    pub admin: bool,
    pub csrf: &'a str,
}

fn head(title: &str, script: Option<&str>, csrf: Option<&str>) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · Switchyard" }
            link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml";
            link rel="stylesheet" href="/console/assets/console.css";
            @if let Some(c) = csrf { meta name="csrf-token" content=(c); }
            @if let Some(s) = script {
                link rel="stylesheet" href="/console/assets/uPlot.min.css";
                script src="/console/assets/uPlot.iife.min.js" defer {}
                script src="/console/assets/console.js" defer {}
                script src={ "/console/assets/" (s) ".js" } defer {}
            }
        }
    }
}

/// A page outside the console's navigation (signing in, a path that is no page): its title
/// as its one `<h1>`, then `body`.
fn lone(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, None, None))
            body.signin {
                main id="main" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The sign-in page: one secret field, `type=password`.
/// The sign-in page; with `sso`, a link to sign in through the identity provider first.
pub fn sign_in(message: Option<&str>, sso: bool) -> Markup {
    lone(
        "Sign in",
        html! {
            p.lede { "Switchyard console. Use an admin or viewer token from " code { "[[admins]]" } "." }
            @if let Some(m) = message { p.error role="alert" { (m) } }
            @if sso { p { a.button #sso href="/console/sso/login" { "Sign in with single sign-on" } } }
            form method="post" action="/console/sign-in" {
                label for="token" { "Token" }
                input id="token" name="token" type="password" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
            script src="/console/assets/signin.js" defer {}
        },
    )
}

fn nav(current: &str, who: &Viewer) -> Markup {
    html! {
        header {
            nav aria-label="Console" {
                a.brand href="/console/channels" { "Switchyard" }
                ul {
                    @for (slug, title, _) in PAGES {
                        li {
                            @if slug == current {
                                a href={ "/console/" (slug) } aria-current="page" { (title) }
                            } @else {
                                a href={ "/console/" (slug) } { (title) }
                            }
                        }
                    }
                }
                form.signout method="post" action="/console/sign-out" {
                    input type="hidden" name="csrf" value=(who.csrf);
                    span.who { (who.name) @if !who.admin { " (viewer)" } }
                    button type="submit" { "Sign out" }
                }
            }
        }
    }
}

/// A page of the console, around its body.
pub fn page(slug: &str, who: &Viewer) -> Option<Markup> {
    let (_, title, lede) = PAGES.iter().find(|(s, _, _)| *s == slug)?;
    let body = match slug {
        "channels" => super::forms::channels(who.admin),
        "keys" => super::forms::keys(who.admin),
        "logs" => logs(),
        "performance" => performance(),
        "health" => health(),
        "usage" => usage(),
        "playground" => super::forms::playground(),
        "mcp" => mcp(),
        _ => audit(who.admin),
    };
    Some(html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, Some(slug), Some(who.csrf)))
            body data-page=(slug) data-role=(if who.admin { "admin" } else { "viewer" }) {
                a.skip href="#main" { "Skip to content" }
                (nav(slug, who))
                main id="main" {
                    h1 { (title) }
                    p.lede { (lede) }
                    p.status role="status" aria-live="polite" {}
                    (body)
                }
            }
        }
    })
}

fn logs() -> Markup {
    html! {
        form #filters.filters {
            @for (id, label) in [("f-key", "Key"), ("f-model", "Model"), ("f-channel", "Channel"),
                ("f-status", "Status"), ("f-outcome", "Outcome"), ("f-id", "Request id")] {
                (field(id, label, "text", ""))
            }
            (field("f-since", "From", "datetime-local", ""))
            (field("f-until", "Until", "datetime-local", ""))
            div.checks {
                label { input name="failed_over" type="checkbox"; " Failed over only" }
                label { input name="hide_test" type="checkbox" checked; " Hide test traffic" }
                label { input #autorefresh type="checkbox"; " Auto-refresh (5 s)" }
            }
            div.actions { button type="submit" { "Apply filters" } }
        }
        (table("log", "Requests, newest first", &["Time", "Request id", "Key", "Model", "Channel",
            "Status", "Outcome", "Attempts", "TTFB", "Total", "Tokens/s", "Cost", "Translation"]))
        div.actions { button #older type="button" disabled { "Older requests" } }
        section #detail hidden aria-labelledby="detail-title" {
            h2 #detail-title { "Request" }
            dl #detail-facts {}
            h3 { "Attempts" }
            ol #timeline.timeline {}
            h3 { "Charges" }
            (table("charges", "What each attempt was charged", &["Attempt", "Channel", "Model",
                "Input", "Output", "Cost", "Outcome"]))
        }
    }
}

fn performance() -> Markup {
    html! {
        form #window.filters {
            div.field {
                label for="p-window" { "Window" }
                select id="p-window" name="window" {
                    option value="900" { "15 minutes" }
                    option value="3600" selected { "1 hour" }
                    option value="21600" { "6 hours" }
                    option value="86400" { "24 hours" }
                    option value="604800" { "7 days" }
                }
            }
            div.checks { label { input #autorefresh type="checkbox"; " Auto-refresh (10 s)" } }
        }
        section aria-labelledby="overhead-title" {
            h2 #overhead-title { "The gateway's own time" }
            dl #overhead.facts {}
        }
        (table("perf", "Per channel and model over the window", &["Channel", "Model", "Calls",
            "Error rate", "TTFB p50", "TTFB p95", "Tokens/s"]))
        div #charts.charts {
            figure { figcaption { "TTFB p95 (ms)" } div #chart-ttfb.chart {} }
            figure { figcaption { "Tokens per second" } div #chart-tps.chart {} }
            figure { figcaption { "Error rate" } div #chart-errors.chart {} }
        }
    }
}

fn health() -> Markup {
    html! {
        div.checks { label { input #autorefresh type="checkbox" checked; " Auto-refresh (5 s)" } }
        (table("circuits", "Channels as the router sees them", &["Channel", "Score", "Success rate",
            "Circuit", "Time left", "Cooldown", "Last probe", "Credentials"]))
        section aria-labelledby="shared-title" {
            h2 #shared-title { "Shared state and budgets" }
            dl #shared.facts {}
        }
    }
}

fn usage() -> Markup {
    html! {
        form #usage-form.filters {
            div.field {
                label for="u-by" { "Group by" }
                select id="u-by" name="group_by" {
                    option value="day" selected { "Day" }
                    option value="key" { "Key" }
                    option value="model" { "Model" }
                                        option value="channel" { "Channel" }
                    option value="team" { "Team" }
                    option value="user" { "End user" }
                }
            }
            div.field {
                label for="u-team" { "Team" }
                select id="u-team" name="team" { option value="" selected { "Every team" } }
            }
            (field("u-from", "From", "date", ""))
            (field("u-to", "To", "date", ""))
            div.actions { button type="submit" { "Show" } }
        }
        figure { figcaption { "Spend (USD)" } div #chart-spend.chart {} }
        (table("usage", "Spend by group", &["Group", "Requests", "Attempts", "Input tokens",
            "Cached input", "Cache writes", "Cache hits", "Output tokens", "Cost (USD)",
            "Cache saved (USD)"]))
        (table("budgets", "Budgets and headroom", &["Scope", "Period", "Budget", "Spent",
            "Reserved", "Headroom"]))
        form #charge-form.filters {
            div.field {
                label for="c-id" { "Request id" }
                input id="c-id" name="id" type="text" autocomplete="off" required;
            }
            div.actions { button type="submit" { "Explain the charge" } }
        }
        (table("charge", "The request's charge, attempt by attempt", &["Attempt", "Channel",
            "Credential", "Model", "Tokens in/out", "Rates", "Cost", "Outcome"]))
    }
}

fn mcp() -> Markup {
    html! {
        (table("mcp-servers", "MCP servers", &["Server", "Source", "Replicas", "Tools"]))
        form #mcp-filters.filters {
            @for (id, label) in [("m-key", "Key"), ("m-tool", "Tool"), ("m-server", "Server"),
                ("m-outcome", "Outcome")] {
                (field(id, label, "text", ""))
            }
            div.checks { label { input #autorefresh type="checkbox"; " Auto-refresh (5 s)" } }
            div.actions { button type="submit" { "Apply filters" } }
        }
        (table("mcp-calls", "Tool calls, newest first", &["Time", "Key", "Tool", "Server",
            "Status", "Outcome", "Replicas tried", "Total", "Arguments", "Result"]))
    }
}

fn audit(admin: bool) -> Markup {
    html! {
        (table("audit-log", "Admin changes", &["Time", "Admin", "Action", "Object", "Change"]))
        (table("events", "Routing events", &["Time", "Type", "Subject", "Data"]))
        section aria-labelledby="hooks-title" {
            h2 #hooks-title { "Webhooks" }
            @if admin { p.hint { "Send a test event to a webhook: it goes through the outbox, signed." } }
            div #webhooks {}
        }
    }
}

/// A console path that is no page.
pub fn not_found(slug: &str) -> Markup {
    lone(
        "Not found",
        html! {
            p { "The console has no page " code { (slug) } ". " a href="/console/channels" { "Channels" } }
        },
    )
}
