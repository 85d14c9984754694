//! Semantic routing: a virtual model (`model: "auto"`) picks the instance whose examples the
//! prompt is most like. Reference embeddings are computed once per router and config version,
//! in one batch, normalised and cached; a request costs one embedding and a few dot products.
//! Every embedding problem fails open to the catchall: routing never turns it into a 5xx.

mod embed;
pub mod eval;
#[cfg(feature = "local-embedder")]
pub mod local;
pub mod rule;

pub use embed::{EmbedError, hashed};
pub use rule::Rule;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{RouterFailover, SemanticRouter, Snapshot};
use crate::health::Health;
use crate::protocol::{ChatRequest, Role};

/// What a router decided for one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The router's virtual model name.
    pub router: Arc<str>,
    /// The models to try, in order (the chain the decision becomes).
    pub models: Vec<Arc<str>>,
    /// The winning instance; `None` = no instance cleared its threshold (or embedding failed):
    /// the catchall serves.
    pub winner: Option<Arc<str>>,
    /// Every instance with examples and its score, highest first; empty when embedding failed
    /// or the decision was kept from the session's first routed turn.
    pub scores: Vec<(Arc<str>, f32)>,
    /// Kept from the session's first routed turn (no embedding this time).
    pub kept: bool,
    /// The levels it was decided by (none when kept or when embedding failed).
    pub rule: Option<Arc<Rule>>,
}

impl Decision {
    /// The session's earlier choice, if that instance still exists: the same instance, so an
    /// agent's tool loop is not switched between models mid-task (then the catchall, unless
    /// the router's failover is `none`).
    pub fn kept(router: &SemanticRouter, instance: &str) -> Option<Decision> {
        let i = router.instances.iter().position(|x| &*x.name == instance)?;
        let mut models = vec![router.instances[i].model.clone()];
        let catchall = &router.instances[router.catchall].model;
        if router.failover != RouterFailover::None && !models.contains(catchall) {
            models.push(catchall.clone());
        }
        Some(Decision {
            router: router.model.clone(),
            models,
            winner: Some(router.instances[i].name.clone()),
            scores: Vec::new(),
            kept: true,
            rule: None,
        })
    }

    /// The instance to remember for the session: the winner, or the catchall when scores put
    /// it there; nothing when embedding failed (a later turn decides again).
    pub fn chosen<'a>(&'a self, router: &'a SemanticRouter) -> Option<&'a str> {
        if self.kept || self.scores.is_empty() {
            return None;
        }
        Some(
            self.winner
                .as_deref()
                .unwrap_or(&router.instances[router.catchall].name),
        )
    }

    /// `code:0.8213,translate:0.1904`.
    pub fn scores_text(&self) -> String {
        self.scores
            .iter()
            .map(|(n, s)| format!("{n}:{s:.4}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A router's instances' example embeddings, normalised (instance index, vectors), and the
/// rule they calibrate.
#[derive(Debug)]
pub struct References {
    pub vectors: Vec<(usize, Vec<Vec<f32>>)>,
    pub rule: Arc<Rule>,
}

/// One router's references for one config version: computed by one request while the others
/// wait (never a batch per concurrent request); a failure is not retried for a while.
#[derive(Default)]
enum RefState {
    #[default]
    Empty,
    Ready(Arc<References>),
    Failed(std::time::Instant),
}

/// (config version, router index) → that router's references.
type RefCache = HashMap<(u64, usize), Arc<tokio::sync::Mutex<RefState>>>;

/// How long a failed batch of examples is not tried again (requests fail open meanwhile).
const RETRY_REFS_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// The reference cache; lives as long as the process (across config swaps, keyed by version).
#[derive(Default)]
pub struct Semantic {
    refs: Mutex<RefCache>,
    /// In-process models, loaded once per directory.
    pub(crate) locals: Locals,
}

/// The local models by directory, and the bound on embeddings queued for them.
pub(crate) struct Locals {
    #[cfg(feature = "local-embedder")]
    models: Mutex<HashMap<String, Arc<LoadOnce>>>,
    #[cfg(feature = "local-embedder")]
    queue: Arc<tokio::sync::Semaphore>,
}

impl Default for Locals {
    fn default() -> Self {
        Locals {
            #[cfg(feature = "local-embedder")]
            models: Mutex::new(HashMap::new()),
            #[cfg(feature = "local-embedder")]
            queue: Arc::new(tokio::sync::Semaphore::new(LOCAL_QUEUE)),
        }
    }
}

/// A model loaded at most once (or the reason it could not be).
#[cfg(feature = "local-embedder")]
type LoadOnce = tokio::sync::OnceCell<Result<Arc<local::LocalModel>, String>>;

/// Embeddings waiting for (or running on) the blocking pool at once; past it the request
/// fails open to the catchall rather than queueing behind the CPU.
#[cfg(feature = "local-embedder")]
const LOCAL_QUEUE: usize = 64;

impl Locals {
    /// Embeds `texts` with the model in `dir` (loaded on first use, once), off the runtime.
    #[cfg(feature = "local-embedder")]
    pub(crate) async fn embed(
        &self,
        dir: &str,
        texts: &[String],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let cell = {
            let mut m = self.models.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(dir.to_string()).or_default().clone()
        };
        let path = std::path::PathBuf::from(dir);
        let model = cell
            .get_or_init(|| async move {
                let loaded = tokio::task::spawn_blocking(move || local::LocalModel::load(&path))
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()));
                match &loaded {
                    Ok(_) => tracing::info!(model_dir = dir, "local embedder loaded"),
                    Err(e) => tracing::error!(model_dir = dir, error = %e, "local embedder failed to load: its routers send everything to their catchall"),
                }
                loaded.map(Arc::new)
            })
            .await
            .clone()
            .map_err(EmbedError::LocalLoad)?;
        let permit = self
            .queue
            .clone()
            .try_acquire_owned()
            .map_err(|_| EmbedError::Busy)?;
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            texts
                .iter()
                .map(|t| model.embed(t))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| EmbedError::LocalLoad(e.to_string()))?
        .map_err(EmbedError::LocalLoad)
    }

    #[cfg(not(feature = "local-embedder"))]
    pub(crate) async fn embed(
        &self,
        dir: &str,
        _texts: &[String],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::LocalUnavailable(dir.to_string()))
    }
}

impl Semantic {
    /// Decides for `req`'s prompt with router `idx` of `snap`. Never fails: any embedding
    /// problem sends the request to the catchall (logged with what is known).
    pub async fn decide(
        &self,
        snap: &Snapshot,
        health: &Health,
        idx: usize,
        req: &ChatRequest,
    ) -> Decision {
        let router = &snap.routers[idx];
        let prompt = prompt(req);
        let scored = match prompt.as_deref() {
            Some(p) => self.score(snap, health, idx, p).await,
            None => Err(EmbedError::NoPrompt),
        };
        match scored {
            Ok((scores, refs)) => {
                let d = rule::decide(router, &refs.rule, scores);
                if d.winner.is_none() {
                    tracing::warn!(
                        router = &*router.model,
                        scores = %d.scores_text(),
                        "no instance cleared its threshold: the catchall serves"
                    );
                }
                d
            }
            Err(e) => {
                tracing::warn!(
                    router = &*router.model,
                    error = %e,
                    "semantic routing failed open: the catchall serves"
                );
                rule::fallback(router, Vec::new(), None)
            }
        }
    }

    /// One text's unit vector by `spec` (the response cache's questions), within `within`.
    pub async fn embed_one(
        &self,
        snap: &Snapshot,
        health: &Health,
        spec: &crate::config::EmbedderSpec,
        text: &str,
        within: std::time::Duration,
    ) -> Result<Vec<f32>, EmbedError> {
        let v = embed::embed(
            snap,
            health,
            &self.locals,
            spec,
            &[text.to_string()],
            within,
        )
        .await?
        .pop()
        .ok_or(EmbedError::Malformed("no vector for the text".into()))?;
        normalize(v).ok_or(EmbedError::Malformed("a zero vector for the text".into()))
    }

    /// Loads the in-process models the config names, so that the first request does not wait.
    pub async fn warm(&self, snap: &Snapshot) {
        for r in &snap.routers {
            if let crate::config::EmbedderSpec::Local { model_dir } = &r.embedder {
                let _ = self.locals.embed(model_dir, &["warm up".to_string()]).await;
            }
        }
    }

    /// (instance index, score) for every instance with examples, highest first, and the
    /// references they were scored against (with their rule).
    pub async fn score(
        &self,
        snap: &Snapshot,
        health: &Health,
        idx: usize,
        prompt: &str,
    ) -> Result<(Vec<(usize, f32)>, Arc<References>), EmbedError> {
        let router = &snap.routers[idx];
        let refs = self.references(snap, health, idx).await?;
        let q = embed::embed(
            snap,
            health,
            &self.locals,
            &router.embedder,
            &[prompt.to_string()],
            router.timeout,
        )
        .await?
        .pop()
        .ok_or(EmbedError::Malformed("no vector for the prompt".into()))?;
        let q = normalize(q).ok_or(EmbedError::Malformed("a zero vector for the prompt".into()))?;
        let mut scores = Vec::with_capacity(refs.vectors.len());
        for (i, vectors) in refs.vectors.iter() {
            if vectors.first().is_some_and(|v| v.len() != q.len()) {
                return Err(EmbedError::Dimension {
                    got: q.len(),
                    want: vectors[0].len(),
                });
            }
            // An instance scores by its closest example.
            let best = vectors
                .iter()
                .map(|v| dot(v, &q))
                .fold(f32::NEG_INFINITY, f32::max);
            scores.push((*i, best));
        }
        scores.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok((scores, refs))
    }

    /// Router `idx`'s references for this config version: embedded once, then cached.
    pub async fn references(
        &self,
        snap: &Snapshot,
        health: &Health,
        idx: usize,
    ) -> Result<Arc<References>, EmbedError> {
        let key = (snap.version, idx);
        let cell = {
            let mut cache = self.lock();
            if !cache.contains_key(&key) {
                // Older configs' references are of no more use (newer ones are kept).
                cache.retain(|(v, _), _| *v >= snap.version);
            }
            cache.entry(key).or_default().clone()
        };
        let mut state = cell.lock().await;
        match &*state {
            RefState::Ready(r) => return Ok(r.clone()),
            RefState::Failed(at) if at.elapsed() < RETRY_REFS_AFTER => {
                return Err(EmbedError::Upstream(
                    "the examples could not be embedded; trying again shortly".into(),
                ));
            }
            _ => {}
        }
        let computed = self.compute_references(snap, health, idx).await;
        *state = match &computed {
            Ok(r) => RefState::Ready(r.clone()),
            Err(_) => RefState::Failed(std::time::Instant::now()),
        };
        computed
    }

    async fn compute_references(
        &self,
        snap: &Snapshot,
        health: &Health,
        idx: usize,
    ) -> Result<Arc<References>, EmbedError> {
        let router = &snap.routers[idx];
        // One batch for every example of every instance.
        let mut texts = Vec::new();
        let mut owners = Vec::new();
        for (i, inst) in router.instances.iter().enumerate() {
            for ex in &inst.examples {
                texts.push(ex.clone());
                owners.push(i);
            }
        }
        let vectors = embed::embed(
            snap,
            health,
            &self.locals,
            &router.embedder,
            &texts,
            router.timeout * 10,
        )
        .await?;
        if vectors.len() != texts.len() {
            return Err(EmbedError::Malformed(format!(
                "{} vectors for {} examples",
                vectors.len(),
                texts.len()
            )));
        }
        let mut refs: Vec<(usize, Vec<Vec<f32>>)> = Vec::new();
        let mut dims = None;
        for (owner, v) in owners.into_iter().zip(vectors) {
            if *dims.get_or_insert(v.len()) != v.len() {
                return Err(EmbedError::Malformed(
                    "examples of different dimensions".into(),
                ));
            }
            let Some(v) = normalize(v) else {
                continue;
            };
            match refs.iter_mut().find(|(i, _)| *i == owner) {
                Some((_, vs)) => vs.push(v),
                None => refs.push((owner, vec![v])),
            }
        }
        let rule = Arc::new(rule::calibrate(router, &refs));
        Ok(Arc::new(References {
            vectors: refs,
            rule,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RefCache> {
        self.refs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The prompt: the last user message that carries text (text parts joined; tool results are
/// not prompts).
pub fn prompt(req: &ChatRequest) -> Option<String> {
    req.messages
        .iter()
        .rev()
        .filter(|m| m.role == Role::User)
        .find_map(|m| {
            let text = m.content.as_ref()?.text();
            (!text.trim().is_empty()).then_some(text)
        })
}

/// Unit length; `None` for a zero (or non-finite) vector, which has no direction.
pub fn normalize(mut v: Vec<f32>) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return None;
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Some(v)
}

/// Cosine of two unit vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;
    use crate::provider::HttpClients;

    const BASE: &str = r#"
        [[channels]]
        name = "c"
        provider = "mock"
        models = ["big", "small"]
        [[routers]]
        model = "auto"
        [[routers.instances]]
        name = "hard"
        model = "big"
        examples = ["prove this theorem"]
        [[routers.instances]]
        name = "easy"
        model = "small"
        catchall = true
    "#;

    fn load(text: &str) -> Result<Snapshot, String> {
        load_str(text, "t.toml", &|_| None, &HttpClients::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn router_config_errors_name_their_field() {
        assert!(load(BASE).is_ok());
        let auto = BASE.replace(
            "model = \"auto\"",
            "model = \"auto\"\nthreshold = \"auto\"\nmargin = 0.1",
        );
        assert_eq!(
            load(&auto).unwrap().routers[0].margin,
            crate::config::Level::Fixed(0.1)
        );
        let cases = [
            (BASE.replace("examples = [\"prove this theorem\"]", ""), "routers[0].instances[0].examples"),
            (BASE.replace("\"prove this theorem\"", &vec!["\"x\""; 65].join(", ")), "routers[0].instances[0].examples"),
            (BASE.replace("examples = [\"prove this theorem\"]", "examples = [\"p\"]\ncatchall = true"), "routers[0].instances[1].catchall"),
            (BASE.replace("model = \"auto\"", "model = \"auto\"\nthreshold = 1.5"), "routers[0].threshold"),
            (BASE.replace("model = \"auto\"", "model = \"auto\"\nthreshold = \"high\""), "routers[0].threshold"),
            (BASE.replace("model = \"auto\"", "model = \"auto\"\nmargin = 2"), "routers[0].margin"),
            (BASE.replace("examples = [\"prove this theorem\"]", "examples = [\"p\"]\nthreshold = -2"), "routers[0].instances[0].threshold"),
            (BASE.replace("model = \"big\"", "model = \"huge\""), "routers[0].instances[0].model"),
            (BASE.replace("model = \"auto\"", "model = \"auto\"\nembedder = { kind = \"channel\", channel = \"nope\", model = \"e\" }"), "routers[0].embedder.channel"),
            (BASE.replace("model = \"auto\"", "model = \"big\""), "routers[0].model"),
            (
                BASE.replace("examples = [\"prove this theorem\"]", "examples = [\"p\", \" \"]"),
                "routers[0].instances[0].examples[1]",
            ),
            (BASE.replace("name = \"easy\"", "name = \"hard\""), "routers[0].instances[1].name"),
            (
                BASE.replace("model = \"auto\"", "model = \"auto\"\ntimeout_ms = 0"),
                "routers[0].timeout_ms",
            ),
        ];
        for (text, field) in cases {
            let err = load(&text).unwrap_err();
            assert!(err.contains(field), "{field}: {err}");
        }
        let no_instances = BASE
            .split("[[routers.instances]]")
            .next()
            .unwrap()
            .to_string();
        let err = load(&no_instances).unwrap_err();
        assert!(
            err.contains("routers[0]") && err.contains("instances"),
            "{err}"
        );
    }

    fn router_of(snap: &Snapshot) -> &SemanticRouter {
        &snap.routers[0]
    }

    /// The rule with every threshold at 0.5 and a margin of 0.05.
    fn decision(r: &SemanticRouter, scores: Vec<(usize, f32)>) -> Decision {
        let n = r.instances.len();
        // A margin written in the config: it applies to fixed thresholds too.
        let fixed = Rule {
            thresholds: vec![0.5; n],
            derived: vec![false; n],
            margin: 0.05,
            margin_derived: false,
        };
        rule::decide(r, &Arc::new(fixed), scores)
    }

    #[test]
    fn decisions_follow_thresholds_and_the_failover_mode() {
        let snap = load(&BASE.replace(
            "[[routers.instances]]\n        name = \"easy\"",
            "[[routers.instances]]\n        name = \"mid\"\n        model = \"small\"\n        examples = [\"m\"]\n        [[routers.instances]]\n        name = \"easy\"",
        ))
        .unwrap();
        let r = router_of(&snap);
        // hard 0.9, mid 0.6: ranked = hard, then mid (same model collapses), then catchall.
        let d = decision(r, vec![(0, 0.9), (1, 0.6)]);
        assert_eq!(d.winner.as_deref(), Some("hard"));
        assert_eq!(d.models, [Arc::from("big"), Arc::from("small")]);
        // `catchall`: the winner, then the catchall (not the runner-up); `none`: the winner.
        let mut r2 = load(&BASE.replace(
            "model = \"auto\"",
            "model = \"auto\"\nfailover = \"catchall\"",
        ))
        .unwrap();
        let d = decision(router_of(&r2), vec![(0, 0.9)]);
        assert_eq!(d.models, [Arc::from("big"), Arc::from("small")]);
        r2 = load(&BASE.replace("model = \"auto\"", "model = \"auto\"\nfailover = \"none\""))
            .unwrap();
        let d = decision(router_of(&r2), vec![(0, 0.9)]);
        assert_eq!(d.models, [Arc::from("big")]);
        // Nothing clears 0.5 and nothing leads by the margin: the catchall alone.
        let d = decision(r, vec![(0, 0.4), (1, 0.38)]);
        assert_eq!(d.winner, None);
        assert_eq!(d.models, [Arc::from("small")]);
        assert_eq!(d.scores_text(), "hard:0.4000,mid:0.3800");
        // A clear lead wins below the level.
        let d = decision(r, vec![(0, 0.4), (1, 0.1)]);
        assert_eq!(d.winner.as_deref(), Some("hard"));
    }

    #[test]
    fn the_prompt_is_the_last_user_text_and_empty_input_has_none() {
        use crate::protocol::openai::request_from_value;
        let req = |messages: serde_json::Value| {
            request_from_value(serde_json::json!({"model": "auto", "messages": messages})).unwrap()
        };
        let r = req(serde_json::json!([
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "text", "text": "b"}]},
            {"role": "tool", "tool_call_id": "t", "content": "tool output is not a prompt"}
        ]));
        assert_eq!(prompt(&r).as_deref(), Some("a\nb"));
        // Whitespace, or an image alone, is no prompt: the catchall serves without an embedding.
        let r = req(serde_json::json!([{"role": "user", "content": "   "}]));
        assert_eq!(prompt(&r), None);
        let r = req(
            serde_json::json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]}]),
        );
        assert_eq!(prompt(&r), None);
    }

    #[test]
    fn zero_vectors_have_no_direction_and_cosine_is_a_dot_of_unit_vectors() {
        assert_eq!(normalize(vec![0.0, 0.0]), None);
        assert_eq!(normalize(vec![f32::NAN, 1.0]), None);
        let a = normalize(vec![3.0, 4.0]).unwrap();
        assert!((dot(&a, &a) - 1.0).abs() < 1e-6);
        let b = normalize(vec![-3.0, -4.0]).unwrap();
        assert!((dot(&a, &b) + 1.0).abs() < 1e-6);
        assert_eq!(dot(&[], &[]), 0.0);
    }

    #[test]
    fn the_hashed_embedder_is_deterministic_and_close_for_similar_text() {
        let a = normalize(hashed("debug this stack trace")).unwrap();
        let b = normalize(hashed("please debug my stack trace")).unwrap();
        let c = normalize(hashed("translate to french")).unwrap();
        assert_eq!(hashed("x y"), hashed("x y"));
        assert!(
            dot(&a, &b) > dot(&a, &c),
            "{} vs {}",
            dot(&a, &b),
            dot(&a, &c)
        );
        assert_eq!(normalize(hashed("")), None);
    }
}
