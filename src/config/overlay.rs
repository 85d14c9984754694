//! What the store adds to the file: entries in the file's own shapes (the fields of a
//! `[[channels]]` entry, secrets already opened; gateway keys as `key_hash`), appended after the
//! file's entries of the same section and compiled with them, with the same validation. The
//! merged document is kept as the [`View`] the admin API answers from (masked on the way out).

use std::collections::BTreeMap;

use serde_json::Value;

use super::ConfigError;
use crate::secret::Pepper;

/// The sections the admin API manages, and the field that names an entry in each.
pub const SECTIONS: [(&str, &str); 8] = [
    ("channels", "name"),
    ("keys", "name"),
    ("redirects", "id"),
    ("routers", "model"),
    ("models", "name"),
    ("webhooks", "name"),
    ("mcp_servers", "name"),
    ("teams", "name"),
];

/// The field that names an entry of `section`.
pub fn id_field(section: &str) -> Option<&'static str> {
    SECTIONS
        .iter()
        .find(|(s, _)| *s == section)
        .map(|(_, f)| *f)
}

/// The store's entries, by section, at one store version.
#[derive(Clone, Default)]
pub struct Overlay {
    pub entries: BTreeMap<&'static str, Vec<Value>>,
    /// The store's config version these entries are.
    pub version: i64,
    /// What gateway keys made through the API are hashed under.
    pub pepper: Option<Pepper>,
}

impl std::fmt::Debug for Overlay {
    // The entries hold opened secrets: only their counts are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts: BTreeMap<_, _> = self.entries.iter().map(|(k, v)| (*k, v.len())).collect();
        f.debug_struct("Overlay")
            .field("entries", &counts)
            .field("version", &self.version)
            .finish()
    }
}

/// The config as the admin API shows it: the file and the store's entries merged (plaintext,
/// masked when answered), and how many entries of each section the file gave.
#[derive(Default)]
pub struct View {
    pub raw: Value,
    pub file_len: BTreeMap<&'static str, usize>,
    pub store_version: i64,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("file_len", &self.file_len)
            .field("store_version", &self.store_version)
            .finish()
    }
}

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    File,
    Api,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::File => "file",
            Origin::Api => "api",
        }
    }
}

impl View {
    /// A section's entries, each with where it came from.
    pub fn entries(&self, section: &str) -> Vec<(Origin, &Value)> {
        let n = self.file_len.get(section).copied().unwrap_or(0);
        match self.raw.get(section) {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (if i < n { Origin::File } else { Origin::Api }, v))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The entry of `section` named `id`, with its index among the section's entries.
    pub fn entry(&self, section: &str, id: &str) -> Option<(usize, Origin, &Value)> {
        let field = id_field(section)?;
        self.entries(section)
            .into_iter()
            .enumerate()
            .find(|(i, (o, v))| {
                v.get(field).and_then(Value::as_str) == Some(id)
                    || (*o == Origin::File && Some(id) == file_id(section, *i).as_deref())
            })
            .map(|(i, (o, v))| (i, o, v))
    }

    /// The id an entry of `section` is known by in the admin API: its id field, or for a file
    /// entry without one (the file's redirects), `file:<index>`.
    pub fn id_of(&self, section: &str, index: usize, v: &Value) -> Option<String> {
        let field = id_field(section)?;
        match v.get(field).and_then(Value::as_str) {
            Some(id) => Some(id.to_string()),
            None => file_id(section, index),
        }
    }
}

/// A file entry's id where the section's entries carry none in the file (`[[redirects]]`).
fn file_id(section: &str, index: usize) -> Option<String> {
    (section == "redirects").then(|| format!("file:{index}"))
}

/// Appends the overlay's entries to the file's; a name in both is refused at the file's entry.
pub(crate) fn merge(mut raw: Value, ov: &Overlay, shown: &str) -> Result<View, ConfigError> {
    let mut file_len = BTreeMap::new();
    let Some(doc) = raw.as_object_mut() else {
        return Err(ConfigError::field(shown, "", "expected a table"));
    };
    for (section, field) in SECTIONS {
        let list = doc
            .entry(section)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(items) = list.as_array_mut() else {
            continue; // The typed read names the wrong shape.
        };
        file_len.insert(section, items.len());
        let Some(extra) = ov.entries.get(section) else {
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            let id = item.get(field).and_then(Value::as_str);
            if id.is_some_and(|id| {
                extra
                    .iter()
                    .any(|e| e.get(field).and_then(Value::as_str) == Some(id))
            }) {
                return Err(ConfigError::field(
                    shown,
                    format!("{section}[{i}].{field}"),
                    format!(
                        "{:?} is also defined in the store (made through the admin API): remove one",
                        id.unwrap_or_default()
                    ),
                ));
            }
        }
        items.extend(extra.iter().cloned());
    }
    Ok(View {
        raw,
        file_len,
        store_version: ov.version,
    })
}
