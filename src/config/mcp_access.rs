//! Which MCP servers and tools a gateway key may reach: `mcp = { servers = [...], tools =
//! [...] }`, each a list of globs (`*`, `?`) where an entry starting with `!` denies. A name is
//! allowed when some allowing entry matches it and no denying one does: deny wins, whatever the
//! order. A key without `mcp` reaches nothing (closed by default); `["*"]` allows all. Tools
//! are matched by their gateway name, `{server}{separator}{tool}`, so a rule can name one
//! server's tools (`github__*`) or one tool everywhere (`*__search`); a tool is reachable only
//! when its server is.

use regex_lite::Regex;

/// One list compiled: what it allows and what it denies.
#[derive(Debug, Clone, Default)]
struct Globs {
    allow: Vec<Regex>,
    deny: Vec<Regex>,
}

impl Globs {
    fn compile(entries: &[String], field: &str) -> Result<Globs, (String, String)> {
        let mut g = Globs::default();
        for (i, e) in entries.iter().enumerate() {
            let (deny, glob) = match e.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, e.as_str()),
            };
            if glob.is_empty() {
                return Err((
                    format!("{field}[{i}]"),
                    "an empty name matches nothing".into(),
                ));
            }
            let re = Regex::new(&format!("^(?:{})$", super::glob_regex(glob)))
                .map_err(|err| (format!("{field}[{i}]"), err.to_string()))?;
            if deny {
                g.deny.push(re);
            } else {
                g.allow.push(re);
            }
        }
        Ok(g)
    }

    fn allows(&self, name: &str) -> bool {
        self.allow.iter().any(|r| r.is_match(name)) && !self.deny.iter().any(|r| r.is_match(name))
    }
}

/// A key's MCP access, compiled. `Access::default()` reaches nothing.
#[derive(Debug, Clone, Default)]
pub struct Access {
    servers: Globs,
    tools: Globs,
}

impl Access {
    /// `servers` and `tools` as written (`field` names the table in errors: `keys[3].mcp`).
    pub fn compile(
        servers: &[String],
        tools: &[String],
        field: &str,
    ) -> Result<Access, (String, String)> {
        Ok(Access {
            servers: Globs::compile(servers, &format!("{field}.servers"))?,
            tools: Globs::compile(tools, &format!("{field}.tools"))?,
        })
    }

    pub fn allows_server(&self, server: &str) -> bool {
        self.servers.allows(server)
    }

    /// Whether `tool` of `server` may be listed and called, by its gateway name.
    pub fn allows_tool(&self, server: &str, separator: &str, tool: &str) -> bool {
        self.allows_server(server) && self.tools.allows(&format!("{server}{separator}{tool}"))
    }
}

#[cfg(test)]
mod tests {
    use super::Access;

    fn access(servers: &[&str], tools: &[&str]) -> Access {
        let s: Vec<String> = servers.iter().map(|x| x.to_string()).collect();
        let t: Vec<String> = tools.iter().map(|x| x.to_string()).collect();
        Access::compile(&s, &t, "keys[0].mcp").unwrap()
    }

    #[test]
    fn deny_wins_and_nothing_is_reached_by_default() {
        let a = access(
            &["github", "fs"],
            &["github__*", "!github__delete_*", "fs__read_?ile"],
        );
        // (server, tool, allowed)
        let cases = [
            ("github", "create_issue", true),
            ("github", "delete_repo", false),
            ("fs", "read_file", true),
            ("fs", "write_file", false),
            // A server the key does not reach: none of its tools, whatever the tool rules say.
            ("jira", "create_issue", false),
        ];
        for (server, tool, allowed) in cases {
            assert_eq!(
                a.allows_tool(server, "__", tool),
                allowed,
                "{server}/{tool}"
            );
        }
        // Deny wins whatever the order.
        let b = access(&["*"], &["!*__delete_*", "*"]);
        assert!(b.allows_tool("any", "__", "search"));
        assert!(!b.allows_tool("any", "__", "delete_all"));
        // Without `mcp`, nothing.
        let none = Access::default();
        assert!(!none.allows_server("github"));
        assert!(!none.allows_tool("github", "__", "create_issue"));
        // A separator of the operator's choosing.
        let dot = access(&["github"], &["github.get_*"]);
        assert!(dot.allows_tool("github", ".", "get_issue"));
        assert!(!dot.allows_tool("github", "__", "get_issue"));
    }

    #[test]
    fn a_bad_entry_is_refused_naming_it() {
        let s = vec!["github".to_string(), "!".to_string()];
        let err = Access::compile(&s, &[], "keys[2].mcp").unwrap_err();
        assert_eq!(err.0, "keys[2].mcp.servers[1]");
    }
}
