//! Teams: `[[teams]]` as written and compiled into a tree at most three deep (organisation >
//! team > sub-team), each level with its own budget and limits, and what a key of a team
//! carries ([`Membership`]): the levels its requests must fit, from its team up to the root,
//! reserved and settled in the meters' one atomic step, and its end users' limits.

use std::collections::{BTreeMap, HashMap};
use std::num::{NonZeroU32, NonZeroU64};
use std::sync::Arc;

use serde::Deserialize;

use super::quota::{BudgetConfig, Fail, Quota, QuotaFields};

type FieldError = (String, String);

/// The deepest a tree of teams goes: organisation > team > sub-team.
pub const MAX_DEPTH: usize = 3;

/// `[[teams]]` as written.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TeamConfig {
    pub name: String,
    /// The team this one is part of (none: an organisation, a root).
    pub parent: Option<String>,
    /// The channel groups its keys may reach (none: what the key says).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Models its keys may ask for, globs (none: every model).
    #[serde(default)]
    pub models: Vec<String>,
    pub budget: Option<BudgetConfig>,
    pub rpm: Option<NonZeroU32>,
    pub tpm: Option<NonZeroU64>,
    pub max_concurrency: Option<NonZeroU32>,
    pub limits_fail: Option<Fail>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// What each end user of the team (and of its sub-teams that set none) may use.
    pub user_limits: Option<UserLimitsConfig>,
}

/// `[teams.user_limits]`: the budget and limits each end user gets.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserLimitsConfig {
    pub budget: Option<BudgetConfig>,
    pub rpm: Option<NonZeroU32>,
    pub tpm: Option<NonZeroU64>,
    pub max_concurrency: Option<NonZeroU32>,
    pub limits_fail: Option<Fail>,
    /// End users counted at once; past it the longest idle is forgotten, spend and all.
    pub max_tracked_users: Option<NonZeroU64>,
}

/// The end users counted per team unless `max_tracked_users` says otherwise.
pub const MAX_TRACKED_USERS: u64 = 100_000;

/// A team's end-user limits, compiled.
#[derive(Debug, Clone)]
pub struct UserLimits {
    pub quota: Quota,
    pub max_tracked: u64,
}

/// One team, compiled.
#[derive(Debug)]
pub struct Team {
    pub name: Arc<str>,
    /// Its parent's place in [`Teams::list`].
    pub parent: Option<usize>,
    /// 1 for an organisation.
    pub depth: usize,
    pub groups: Vec<Arc<str>>,
    pub models: Vec<regex_lite::Regex>,
    pub quota: Quota,
    /// Its meters' scope: `team:<name>`.
    pub scope: Arc<str>,
    /// Its organisation's scope: the Redis hash tag of every level's counters in its tree.
    pub tag: Arc<str>,
    pub metadata: BTreeMap<String, String>,
    pub users: Option<UserLimits>,
}

impl Team {
    /// Whether its keys may ask for `model` (no list: any).
    pub fn allows_model(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|r| r.is_match(model))
    }
}

/// Every team, parents before their children's use of them.
#[derive(Debug, Default)]
pub struct Teams {
    pub list: Vec<Team>,
    by_name: HashMap<Arc<str>, usize>,
}

impl Teams {
    pub fn find(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The levels a request of team `i` must fit: the team, its parent, up to the root.
    pub fn chain(&self, i: usize) -> impl Iterator<Item = &Team> {
        std::iter::successors(self.list.get(i), |t| {
            t.parent.and_then(|p| self.list.get(p))
        })
    }
}

/// The teams, checked: names unique, parents that exist, no tree deeper than [`MAX_DEPTH`]
/// (a circle of parents is one that never ends), models as globs, limits as a key's.
pub fn compile(list: &[TeamConfig]) -> Result<Teams, FieldError> {
    let mut by_name = HashMap::new();
    for (i, t) in list.iter().enumerate() {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if t.name.is_empty() || !t.name.chars().all(ok) {
            return Err((
                format!("teams[{i}].name"),
                "letters, digits, '.', '_' and '-' only".into(),
            ));
        }
        if by_name
            .insert(Arc::<str>::from(t.name.as_str()), i)
            .is_some()
        {
            return Err((
                format!("teams[{i}].name"),
                format!("duplicate team {:?}", t.name),
            ));
        }
    }
    let mut teams = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = |f: &str| format!("teams[{i}].{f}");
        let parent = match &t.parent {
            None => None,
            Some(p) => Some(
                *by_name
                    .get(p.as_str())
                    .ok_or_else(|| (at("parent"), format!("no team named {p:?}")))?,
            ),
        };
        let depth = depth(list, &by_name, i).ok_or_else(|| {
            (
                at("parent"),
                format!("teams are at most {MAX_DEPTH} deep (organisation > team > sub-team), and a team is not its own ancestor"),
            )
        })?;
        let mut models = Vec::with_capacity(t.models.len());
        for (j, m) in t.models.iter().enumerate() {
            let re = regex_lite::Regex::new(&format!("^(?:{})$", super::glob_regex(m)))
                .map_err(|e| (at(&format!("models[{j}]")), e.to_string()))?;
            models.push(re);
        }
        let quota = super::quota::compile(QuotaFields {
            budget: t.budget.as_ref(),
            rpm: t.rpm,
            tpm: t.tpm,
            max_concurrency: t.max_concurrency,
            limits_fail: t.limits_fail,
            channel: false,
        })
        .map_err(|(f, m)| (at(f), m))?;
        let users = match &t.user_limits {
            None => None,
            Some(u) => Some(UserLimits {
                quota: super::quota::compile(QuotaFields {
                    budget: u.budget.as_ref(),
                    rpm: u.rpm,
                    tpm: u.tpm,
                    max_concurrency: u.max_concurrency,
                    limits_fail: u.limits_fail,
                    channel: false,
                })
                .map_err(|(f, m)| (at(&format!("user_limits.{f}")), m))?,
                max_tracked: u
                    .max_tracked_users
                    .map_or(MAX_TRACKED_USERS, NonZeroU64::get),
            }),
        };
        teams.push(Team {
            name: t.name.as_str().into(),
            parent,
            depth,
            groups: t.groups.iter().map(|g| g.as_str().into()).collect(),
            models,
            quota,
            scope: format!("team:{}", t.name).into(),
            tag: Arc::from(""),
            metadata: t.metadata.clone(),
            users,
        });
    }
    let mut teams = Teams {
        list: teams,
        by_name,
    };
    for i in 0..teams.list.len() {
        let root = teams.chain(i).last().map(|t| t.scope.clone());
        teams.list[i].tag = root.unwrap_or_default();
    }
    for (i, t) in teams.list.iter().enumerate() {
        let Some(p) = t.parent else { continue };
        let above = teams.groups(p);
        if let Some(g) = t
            .groups
            .iter()
            .find(|g| !above.is_empty() && !above.contains(g))
        {
            return Err((
                format!("teams[{i}].groups"),
                format!("{g:?} is not among the groups of its parent team"),
            ));
        }
    }
    Ok(teams)
}

/// What a key of a team carries, compiled once with the config.
#[derive(Debug)]
pub struct Membership {
    /// Its team's name.
    pub team: Arc<str>,
    /// Every level above the key that has a limit, from its team up to the root.
    pub levels: Vec<(Arc<str>, Quota)>,
    /// The organisation's scope. Every level's counters (the key's and its end users' too)
    /// share it as their Redis hash tag, so one script takes them all on one Cluster slot.
    pub tag: Arc<str>,
    /// Each end user's limits: those of the nearest team of the chain that sets them.
    pub users: Option<EndUsers>,
    /// The model allow-lists of the levels that have one: a model must match every one.
    models: Vec<Vec<regex_lite::Regex>>,
}

/// The end users of a team, as its keys count them.
#[derive(Debug)]
pub struct EndUsers {
    /// The scope of the team whose limits they are: it names the set they are counted in.
    pub team: Arc<str>,
    /// An end user's scope is this prefix (`user:<team>/`) and its id.
    pub prefix: String,
    pub limits: UserLimits,
}

impl EndUsers {
    pub fn scope(&self, user: &str) -> Arc<str> {
        format!("{}{user}", self.prefix).into()
    }
}

impl Membership {
    /// Whether every level lets its keys ask for `model`.
    pub fn allows_model(&self, model: &str) -> bool {
        self.models
            .iter()
            .all(|list| list.iter().any(|r| r.is_match(model)))
    }
}

impl Teams {
    /// The channel groups team `i`'s keys may reach: the nearest level's that names any.
    pub fn groups(&self, i: usize) -> &[Arc<str>] {
        self.chain(i)
            .find(|t| !t.groups.is_empty())
            .map_or(&[], |t| &t.groups)
    }

    /// What a key of team `i` carries.
    pub fn membership(&self, i: usize) -> Membership {
        let chain: Vec<&Team> = self.chain(i).collect();
        Membership {
            team: self.list[i].name.clone(),
            levels: chain
                .iter()
                .filter(|t| !t.quota.is_empty())
                .map(|t| (t.scope.clone(), t.quota.clone()))
                .collect(),
            tag: self.list[i].tag.clone(),
            users: chain.iter().find_map(|t| {
                Some(EndUsers {
                    team: t.scope.clone(),
                    prefix: format!("user:{}/", t.name),
                    limits: t.users.clone()?,
                })
            }),
            models: chain
                .iter()
                .filter(|t| !t.models.is_empty())
                .map(|t| t.models.clone())
                .collect(),
        }
    }
}

/// How deep team `i` is (1: a root), or `None` past [`MAX_DEPTH`] (a circle included).
fn depth(list: &[TeamConfig], by_name: &HashMap<Arc<str>, usize>, i: usize) -> Option<usize> {
    let mut at = i;
    for d in 1..=MAX_DEPTH {
        match list[at].parent.as_deref() {
            None => return Some(d),
            Some(p) => at = *by_name.get(p)?,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn teams(toml_text: &str) -> Result<Teams, FieldError> {
        #[derive(Deserialize)]
        struct Doc {
            teams: Vec<TeamConfig>,
        }
        let doc: Doc = toml::from_str(toml_text).expect("TOML");
        compile(&doc.teams)
    }

    #[test]
    fn a_chain_runs_from_the_team_to_its_organisation() {
        let t = teams(
            r#"
            [[teams]]
            name = "acme"
            budget = { usd = 1000 }
            [[teams]]
            name = "platform"
            parent = "acme"
            models = ["gpt-*"]
            rpm = 600
            [[teams]]
            name = "infra"
            parent = "platform"
            metadata = { cost_center = "42" }
            "#,
        )
        .unwrap();
        let infra = t.find("infra").unwrap();
        let chain: Vec<(&str, usize, &str)> = t
            .chain(infra)
            .map(|x| (&*x.name, x.depth, &*x.scope))
            .collect();
        assert_eq!(
            chain,
            [
                ("infra", 3, "team:infra"),
                ("platform", 2, "team:platform"),
                ("acme", 1, "team:acme")
            ]
        );
        let platform = &t.list[t.find("platform").unwrap()];
        assert!(platform.allows_model("gpt-4o") && !platform.allows_model("claude-3"));
        assert_eq!(platform.quota.rpm, Some(600));
        assert!(t.list[t.find("acme").unwrap()].quota.budget.is_some());
        assert!(t.list[infra].allows_model("anything"));
    }

    #[test]
    fn bad_trees_are_refused_naming_the_field() {
        // (teams, the field refused)
        let cases = [
            (
                "[[teams]]\nname = \"a\"\nparent = \"nobody\"",
                "teams[0].parent",
            ),
            (
                "[[teams]]\nname = \"a\"\n[[teams]]\nname = \"a\"",
                "teams[1].name",
            ),
            (
                "[[teams]]\nname = \"a\"\nparent = \"b\"\n[[teams]]\nname = \"b\"\nparent = \"a\"",
                "teams[0].parent",
            ),
            (
                "[[teams]]\nname = \"o\"\n[[teams]]\nname = \"t\"\nparent = \"o\"\n\
                 [[teams]]\nname = \"s\"\nparent = \"t\"\n[[teams]]\nname = \"x\"\nparent = \"s\"",
                "teams[3].parent",
            ),
            ("[[teams]]\nname = \"two words\"", "teams[0].name"),
            (
                "[[teams]]\nname = \"a\"\nbudget = { usd = -1 }",
                "teams[0].budget",
            ),
        ];
        for (text, field) in cases {
            let err = teams(text).unwrap_err();
            assert!(err.0.starts_with(field), "{text}: {err:?}");
        }
    }
}
