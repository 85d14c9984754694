//! The pieces pages and forms are both made of: a labelled input, a table its script fills.

use maud::{Markup, html};

/// A labelled input: `id` is `<prefix>-<name>`, the name its form sends.
pub fn field(id: &str, label: &str, kind: &str, hint: &str) -> Markup {
    html! {
        div.field {
            label for=(id) { (label) }
            input id=(id) name=(id.split_once('-').map_or(id, |(_, n)| n)) type=(kind) autocomplete="off";
            @if !hint.is_empty() { small { (hint) } }
        }
    }
}

/// A table with its header row and an empty body the page's script fills.
pub fn table(id: &str, caption: &str, columns: &[&str]) -> Markup {
    html! {
        div.scroll {
            table id=(id) {
                caption { (caption) }
                thead { tr { @for c in columns { th scope="col" { (c) } } } }
                tbody {}
            }
        }
    }
}
