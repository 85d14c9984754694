//! Turn-aware trimming, pure: which messages to keep so that a request fits a budget, removing
//! whole groups oldest first and never the instructions or the latest user turn.
//!
//! Groups: a user message with the assistant replies that follow it; an assistant message that
//! calls tools with every tool result answering it (parallel calls stay together). A tool
//! result is never kept without its call, nor a call without its results. Kept always: system
//! and developer messages, the latest user turn, and the last exchange (in an agent loop, the
//! tool results the model is about to read); the tool exchanges between them are history like
//! any other. A cut never leaves the history opening with anything but a user turn.

use crate::protocol::{Message, Role};

/// What trimming decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trimmed {
    /// Indices of the messages kept, in order.
    pub kept: Vec<usize>,
    /// Whole groups removed.
    pub removed_groups: usize,
    /// Tokens of what is kept (plus the fixed part).
    pub tokens: u64,
}

/// Even the minimum (instructions, tools, the latest user turn) exceeds the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request needs at least {minimum} tokens; the model's budget is {budget}")]
pub struct TooLong {
    pub minimum: u64,
    pub budget: u64,
}

/// The history as atomic groups, oldest first (index ranges), and which of them are protected.
/// System and developer messages are in no group: they are never removed.
fn groups(messages: &[Message]) -> (Vec<std::ops::Range<usize>>, Vec<bool>) {
    let latest_user = messages.iter().rposition(|m| m.role == Role::User);
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if matches!(m.role, Role::System | Role::Developer) {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        if m.role == Role::Assistant && !m.tool_calls.is_empty() {
            // The call and every result that answers it.
            while i < messages.len() && messages[i].role == Role::Tool {
                i += 1;
            }
        } else if m.role == Role::User {
            // The user's turn and the plain replies to it (a reply that calls tools starts its
            // own group, with its results).
            while i < messages.len()
                && messages[i].role == Role::Assistant
                && messages[i].tool_calls.is_empty()
            {
                i += 1;
            }
        } else if m.role == Role::Tool {
            // A result whose call is not in the history: it goes with what precedes it.
            if let Some(prev) = groups.last_mut().filter(|g| g.end == start) {
                prev.end = i;
                continue;
            }
        }
        // One client message split in two (an Anthropic user turn with tool results and
        // text) is cut whole or not at all: its parts' groups become one.
        let source = |k: usize| messages[k].source;
        match groups.last_mut() {
            Some(prev)
                if prev.end == start
                    && source(start).is_some()
                    && source(start) == source(start - 1) =>
            {
                prev.end = i;
            }
            _ => groups.push(start..i),
        }
    }
    // The last exchange (what the model answers next), the latest user turn and the latest
    // group a user message opens stay. The last two differ when a client message carries tool
    // results and text together (Claude Code's): the text is the latest user message, inside a
    // tool exchange, and the task that opened the loop must still open the history.
    let last = groups.len().saturating_sub(1);
    let opened_by_user = groups
        .iter()
        .rposition(|g| messages[g.start].role == Role::User);
    let protected = groups
        .iter()
        .enumerate()
        .map(|(g, r)| {
            g == last || Some(g) == opened_by_user || latest_user.is_some_and(|u| r.contains(&u))
        })
        .collect();
    (groups, protected)
}

/// Whether a history cut just before group `g` would leave it opening the conversation with
/// something other than a user message (Anthropic refuses that; it reads oddly anywhere).
fn opens_badly(messages: &[Message], g: &std::ops::Range<usize>) -> bool {
    messages[g.start].role != Role::User
}

/// Keeps what fits: `fixed` tokens (tools, message framing) plus each kept message's count must
/// stay within `budget`. When everything fits, nothing is removed. Otherwise whole groups go,
/// oldest first, until the total is at most `target` (≤ `budget`), so that later turns reuse
/// the same cut and the provider's prompt cache keeps hitting.
pub fn trim(
    messages: &[Message],
    counts: &[u64],
    fixed: u64,
    budget: u64,
    target: u64,
) -> Result<Trimmed, TooLong> {
    let total: u64 = fixed + counts.iter().sum::<u64>();
    let all = || (0..messages.len()).collect::<Vec<_>>();
    if total <= budget {
        return Ok(Trimmed {
            kept: all(),
            removed_groups: 0,
            tokens: total,
        });
    }
    let (groups, protected) = groups(messages);
    let system = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.role, Role::System | Role::Developer))
        .map(|(i, _)| counts[i])
        .sum::<u64>();
    let kept_groups = groups
        .iter()
        .zip(&protected)
        .filter(|(_, p)| **p)
        .map(|(g, _)| g.clone().map(|i| counts[i]).sum::<u64>())
        .sum::<u64>();
    let minimum = fixed + system + kept_groups;
    if minimum > budget {
        return Err(TooLong { minimum, budget });
    }
    let goal = target.min(budget).max(minimum);
    let mut now = total;
    let mut removed = 0;
    let mut dropped = vec![false; messages.len()];
    let removable = groups
        .iter()
        .zip(&protected)
        .filter(|(_, p)| !**p)
        .map(|(g, _)| g);
    for g in removable {
        // Enough is gone, and the history now opens with a user turn.
        let opens_well = groups
            .iter()
            .find(|r| !dropped[r.start])
            .is_none_or(|r| !opens_badly(messages, r));
        if now <= goal && opens_well {
            break;
        }
        now -= g.clone().map(|i| counts[i]).sum::<u64>();
        g.clone().for_each(|i| dropped[i] = true);
        removed += 1;
    }
    Ok(Trimmed {
        kept: (0..messages.len()).filter(|&i| !dropped[i]).collect(),
        removed_groups: removed,
        tokens: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCall;

    fn msg(role: Role) -> Message {
        Message::new(role, "x")
    }

    fn call() -> Message {
        let mut m = msg(Role::Assistant);
        m.tool_calls.push(ToolCall::Function {
            id: Some("c".into()),
            name: "f".into(),
            arguments: Some("{}".into()),
            extra: Default::default(),
        });
        m
    }

    /// system, [user, assistant], [user, call, tool, tool], [assistant], user(latest)
    fn history() -> Vec<Message> {
        vec![
            msg(Role::System),
            msg(Role::User),
            msg(Role::Assistant),
            msg(Role::User),
            call(),
            msg(Role::Tool),
            msg(Role::Tool),
            msg(Role::User),
        ]
    }

    #[test]
    fn everything_that_fits_is_kept() {
        let h = history();
        let t = trim(&h, &[10; 8], 5, 1000, 800).unwrap();
        assert_eq!(t.kept.len(), 8);
        assert_eq!(t.removed_groups, 0);
        assert_eq!(t.tokens, 85);
    }

    #[test]
    fn whole_groups_go_oldest_first_down_to_the_target_and_tool_exchanges_stay_whole() {
        let h = history();
        // 85 tokens, budget 80: the oldest group (user + reply, 20) takes it to 65 ≤ target 70.
        let t = trim(&h, &[10; 8], 5, 80, 70).unwrap();
        assert_eq!(t.kept, [0, 3, 4, 5, 6, 7]);
        assert_eq!(t.removed_groups, 1);
        assert_eq!(t.tokens, 65);
        // A lower target removes the next turn; the call goes with both of its results.
        let t = trim(&h, &[10; 8], 5, 80, 40).unwrap();
        assert_eq!(t.kept, [0, 7]);
        assert_eq!(t.removed_groups, 3);
        assert!(t.tokens <= 40);
    }

    #[test]
    fn the_system_prompt_and_the_latest_turn_are_never_removed() {
        let h = history();
        let mut counts = [10; 8];
        counts[0] = 30;
        counts[7] = 40;
        let err = trim(&h, &counts, 20, 80, 60).unwrap_err();
        assert_eq!(
            err,
            TooLong {
                minimum: 90,
                budget: 80
            }
        );
        let t = trim(&h, &counts, 5, 80, 60).unwrap();
        assert!(t.kept.contains(&0) && t.kept.contains(&7));
        assert!(t.tokens <= 80);
    }

    #[test]
    fn a_tool_result_is_never_kept_without_its_call() {
        let h = history();
        for target in 0..100 {
            let Ok(t) = trim(&h, &[10; 8], 5, 80, target) else {
                continue;
            };
            let has = |i| t.kept.contains(&i);
            assert_eq!(has(4), has(5), "{target}");
            assert_eq!(has(4), has(6), "{target}");
        }
    }

    #[test]
    fn an_agent_loop_after_one_user_turn_sheds_its_oldest_tool_exchanges() {
        // system, user (the task), then five call/result exchanges.
        let mut h = vec![msg(Role::System), msg(Role::User)];
        for _ in 0..5 {
            h.push(call());
            h.push(msg(Role::Tool));
        }
        let counts = [10; 12];
        let t = trim(&h, &counts, 0, 90, 80).unwrap();
        // The task and the exchange the model answers next stay; the oldest exchanges went.
        assert_eq!(t.kept, [0, 1, 6, 7, 8, 9, 10, 11]);
        assert_eq!(t.removed_groups, 2);
        // At most: system, task, last exchange.
        let t = trim(&h, &counts, 0, 90, 0).unwrap();
        assert_eq!(t.kept, [0, 1, 10, 11]);
        assert_eq!(trim(&h, &counts, 0, 30, 0).unwrap_err().minimum, 40);
    }

    #[test]
    fn a_cut_never_leaves_the_history_opening_with_a_reply() {
        // system, [user, reply], [call, tool], user(latest): removing the first group alone
        // would open with a tool call, so the call goes too.
        let h = vec![
            msg(Role::System),
            msg(Role::User),
            msg(Role::Assistant),
            call(),
            msg(Role::Tool),
            msg(Role::User),
        ];
        let t = trim(&h, &[10; 6], 0, 55, 45).unwrap();
        assert_eq!(t.kept, [0, 5]);
        assert_eq!(t.removed_groups, 2);
    }

    #[test]
    fn tool_results_sent_with_text_keep_the_task_opening_the_history() {
        // Claude Code's shape: the task, then exchanges whose results come in a client message
        // with text (one source, so the text is a user message inside the exchange's group).
        let mut h = vec![msg(Role::User)];
        h[0].source = Some(0);
        for k in 0..4u32 {
            let mut c = call();
            c.source = Some(1 + 2 * k);
            let mut r = msg(Role::Tool);
            r.source = Some(2 + 2 * k);
            let mut t = msg(Role::User);
            t.source = Some(2 + 2 * k);
            h.extend([c, r, t]);
        }
        let t = trim(&h, &[10; 13], 0, 100, 70).unwrap();
        // The task stays first; the oldest exchanges go, each whole with its text.
        assert_eq!(t.kept[0], 0);
        assert_eq!(t.kept[1..], [7, 8, 9, 10, 11, 12]);
        assert_eq!(t.removed_groups, 2);
    }
}
