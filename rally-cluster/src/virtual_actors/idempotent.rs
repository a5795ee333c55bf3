//! Requests that may be sent again: the idempotency key they carry, and when a caller asking
//! until it has a definite answer tries again (sans-I/O: the instants come in, the decision
//! goes out).

use std::fmt;
use std::time::{Duration, Instant};

use rally_remote::RemoteMessage;
use serde::{Deserialize, Serialize};

use super::driver::FAR;
use super::error::AskError;

/// A message that carries an idempotency key: sending it again, with the same key, is safe
/// because its handler applies it once per key ([`State::apply_once`](super::State::apply_once)).
/// Required by [`GrainRef::ask_until_definite`](super::GrainRef::ask_until_definite), which
/// sends the same message again until it has an answer.
///
/// # Example
///
/// ```
/// use rally::Message;
/// use rally::cluster::virtual_actors::{IdempotencyKey, Idempotent};
/// use rally::remote::RemoteMessage;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct Deposit { key: IdempotencyKey, amount: u64 }
/// impl Message for Deposit { type Reply = u64; }
/// impl RemoteMessage for Deposit { const MANIFEST: &'static str = "bank.Deposit"; }
/// impl Idempotent for Deposit {
///     fn idempotency_key(&self) -> &str { self.key.as_str() }
/// }
///
/// let deposit = Deposit { key: IdempotencyKey::new(), amount: 10 };
/// assert_eq!(deposit.clone().idempotency_key(), deposit.idempotency_key());
/// ```
pub trait Idempotent: RemoteMessage + Clone {
    /// The key: the same for every attempt of one operation, different between operations.
    fn idempotency_key(&self) -> &str;
}

/// A fresh idempotency key: 128 random bits as 32 hexadecimal digits. Make one per operation
/// (not per attempt) and keep it in the message.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::IdempotencyKey;
///
/// let key = IdempotencyKey::new();
/// assert_eq!(key.as_str().len(), 32);
/// assert_ne!(key, IdempotencyKey::new());
/// assert_eq!(IdempotencyKey::from("order-17").as_str(), "order-17");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A random key.
    pub fn new() -> Self {
        Self(format!("{:032x}", rand::random::<u128>()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for IdempotencyKey {
    fn default() -> Self {
        Self::new()
    }
}

impl From<&str> for IdempotencyKey {
    fn from(key: &str) -> Self {
        Self(key.to_owned())
    }
}

impl From<String> for IdempotencyKey {
    fn from(key: String) -> Self {
        Self(key)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The shortest wait before trying again after an error that came back at once (no host
/// seen yet, a member that did not take the message): Rally itself re-routes such a message
/// every 20 ms within one ask, so a caller's own retry need not be sooner.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest wait between two attempts: a failover takes seconds (8 s with the defaults),
/// and a retry a second after a host is back is soon enough.
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// The shortest attempt: an ask shorter than this mostly measures the network's jitter.
const MIN_ATTEMPT: Duration = Duration::from_millis(500);

/// When an ask sent until it has a definite answer tries again: each attempt waits at most a
/// quarter of the whole deadline (at least [`MIN_ATTEMPT`], at most what is left), so a
/// message lost with a member is sent again within the deadline; errors that came back at
/// once are retried after a pause that doubles from [`FIRST_PAUSE`] to [`MAX_PAUSE`].
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    deadline: Instant,
    attempt: Duration,
    pause: Duration,
}

/// What to do after an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Wait this long, then try again.
    After(Duration),
    /// Give the error to the caller.
    GiveUp,
}

impl Retry {
    /// A schedule for a request begun at `now` that must have its answer within `within`.
    pub(crate) fn new(now: Instant, within: Duration) -> Self {
        // A deadline too long for the clock is as long as it can be.
        let within = within.min(FAR);
        Self {
            deadline: now + within,
            attempt: (within / 4).max(MIN_ATTEMPT),
            pause: FIRST_PAUSE,
        }
    }

    /// The timeout of an attempt begun at `now`; `None` once the deadline has passed.
    pub(crate) fn attempt_timeout(&self, now: Instant) -> Option<Duration> {
        let left = self.deadline.checked_duration_since(now)?;
        (!left.is_zero()).then(|| left.min(self.attempt))
    }

    /// An attempt failed with `error` at `now`: try again, or not.
    pub(crate) fn after(&mut self, now: Instant, error: &AskError) -> Next {
        if !worth_retrying(error) {
            return Next::GiveUp;
        }
        let Some(left) = self.deadline.checked_duration_since(now) else {
            return Next::GiveUp;
        };
        // An attempt that waited its whole timeout is tried again at once; one that came
        // back early waits a little, longer each time it happens.
        let pause = match error {
            AskError::Timeout(_) => Duration::ZERO,
            _ => {
                let pause = self.pause;
                self.pause = (self.pause * 2).min(MAX_PAUSE);
                pause
            }
        };
        if pause >= left {
            Next::GiveUp
        } else {
            Next::After(pause)
        }
    }
}

/// Whether sending the same keyed message again may give another answer. Not when the
/// request itself is wrong (it would be refused the same way every time) or this member has
/// stopped; yes for everything a failover, a lost connection or a busy member explains, and
/// for a handler's failure (with a key, a retry is answered with the first reply if the first
/// attempt was applied after all).
fn worth_retrying(error: &AskError) -> bool {
    !matches!(
        error,
        AskError::InvalidTimeout
            | AskError::Stopped
            | AskError::UnknownMessage(_)
            | AskError::Undeliverable(_)
            | AskError::SettingsMismatch(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn attempts_take_a_quarter_of_the_deadline_and_never_run_past_it() {
        let t0 = Instant::now();
        let retry = Retry::new(t0, 20 * S);
        assert_eq!(retry.attempt_timeout(t0), Some(5 * S));
        assert_eq!(retry.attempt_timeout(t0 + 18 * S), Some(2 * S));
        assert_eq!(retry.attempt_timeout(t0 + 20 * S), None);
        assert_eq!(retry.attempt_timeout(t0 + 21 * S), None);
        // A short deadline still gets attempts long enough to answer.
        let short = Retry::new(t0, Duration::from_millis(800));
        assert_eq!(short.attempt_timeout(t0), Some(Duration::from_millis(500)));
    }

    #[test]
    fn quick_errors_back_off_doubling_and_timeouts_retry_at_once() {
        let t0 = Instant::now();
        let mut retry = Retry::new(t0, 60 * S);
        let no_host = AskError::NoHost("account".into());
        let pauses: Vec<Next> = (0..7).map(|_| retry.after(t0, &no_host)).collect();
        let ms = |n| Next::After(Duration::from_millis(n));
        assert_eq!(
            pauses,
            [
                ms(50),
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1000),
                ms(1000)
            ]
        );
        assert_eq!(
            retry.after(t0, &AskError::Timeout(S)),
            Next::After(Duration::ZERO)
        );
        let unknown = AskError::OutcomeUnknown("connection lost".into());
        assert_eq!(retry.after(t0, &unknown), ms(1000));
    }

    #[test]
    fn errors_a_retry_cannot_change_are_given_up_at_once() {
        let t0 = Instant::now();
        for error in [
            AskError::InvalidTimeout,
            AskError::Stopped,
            AskError::UnknownMessage("m".into()),
            AskError::Undeliverable("too big".into()),
            AskError::SettingsMismatch("shards".into()),
        ] {
            assert_eq!(
                Retry::new(t0, 60 * S).after(t0, &error),
                Next::GiveUp,
                "{error}"
            );
        }
        for error in [
            AskError::Timeout(S),
            AskError::OutcomeUnknown("x".into()),
            AskError::ReplyLost("x".into()),
            AskError::Failed("stale epoch".into()),
            AskError::Unreachable("x".into()),
            AskError::Expired("x".into()),
            AskError::ActivationFailed("x".into()),
        ] {
            assert_ne!(
                Retry::new(t0, 60 * S).after(t0, &error),
                Next::GiveUp,
                "{error}"
            );
        }
    }

    #[test]
    fn no_pause_runs_past_the_deadline() {
        let t0 = Instant::now();
        let mut retry = Retry::new(t0, 10 * S);
        let error = AskError::NoHost("k".into());
        assert_eq!(
            retry.after(t0 + Duration::from_millis(9_980), &error),
            Next::GiveUp,
            "50 ms of pause with 20 ms left"
        );
        assert_eq!(
            retry.after(t0 + 10 * S, &AskError::Timeout(S)),
            Next::GiveUp
        );
    }

    #[test]
    fn a_deadline_too_long_for_the_clock_is_as_long_as_it_can_be() {
        let t0 = Instant::now();
        let retry = Retry::new(t0, Duration::MAX);
        assert_eq!(retry.attempt_timeout(t0 + 1000 * S), Some(FAR / 4));
    }
}
