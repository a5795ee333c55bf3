//! Supervision: how a parent decides the fate of a failing child.
//!
//! A child fails when a handler or hook returns `Err` or panics. The child suspends (handles no
//! user message) and reports to its parent, whose [`SupervisorStrategy`] picks a [`Directive`].
//! Top-level actors are supervised by the system with [`SupervisorStrategy::default`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What went wrong in a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The error's text or the panic message.
    pub message: String,
    /// Whether the failure was a panic (rather than a returned error).
    pub panicked: bool,
}

impl Failure {
    /// The failure, if any, in a guarded run: `caught` is what [`catch`](crate::panic::catch)
    /// gave back (a panic's text, or the run's own result).
    pub(crate) fn of<T>(caught: Result<crate::ActorResult<T>, String>) -> Result<T, Self> {
        match caught {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Self {
                message: error.to_string(),
                panicked: false,
            }),
            Err(panic) => Err(Self {
                message: panic,
                panicked: true,
            }),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.panicked {
            write!(f, "panicked: {}", self.message)
        } else {
            f.write_str(&self.message)
        }
    }
}

/// The fate of a failed child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// Keep the instance and its state; go on with the next message.
    Resume,
    /// Replace the instance (fresh from its factory, or the same one after `pre_restart`), keep
    /// the mailbox.
    Restart,
    /// Stop the child.
    Stop,
    /// Fail the parent with the child's failure (the child is stopped).
    Escalate,
}

/// Whether a directive applies to the failing child only, or to all its siblings too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Only the failing child (the default).
    #[default]
    OneForOne,
    /// Every child of the parent.
    AllForOne,
}

/// Exponential backoff between restarts: `min × factor^(n-1)`, capped at `max`, where `n` is
/// the number of restarts within the current window.
///
/// Non-exhaustive: made with [`Backoff::new`], so a new setting is not a breaking change.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// Delay before the first restart.
    pub min: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Growth per restart (2.0 doubles).
    pub factor: f64,
}

impl Backoff {
    /// Starts at `min`, multiplies by `factor` per restart, never exceeds `max`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::Backoff;
    ///
    /// let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 2.0);
    /// assert_eq!(b.factor, 2.0);
    /// ```
    pub fn new(min: Duration, max: Duration, factor: f64) -> Self {
        Self { min, max, factor }
    }

    /// The delay before restart number `n` (1-based).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::Backoff;
    ///
    /// let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1), 2.0);
    /// assert_eq!(b.delay(1), Duration::from_millis(100));
    /// assert_eq!(b.delay(3), Duration::from_millis(400));
    /// assert_eq!(b.delay(10), Duration::from_secs(1));
    /// ```
    pub fn delay(&self, n: u32) -> Duration {
        let exponent = n.saturating_sub(1).min(64) as i32;
        let secs = self.min.as_secs_f64() * self.factor.powi(exponent);
        Duration::from_secs_f64(secs.min(self.max.as_secs_f64()))
    }
}

/// How a parent supervises its children.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::{Backoff, Directive, SupervisorStrategy};
///
/// let strategy = SupervisorStrategy::one_for_one()
///     .with_max_restarts(3, Duration::from_secs(10))
///     .with_backoff(Backoff::new(Duration::from_millis(10), Duration::from_secs(1), 2.0))
///     .with_decider(|failure| if failure.panicked { Directive::Restart } else { Directive::Resume });
/// # let _ = strategy;
/// ```
#[derive(Clone)]
pub struct SupervisorStrategy {
    scope: Scope,
    decider: Arc<dyn Fn(&Failure) -> Directive + Send + Sync>,
    max_restarts: u32,
    within: Duration,
    backoff: Option<Backoff>,
}

impl fmt::Debug for SupervisorStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SupervisorStrategy")
            .field("scope", &self.scope)
            .field("max_restarts", &self.max_restarts)
            .field("within", &self.within)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

/// Restarts allowed per window by default: Akka's classic default is unlimited, which hides a
/// crash loop; 10 per minute lets transient faults heal and stops a child that never will.
const DEFAULT_MAX_RESTARTS: u32 = 10;
/// The window that [`DEFAULT_MAX_RESTARTS`] counts in.
const DEFAULT_WITHIN: Duration = Duration::from_secs(60);

impl Default for SupervisorStrategy {
    /// One-for-one, always restart, at most 10 restarts a minute, no backoff.
    fn default() -> Self {
        Self::one_for_one()
    }
}

impl SupervisorStrategy {
    /// Directives apply to the failing child only; always restart by default.
    pub fn one_for_one() -> Self {
        Self {
            scope: Scope::OneForOne,
            decider: Arc::new(|_| Directive::Restart),
            max_restarts: DEFAULT_MAX_RESTARTS,
            within: DEFAULT_WITHIN,
            backoff: None,
        }
    }

    /// Directives apply to every child; always restart by default.
    pub fn all_for_one() -> Self {
        Self {
            scope: Scope::AllForOne,
            ..Self::one_for_one()
        }
    }

    /// A strategy that always stops the failing child.
    pub fn stop() -> Self {
        Self::one_for_one().with_decider(|_| Directive::Stop)
    }

    /// Chooses the directive from the failure.
    pub fn with_decider(
        mut self,
        decider: impl Fn(&Failure) -> Directive + Send + Sync + 'static,
    ) -> Self {
        self.decider = Arc::new(decider);
        self
    }

    /// At most `max` restarts within `within`; one more stops the child.
    pub fn with_max_restarts(mut self, max: u32, within: Duration) -> Self {
        self.max_restarts = max;
        self.within = within;
        self
    }

    /// Waits between restarts, growing exponentially.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// The scope this strategy applies its directives to.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// Decides about one failure, updating the child's restart record.
    pub(crate) fn decide(
        &self,
        failure: &Failure,
        record: &mut RestartRecord,
        now: Instant,
    ) -> Decision {
        match (self.decider)(failure) {
            Directive::Restart => {
                if record
                    .window_start
                    .is_none_or(|start| now.duration_since(start) > self.within)
                {
                    record.window_start = Some(now);
                    record.count = 0;
                }
                record.count += 1;
                if record.count > self.max_restarts {
                    Decision::Stop
                } else {
                    let delay = self
                        .backoff
                        .map_or(Duration::ZERO, |b| b.delay(record.count));
                    Decision::Restart {
                        delay,
                        failure: failure.clone(),
                    }
                }
            }
            Directive::Resume => Decision::Resume,
            Directive::Stop => Decision::Stop,
            Directive::Escalate => Decision::Escalate,
        }
    }
}

/// A decided directive, with what a restart needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Resume,
    Restart { delay: Duration, failure: Failure },
    Stop,
    Escalate,
}

/// Restarts of one child within the current window.
#[derive(Debug, Clone, Default)]
pub(crate) struct RestartRecord {
    window_start: Option<Instant>,
    count: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure {
            message: "boom".into(),
            panicked: false,
        }
    }

    #[test]
    fn restarts_until_the_limit_then_stops() {
        let strategy =
            SupervisorStrategy::one_for_one().with_max_restarts(2, Duration::from_secs(10));
        let mut record = RestartRecord::default();
        let now = Instant::now();
        assert!(matches!(
            strategy.decide(&failure(), &mut record, now),
            Decision::Restart { .. }
        ));
        assert!(matches!(
            strategy.decide(&failure(), &mut record, now),
            Decision::Restart { .. }
        ));
        assert_eq!(
            strategy.decide(&failure(), &mut record, now),
            Decision::Stop
        );
    }

    #[test]
    fn window_resets_the_count() {
        let strategy =
            SupervisorStrategy::one_for_one().with_max_restarts(1, Duration::from_secs(1));
        let mut record = RestartRecord::default();
        let now = Instant::now();
        assert!(matches!(
            strategy.decide(&failure(), &mut record, now),
            Decision::Restart { .. }
        ));
        let later = now + Duration::from_secs(2);
        assert!(matches!(
            strategy.decide(&failure(), &mut record, later),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn backoff_grows_per_restart() {
        let backoff = Backoff {
            min: Duration::from_millis(10),
            max: Duration::from_millis(35),
            factor: 2.0,
        };
        let strategy = SupervisorStrategy::one_for_one().with_backoff(backoff);
        let mut record = RestartRecord::default();
        let now = Instant::now();
        let delays: Vec<Duration> = (0..3)
            .map(|_| match strategy.decide(&failure(), &mut record, now) {
                Decision::Restart { delay, .. } => delay,
                other => panic!("expected restart, got {other:?}"),
            })
            .collect();
        assert_eq!(
            delays,
            [
                Duration::from_millis(10),
                Duration::from_millis(20),
                Duration::from_millis(35)
            ]
        );
    }

    #[test]
    fn decider_picks_the_directive() {
        let strategy = SupervisorStrategy::one_for_one().with_decider(|f| {
            if f.panicked {
                Directive::Stop
            } else {
                Directive::Resume
            }
        });
        let mut record = RestartRecord::default();
        assert_eq!(
            strategy.decide(&failure(), &mut record, Instant::now()),
            Decision::Resume
        );
        let panic = Failure {
            message: "x".into(),
            panicked: true,
        };
        assert_eq!(
            strategy.decide(&panic, &mut record, Instant::now()),
            Decision::Stop
        );
    }
}
