//! Redirect rules (`[[redirects]]` and each key's): exact names, globs (`*`, `?`) and anchored
//! regexes; a target must be a model some channel serves (unless a regex target substitutes
//! a capture).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::FieldError;
use crate::config::file::{RedirectConfig, RedirectKind};
use crate::config::snapshot::{Matcher, ModelRoute, Redirect};

pub fn compile(
    list: &[RedirectConfig],
    at: &str,
    models: &BTreeMap<Arc<str>, Vec<ModelRoute>>,
) -> Result<Vec<Redirect>, FieldError> {
    let mut out = Vec::with_capacity(list.len());
    for (j, r) in list.iter().enumerate() {
        let here = format!("{at}[{j}]");
        if r.from.is_empty() || r.to.is_empty() {
            return Err((here, "from and to must not be empty".into()));
        }
        let kind = r.kind.unwrap_or(if r.from.contains(['*', '?']) {
            RedirectKind::Glob
        } else {
            RedirectKind::Exact
        });
        let pattern = match kind {
            RedirectKind::Exact => None,
            RedirectKind::Glob => Some(glob_regex(&r.from)),
            RedirectKind::Regex => Some(r.from.clone()),
        };
        let matcher = match pattern {
            None => Matcher::Exact,
            Some(p) => Matcher::Pattern(
                regex_lite::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| (format!("{here}.from"), format!("invalid pattern: {e}")))?,
            ),
        };
        let dynamic = kind == RedirectKind::Regex && r.to.contains('$');
        if !dynamic && !models.contains_key(r.to.as_str()) {
            return Err((
                format!("{here}.to"),
                format!("no channel serves the model {:?}", r.to),
            ));
        }
        out.push(Redirect {
            rule: here.into(),
            from: r.from.as_str().into(),
            to: r.to.as_str().into(),
            matcher,
        });
    }
    Ok(out)
}

/// A glob (`*`, `?`) as an unanchored regex pattern.
pub fn glob_regex(glob: &str) -> String {
    glob.split_inclusive(['*', '?'])
        .map(|part| match part.strip_suffix('*') {
            Some(lit) => format!("{}.*", regex_lite::escape(lit)),
            None => match part.strip_suffix('?') {
                Some(lit) => format!("{}.", regex_lite::escape(lit)),
                None => regex_lite::escape(part),
            },
        })
        .collect()
}
