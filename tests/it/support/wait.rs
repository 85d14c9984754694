//! Waiting on a condition, never for a fixed time: [`until`] asks again until the condition
//! holds and fails the test, saying what it waited for and what it last saw, past a deadline.
//! Waits on a mock's own counters need no polling: see [`super::eventually`].

use std::fmt::Display;
use std::time::{Duration, Instant};

/// What a probe given to [`until`] answers: done (with a value), or not yet (with what it saw,
/// for the failure message).
pub trait Check {
    type Done;
    fn check(self) -> Result<Self::Done, String>;
}

impl Check for bool {
    type Done = ();
    fn check(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("false".into()) }
    }
}

impl<T> Check for Option<T> {
    type Done = T;
    fn check(self) -> Result<T, String> {
        self.ok_or_else(|| "None".into())
    }
}

/// `Err(seen)`: not yet, and `seen` goes into the failure message.
impl<T, E: Display> Check for Result<T, E> {
    type Done = T;
    fn check(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// How long [`until`] waits before asking again: short, so a wait ends soon after its condition.
const POLL: Duration = Duration::from_millis(10);

/// Asks `probe` until it answers done and returns what it answered; fails the test once
/// `within` has passed (a bound on a wait, never a pause: it ends as soon as the probe says so).
/// The probe answers `bool`, `Option<T>` or `Result<T, seen>`: `seen` (anything `Display`, a
/// JSON body say) is what the failure message shows.
pub async fn until<C: Check>(
    what: &str,
    within: Duration,
    mut probe: impl AsyncFnMut() -> C,
) -> C::Done {
    let deadline = Instant::now() + within;
    loop {
        let seen = match probe().await.check() {
            Ok(done) => return done,
            Err(seen) => seen,
        };
        assert!(
            Instant::now() < deadline,
            "waited {within:?} for {what}; last seen: {seen}"
        );
        tokio::time::sleep(POLL).await;
    }
}
