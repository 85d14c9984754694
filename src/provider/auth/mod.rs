//! Credentials an upstream call needs that are fetched and expire: AWS temporary credentials
//! (`aws.rs`: the standard chain) and Google access tokens (`google.rs`: a service account's
//! JWT grant, the metadata server). Each source sits behind one [`Refreshing`] cache: calls read
//! the value held; one that finds it close to expiry starts a refresh behind it and goes on with
//! the held value; only a value already expired (or never fetched) makes a call wait, and then
//! every call waiting shares the one fetch (single flight). Caches are kept per channel and
//! source across reloads, so a reload does not fetch again.

pub mod aws;
pub mod google;

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;

/// Refreshed on the request path only this close to expiry (or past it).
const MUST: Duration = Duration::from_secs(60);
/// Refreshed behind the request (which goes on with the held value) this close to expiry.
const SOON: Duration = Duration::from_secs(300);
/// After a failed fetch, calls get its error for this long instead of fetching again: a token
/// endpoint that is down or hangs is asked once per interval, not once per waiting request.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A value a source fetched, and until when it holds (`None`: for ever).
#[derive(Debug, Clone)]
pub struct Fetched<T> {
    pub value: T,
    pub expires: Option<SystemTime>,
}

/// Where a refreshing credential comes from.
pub trait Fetch: Send + Sync + 'static {
    type Value: Clone + Send + Sync + 'static;
    /// Fetches anew; the error says why in words that carry no secret.
    fn fetch(&self) -> impl Future<Output = Result<Fetched<Self::Value>, String>> + Send;
    /// What `/admin/health` and `switchyard check` say of it (never a secret).
    fn describe(&self) -> String;
}

/// What the health view shows of a refreshing credential.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthStatus {
    /// Where it comes from (`sts:AssumeRoleWithWebIdentity`, `service account a@b`...).
    pub source: String,
    pub expires: Option<SystemTime>,
    pub refreshed: Option<SystemTime>,
    /// The last refresh's failure, if the last one failed.
    pub error: Option<String>,
    /// Fetches made so far.
    pub fetches: u64,
}

/// One source's value, refreshed ahead of expiry, one fetch at a time.
pub struct Refreshing<F: Fetch> {
    source: F,
    current: ArcSwapOption<Fetched<F::Value>>,
    lock: Arc<tokio::sync::Mutex<()>>,
    status: Mutex<AuthStatus>,
    /// When the last fetch failed, and why (cleared by a success).
    failed: Mutex<Option<(std::time::Instant, String)>>,
}

impl<F: Fetch> Refreshing<F> {
    pub fn new(source: F) -> Self {
        let status = AuthStatus {
            source: source.describe(),
            ..AuthStatus::default()
        };
        Refreshing {
            source,
            current: ArcSwapOption::empty(),
            lock: Arc::new(tokio::sync::Mutex::new(())),
            status: Mutex::new(status),
            failed: Mutex::new(None),
        }
    }

    pub fn status(&self) -> AuthStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The value: the one held while it is good for more than [`MUST`] (refreshed behind the
    /// caller within [`SOON`] of expiry), else a fresh one, fetched once for every caller.
    pub async fn get(self: &Arc<Self>) -> Result<F::Value, String> {
        let now = SystemTime::now();
        if let Some(held) = self.current.load_full() {
            match held.expires {
                None => return Ok(held.value.clone()),
                Some(e) if e > now + MUST => {
                    if e <= now + SOON {
                        self.refresh_behind();
                    }
                    return Ok(held.value.clone());
                }
                Some(_) => {}
            }
        }
        let _one = self.lock.lock().await;
        // Another caller may have fetched while this one waited.
        if let Some(held) = self.current.load_full()
            && held.expires.is_none_or(|e| e > SystemTime::now() + MUST)
        {
            return Ok(held.value.clone());
        }
        if let Some(e) = self.recent_failure() {
            return Err(e);
        }
        self.refresh().await
    }

    /// The last fetch's error, if it failed less than [`RETRY_AFTER_FAILURE`] ago.
    fn recent_failure(&self) -> Option<String> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed
            .as_ref()
            .filter(|(at, _)| at.elapsed() < RETRY_AFTER_FAILURE)
            .map(|(_, e)| e.clone())
    }

    /// Starts a refresh unless one is under way (or one just failed); the callers go on with
    /// the held value.
    fn refresh_behind(self: &Arc<Self>) {
        if self.recent_failure().is_some() {
            return;
        }
        let Ok(guard) = self.lock.clone().try_lock_owned() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let _one = guard;
            let _ = me.refresh().await;
        });
    }

    async fn refresh(&self) -> Result<F::Value, String> {
        let got = self.source.fetch().await;
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        st.fetches += 1;
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        *failed = got
            .as_ref()
            .err()
            .map(|e| (std::time::Instant::now(), e.clone()));
        match got {
            Ok(f) => {
                st.expires = f.expires;
                st.refreshed = Some(SystemTime::now());
                st.error = None;
                let value = f.value.clone();
                self.current.store(Some(Arc::new(f)));
                Ok(value)
            }
            Err(e) => {
                tracing::warn!(source = %st.source, error = %e, "refreshing an upstream credential failed");
                st.error = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// The caches of every channel's sources, by channel and source: a reload that keeps a
/// channel's source keeps its cache (and its value).
static CACHES: LazyLock<Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The cache kept under `key` (the channel and what identifies its source), made with `make`
/// the first time.
pub fn shared<F: Fetch>(key: String, make: impl FnOnce() -> F) -> Arc<Refreshing<F>> {
    let mut all = CACHES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = all.get(&key).cloned()
        && let Ok(c) = found.downcast::<Refreshing<F>>()
    {
        return c;
    }
    let made = Arc::new(Refreshing::new(make()));
    all.insert(key, made.clone());
    made
}

/// A stable short name for what identifies a source (a file path, a role, a key id), for the
/// cache key: no secret goes in it.
pub fn fingerprint(parts: &[&str]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Counting {
        calls: Arc<AtomicU64>,
        lifetime: Duration,
    }

    impl Fetch for Counting {
        type Value = u64;
        async fn fetch(&self) -> Result<Fetched<u64>, String> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(Fetched {
                value: n,
                expires: Some(SystemTime::now() + self.lifetime),
            })
        }
        fn describe(&self) -> String {
            "counting".into()
        }
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_fetch_and_a_fresh_value_is_not_fetched_again() {
        let calls = Arc::new(AtomicU64::new(0));
        let c = Arc::new(Refreshing::new(Counting {
            calls: calls.clone(),
            lifetime: Duration::from_secs(3600),
        }));
        let all = futures_util::future::join_all((0..64).map(|_| {
            let c = c.clone();
            async move { c.get().await }
        }))
        .await;
        assert!(all.iter().all(|r| *r == Ok(1)), "{all:?}");
        assert_eq!(c.get().await, Ok(1));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(c.status().fetches, 1);
    }

    struct Down {
        calls: Arc<AtomicU64>,
    }

    impl Fetch for Down {
        type Value = u64;
        async fn fetch(&self) -> Result<Fetched<u64>, String> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err("connection refused".into())
        }
        fn describe(&self) -> String {
            "down".into()
        }
    }

    #[tokio::test]
    async fn a_failed_fetch_answers_every_waiting_caller_and_is_not_repeated_at_once() {
        let calls = Arc::new(AtomicU64::new(0));
        let c = Arc::new(Refreshing::new(Down {
            calls: calls.clone(),
        }));
        let all = futures_util::future::join_all((0..64).map(|_| {
            let c = c.clone();
            async move { c.get().await }
        }))
        .await;
        assert!(
            all.iter()
                .all(|r| r.as_ref().err().map(String::as_str) == Some("connection refused")),
            "{all:?}"
        );
        assert_eq!(c.get().await, Err("connection refused".into()));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one fetch for 65 callers");
        assert_eq!(c.status().error.as_deref(), Some("connection refused"));
    }

    #[tokio::test]
    async fn a_value_near_expiry_is_refreshed_behind_the_caller_who_keeps_the_held_one() {
        let calls = Arc::new(AtomicU64::new(0));
        // Good for 4 minutes: inside SOON, outside MUST.
        let c = Arc::new(Refreshing::new(Counting {
            calls: calls.clone(),
            lifetime: Duration::from_secs(240),
        }));
        assert_eq!(c.get().await, Ok(1));
        // Held, and a refresh started behind it.
        assert_eq!(c.get().await, Ok(1));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while c.status().fetches < 2 && std::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(c.get().await, Ok(2));
    }
}
