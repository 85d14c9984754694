//! What the gateway calls its servers' tools, prompts and resources, and its own cursors over
//! their merged lists. A merged list names each item `{server}{separator}{name}` (so two
//! servers' `search` tools stay apart), and a call is sent to the server whose name, with the
//! separator, begins the name: the longest such server, since a server's own name may hold the
//! separator. A merged list is paged with the gateway's cursor: which server the page is in
//! and that server's own cursor, opaque to the client.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// An item's name in the merged lists.
pub fn gateway_name(server: &str, separator: &str, name: &str) -> String {
    format!("{server}{separator}{name}")
}

/// The server and the server's own name of the item `name` means, if any server's does.
pub fn split<'a, 's>(
    servers: impl IntoIterator<Item = &'s str>,
    separator: &str,
    name: &'a str,
) -> Option<(&'s str, &'a str)> {
    servers
        .into_iter()
        .filter_map(|s| {
            let rest = name.strip_prefix(s)?.strip_prefix(separator)?;
            (!rest.is_empty()).then_some((s, rest))
        })
        .max_by_key(|(s, _)| s.len())
}

/// Where a merged list's next page starts: the offset into the key's merged list (the
/// servers' lists, kept by the gateway, in the gateway's order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    #[serde(rename = "o")]
    pub offset: usize,
}

impl Cursor {
    /// The cursor as the client is given it.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// A cursor the gateway gave; `None` for anything else (the client's mistake: the spec's
    /// invalid params).
    pub fn decode(text: &str) -> Option<Cursor> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_name_goes_back_to_its_server_the_longest_that_fits() {
        let servers = ["github", "fs", "fs__mirror"];
        // (gateway name, server and name it means)
        let cases = [
            ("github__create_issue", Some(("github", "create_issue"))),
            ("fs__read_file", Some(("fs", "read_file"))),
            // A server whose name holds the separator wins over its prefix.
            ("fs__mirror__read_file", Some(("fs__mirror", "read_file"))),
            ("jira__create_issue", None),
            ("github__", None),
            ("github", None),
        ];
        for (name, want) in cases {
            assert_eq!(split(servers, "__", name), want, "{name}");
        }
        let n = gateway_name("github", "__", "create_issue");
        assert_eq!(split(servers, "__", &n), Some(("github", "create_issue")));
    }

    #[test]
    fn a_cursor_round_trips_and_anything_else_is_refused() {
        for c in [Cursor { offset: 0 }, Cursor { offset: 300 }] {
            assert_eq!(Cursor::decode(&c.encode()), Some(c));
        }
        for bad in ["", "not base64!", "e30", "eyJvIjoiYSJ9"] {
            assert_eq!(Cursor::decode(bad), None, "{bad:?}");
        }
    }
}
