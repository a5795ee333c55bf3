//! Panics in handlers are failures the supervisor handles, not crashes: while a handler runs,
//! the process's panic hook stays quiet and only notes where the panic happened; the runtime
//! logs the failure once, through `tracing`, with the actor's path.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Once;
use std::task::{Context, Poll};

thread_local! {
    /// How many handler polls this thread is inside (nested when a handler polls another
    /// actor's future, which never happens in practice but costs nothing to allow).
    static CATCHING: Cell<u32> = const { Cell::new(0) };
    /// Where the last quiet panic on this thread happened.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

/// Installs, once per process, a panic hook that is silent for panics the runtime catches and
/// calls the hook that was there before for every other panic.
pub(crate) fn install_hook() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) > 0 {
                let location = info.location().map(ToString::to_string);
                LOCATION.with(|slot| *slot.borrow_mut() = location);
            } else {
                previous(info);
            }
        }));
    });
}

/// Marks this thread as inside a handler poll until dropped (also when unwinding).
struct Catching;

impl Catching {
    fn enter() -> Self {
        CATCHING.with(|c| c.set(c.get() + 1));
        Self
    }
}

impl Drop for Catching {
    fn drop(&mut self) {
        CATCHING.with(|c| c.set(c.get() - 1));
    }
}

/// Polls `future`, catching a panic as its text (with the place it happened, when known)
/// without the panic hook printing it. The hook is installed when the system starts.
pub(crate) fn catch<F: Future>(future: F) -> CatchPanic<F> {
    CatchPanic { inner: future }
}

/// Runs `f`, catching a panic the way Rally catches a handler's: quietly (the process's panic
/// hook does not print it) and as its text, with the place it happened when known. For code
/// that runs user callbacks on the runtime's behalf (a transport encoding a message, a hook).
///
/// # Errors
///
/// The panic's text when `f` panicked.
///
/// # Example
///
/// ```
/// assert_eq!(rally::catch_panic(|| 7), Ok(7));
/// let caught = rally::catch_panic(|| -> u32 { panic!("boom") }).unwrap_err();
/// assert!(caught.starts_with("boom (at "), "{caught}");
/// ```
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    catch_now(f)
}

pin_project_lite::pin_project! {
    /// A future that catches a panic of the one it wraps as [`catch_panic`] does: its output
    /// is `Err` with the panic's text when a poll panicked.
    ///
    /// The inner future is held once, in place (an `async fn` that re-pinned its argument held
    /// it twice, which pushed every handled message's boxed future onto the allocator's slow
    /// over-aligned path: -6% to -9% in remote ping-pong).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// let caught = rally::CatchPanic::new(async { panic!("late") }).await;
    /// assert!(caught.unwrap_err().starts_with("late"));
    /// # }
    /// ```
    pub struct CatchPanic<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> CatchPanic<F> {
    /// Wraps `future`.
    pub fn new(future: F) -> Self {
        install_hook();
        catch(future)
    }
}

impl<F: Future> Future for CatchPanic<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.project().inner;
        let _inside = Catching::enter();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(caught(&*panic))),
        }
    }
}

/// Runs `f` now, catching a panic as [`catch`] does (the hook installed already).
pub(crate) fn catch_now<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let _inside = Catching::enter();
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| caught(&*panic))
}

/// The text of a caught panic, with the place it happened when the hook noted it.
fn caught(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic_text(panic);
    match LOCATION.with(|slot| slot.borrow_mut().take()) {
        Some(location) => format!("{text} (at {location})"),
        None => text,
    }
}

/// The text of a panic payload.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-text payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_caught_panic_comes_back_as_its_text_and_place() {
        install_hook();
        let caught = catch(async { panic!("boom {}", 7) }).await;
        let text = caught.expect_err("the future panicked");
        assert!(text.starts_with("boom 7 (at "), "{text}");
        assert!(text.contains("panic.rs"), "{text}");
    }

    #[tokio::test]
    async fn a_future_that_completes_is_untouched() {
        assert_eq!(catch(async { 5 }).await, Ok(5));
        assert_eq!(CATCHING.with(Cell::get), 0);
    }
}
