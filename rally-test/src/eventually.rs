//! [`eventually`]: the one bounded poll for a condition that has no event to wait on.

use std::fmt::Debug;
use std::time::Duration;

/// The first pause between two looks; it doubles up to [`LONGEST_PAUSE`], so a condition that
/// holds soon is seen soon and one that takes seconds costs a few dozen looks, not thousands.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two looks: short against the seconds a test waits at most.
const LONGEST_PAUSE: Duration = Duration::from_millis(50);

/// Looks at `look` until it says done, pausing between looks on tokio's clock, and panics
/// with `what` and the last look's answer once `within` has passed.
///
/// Use it where no event says that the condition holds (a counter another task moves, a file
/// that grows, a process that comes up); where a channel, a probe or a member event can be
/// awaited, await that instead. The pauses are tokio sleeps, so on a paused clock
/// ([`paused_runtime`](crate::paused_runtime), `#[tokio::test(start_paused = true)]`) the
/// wait takes no real time.
///
/// `look` answers with anything [`Settled`]: `bool` (done when `true`), `Option<T>` (done
/// with the value when `Some`) or `Result<T, E>` (done with the value when `Ok`; the last
/// `Err` is in the panic message, so say there why it is not done yet).
///
/// # Panics
///
/// When `within` has passed without `look` saying done: the message names `what`, the time
/// waited and the last answer.
///
/// # Cancel safety
///
/// Cancel-safe: dropping the future stops the looks; `look` is never left half-run by the
/// helper (a look that is itself cancelled mid-way is the caller's own future).
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
///
/// rally_test::paused_runtime().block_on(async {
///     let count = Arc::new(AtomicU32::new(0));
///     let counter = count.clone();
///     tokio::spawn(async move {
///         for _ in 0..3 {
///             tokio::time::sleep(Duration::from_millis(20)).await;
///             counter.fetch_add(1, Ordering::Relaxed);
///         }
///     });
///     // A bool: done when true.
///     rally_test::eventually("three ticks", Duration::from_secs(5), async || {
///         count.load(Ordering::Relaxed) == 3
///     })
///     .await;
///     // A Result: the value when Ok; the last Err says why not, if it times out.
///     let seen = rally_test::eventually("a tick", Duration::from_secs(5), async || {
///         match count.load(Ordering::Relaxed) {
///             0 => Err("no tick yet"),
///             n => Ok(n),
///         }
///     })
///     .await;
///     assert_eq!(seen, 3);
/// });
/// ```
pub async fn eventually<R: Settled>(
    what: &str,
    within: Duration,
    mut look: impl AsyncFnMut() -> R,
) -> R::Output {
    let started = tokio::time::Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut looks = 0_u32;
    loop {
        looks += 1;
        let why = match look().await.settled() {
            Ok(output) => return output,
            Err(why) => why,
        };
        let waited = started.elapsed();
        if waited >= within {
            match why {
                Some(why) => panic!(
                    "{what}: not within {within:?} ({looks} looks over {waited:?}); last: {why}"
                ),
                None => panic!("{what}: not within {within:?} ({looks} looks over {waited:?})"),
            }
        }
        tokio::time::sleep(pause.min(within - waited)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// What a look of [`eventually`] answers: done (with a value), or not yet (with why, if known).
pub trait Settled {
    /// What [`eventually`] returns once done.
    type Output;

    /// `Ok` when done; `Err` with why not, when the answer says.
    ///
    /// # Errors
    ///
    /// Not done yet: `Some(why)` when the answer carries a reason.
    fn settled(self) -> Result<Self::Output, Option<String>>;
}

impl Settled for bool {
    type Output = ();

    fn settled(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Settled for Option<T> {
    type Output = T;

    fn settled(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Debug> Settled for Result<T, E> {
    type Output = T;

    fn settled(self) -> Result<T, Option<String>> {
        self.map_err(|why| Some(format!("{why:?}")))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::eventually;

    #[test]
    fn the_panic_names_what_and_the_last_reason() {
        let failed = std::thread::spawn(|| {
            crate::paused_runtime().block_on(async {
                let mut n = 0;
                eventually("the answer", Duration::from_secs(1), async || {
                    n += 1;
                    Err::<(), _>(format!("still {n}"))
                })
                .await;
            });
        })
        .join()
        .expect_err("a condition that never holds must panic");
        let message = failed
            .downcast_ref::<String>()
            .expect("the panic carries a formatted message");
        assert!(
            message.starts_with("the answer: not within 1s ("),
            "{message}"
        );
        assert!(message.contains("last: \"still "), "{message}");
    }

    #[test]
    fn it_returns_as_soon_as_the_look_says_done() {
        crate::paused_runtime().block_on(async {
            let start = tokio::time::Instant::now();
            let mut looks = 0;
            let value = eventually("the third look", Duration::from_secs(60), async || {
                looks += 1;
                (looks == 3).then_some(looks)
            })
            .await;
            assert_eq!(value, 3);
            // Pauses of 1 ms and 2 ms before the second and third looks.
            assert_eq!(start.elapsed(), Duration::from_millis(3));
        });
    }
}
