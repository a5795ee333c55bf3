//! Holds: how a transport learns that the work its deliveries caused has run.
//!
//! A transport that delivers a batch of messages at once (everything one read from a socket
//! brought) can deliver them inside [`scope`], with a [`Hold`] of its own. The actors those
//! deliveries wake are woken when the scope ends, once each, with all of their messages of
//! the batch in their mailboxes (a batch of deliveries costs one wake-up per actor, not one
//! per message, however many cores are idle to run an actor the moment its first message
//! lands). Each of them keeps a clone of the hold until it has handled the messages it took
//! with it, or its run on a thread ends first (it waits for more mail, gives its thread back
//! after its `throughput`, or a handler awaits something). While the actor's code runs,
//! [`with_current`] shows the hold, so what the actor sends can be tied to the deliveries that
//! caused it. When the last clone is dropped, every actor the batch woke has run: the
//! transport can send what they sent in one write, from the thread that dropped it.
//!
//! A hold only ever covers work that is running or about to run: an actor suspended in a
//! handler (waiting for I/O) when the message arrives does not take it, and an actor's run
//! ends its holds however it ends. Deliveries made by the woken actors themselves carry no
//! hold (only a scope's deliveries do), so a chain of local messages never extends one.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use rally::hold::{self, Hold};
//!
//! /// Notes when every actor the batch woke has run.
//! struct Batch(Arc<AtomicBool>);
//! impl Drop for Batch {
//!     fn drop(&mut self) {
//!         self.0.store(true, Ordering::Release);
//!     }
//! }
//!
//! let ran = Arc::new(AtomicBool::new(false));
//! hold::scope(Hold::new(Batch(ran.clone())), || {
//!     // Deliver the batch's messages here (`tell`, `deliver`): each actor they wake keeps the
//!     // hold until it has handled them (or its run ends first).
//!     hold::with_current(|current| assert!(current.is_some()));
//! });
//! // No actor was woken: the scope's own clone was the last.
//! assert!(ran.load(Ordering::Acquire));
//! hold::with_current(|current| assert!(current.is_none()));
//! ```

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// What a transport keeps alive until the actors its deliveries woke have run (see the module
/// docs): a shared value of the transport's own type, whose drop (when the last clone goes)
/// is the signal. A thin pointer, so that keeping one costs a mailbox 8 bytes.
///
/// # Example
///
/// ```
/// let hold = rally::hold::Hold::new(7u32);
/// let again = hold.clone();
/// assert_eq!(again.downcast_ref::<u32>(), Some(&7));
/// assert_eq!(hold.downcast_ref::<u8>(), None);
/// ```
#[derive(Clone)]
pub struct Hold(Arc<Box<dyn Any + Send + Sync>>);

impl Hold {
    /// A hold on `value`, dropped when the last clone is.
    pub fn new<T: Any + Send + Sync>(value: T) -> Self {
        Self(Arc::new(Box::new(value)))
    }

    /// The value, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        (**self.0).downcast_ref()
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Hold").finish_non_exhaustive()
    }
}

/// The [`scope`] open on this thread, if any.
struct Open {
    /// The scope's hold (`None`: no scope is open).
    hold: Option<Hold>,
    /// The actors its deliveries woke, to be woken when it ends (kept from one scope to the
    /// next, so that a scope allocates nothing).
    wakers: Vec<Waker>,
}

thread_local! {
    static SCOPE: RefCell<Open> = const {
        RefCell::new(Open {
            hold: None,
            wakers: Vec::new(),
        })
    };
    /// The holds of the actor run in progress on this thread (taken from its mailbox).
    static RUN: RefCell<Vec<Hold>> = const { RefCell::new(Vec::new()) };
    /// Whether a scope is open / the run in progress has holds: plain flags, read on every
    /// delivery, push and actor poll (a thread-local without a destructor costs one load;
    /// the two above need their destructor registered on first use).
    static IN_SCOPE: Cell<bool> = const { Cell::new(false) };
    static RUN_HELD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `deliver` with `hold` as this thread's delivery scope: an actor that a delivery made
/// inside wakes from waiting for mail is woken when `deliver` returns (or unwinds), and keeps
/// a clone of `hold` until it has handled the messages it took with it, or its next run ends
/// first. The scope's own reference is dropped after the wake-ups.
///
/// # Example
///
/// ```
/// use rally::hold::{self, Hold};
///
/// let delivered = hold::scope(Hold::new(()), || 3);
/// assert_eq!(delivered, 3);
/// ```
pub fn scope<R>(hold: Hold, deliver: impl FnOnce() -> R) -> R {
    /// Wakes the actors this scope's deliveries woke, restores the scope that was open
    /// before (scopes nest), and drops this one's hold: each outside the borrow, as a waker
    /// or the hold's drop may run code that looks at the scope.
    struct Close {
        outer: Option<Hold>,
        /// The scope's first waker in the list (an outer scope's come before).
        first: usize,
    }
    impl Drop for Close {
        fn drop(&mut self) {
            let first = self.first;
            while let Some(waker) = SCOPE.with(|scope| {
                let mut scope = scope.borrow_mut();
                (scope.wakers.len() > first)
                    .then(|| scope.wakers.pop())
                    .flatten()
            }) {
                waker.wake();
            }
            let outer = self.outer.take();
            IN_SCOPE.with(|open| open.set(outer.is_some()));
            let ours = SCOPE.with(|scope| std::mem::replace(&mut scope.borrow_mut().hold, outer));
            drop(ours);
        }
    }
    IN_SCOPE.with(|open| open.set(true));
    let close = SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        Close {
            outer: scope.hold.replace(hold),
            first: scope.wakers.len(),
        }
    });
    let _close = close;
    deliver()
}

/// Calls `f` with the hold the code running now works for: inside [`scope`], the scope's;
/// inside an actor's run that took a hold, the first it took; elsewhere `None`.
///
/// # Example
///
/// ```
/// rally::hold::with_current(|current| assert!(current.is_none()));
/// ```
pub fn with_current<R>(f: impl FnOnce(Option<&Hold>) -> R) -> R {
    if !IN_SCOPE.with(Cell::get) && !RUN_HELD.with(Cell::get) {
        return f(None);
    }
    SCOPE.with(|scope| {
        let scope = scope.borrow();
        if let Some(hold) = scope.hold.as_ref() {
            return f(Some(hold));
        }
        RUN.with(|run| f(run.borrow().first()))
    })
}

/// Under a mailbox's lock, for an actor that this delivery wakes from waiting for mail: keeps
/// the scope's hold in `slot` for the actor's next run (one per run; the first is kept).
pub(crate) fn attach(slot: &mut Option<Hold>) {
    if slot.is_some() || !IN_SCOPE.with(Cell::get) {
        return;
    }
    SCOPE.with(|scope| {
        if let Some(hold) = scope.borrow().hold.as_ref() {
            *slot = Some(hold.clone());
        }
    });
}

/// Under a mailbox's lock, for an actor a delivery wakes: inside a scope, its wake-up waits
/// for the scope's end (returns `true`); elsewhere the caller wakes it now. (A scope's code
/// that is looking at the scope, as a push may while its payload is encoded, wakes at once.)
pub(crate) fn defer_wake(waker: &Waker) -> bool {
    if !IN_SCOPE.with(Cell::get) {
        return false;
    }
    SCOPE.with(|scope| match scope.try_borrow_mut() {
        Ok(mut scope) if scope.hold.is_some() => {
            scope.wakers.push(waker.clone());
            true
        }
        _ => false,
    })
}

/// The actor's run took `hold` from its mailbox with a batch of messages: held until the
/// actor asks for messages past that batch ([`end_run`] from the mailbox) or the run ends.
pub(crate) fn begin(hold: Hold) {
    RUN.with(|run| run.borrow_mut().push(hold));
    RUN_HELD.with(|held| held.set(true));
}

/// The actor's run on this thread ended, or it has handled the messages its holds came with
/// (the mailbox calls this before it takes the next batch): its holds are dropped (each
/// outside the borrow: a drop may run a transport's code, which may look at the holds; the
/// flag stays set until the last is gone, so that code sees the rest).
pub(crate) fn end_run() {
    if !RUN_HELD.with(Cell::get) {
        return;
    }
    while let Some(hold) = RUN.with(|run| run.borrow_mut().pop()) {
        drop(hold);
    }
    RUN_HELD.with(|held| held.set(false));
}

pin_project_lite::pin_project! {
    /// An actor's task: each poll is one run, whose holds end with it.
    pub(crate) struct Runs<F> {
        #[pin]
        task: F,
    }
}

impl<F> Runs<F> {
    pub(crate) fn new(task: F) -> Self {
        Self { task }
    }
}

impl<F: Future> Future for Runs<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        /// Ends the run however the poll ends, unwinding included: a hold left on the thread
        /// would wait for whatever runs there next.
        struct End;
        impl Drop for End {
            fn drop(&mut self) {
                end_run();
            }
        }
        let _end = End;
        self.project().task.poll(cx)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_scope_shows_its_hold_and_restores_the_outer_one() {
        let outer = Hold::new(1u8);
        let inner = Hold::new(2u8);
        scope(outer, || {
            with_current(|h| assert_eq!(h.unwrap().downcast_ref::<u8>(), Some(&1)));
            scope(inner, || {
                with_current(|h| assert_eq!(h.unwrap().downcast_ref::<u8>(), Some(&2)));
            });
            with_current(|h| assert_eq!(h.unwrap().downcast_ref::<u8>(), Some(&1)));
        });
        with_current(|h| assert!(h.is_none()));
    }

    #[test]
    fn a_run_keeps_its_holds_until_the_poll_ends() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let hold = Hold::new(Counted(dropped.clone()));
        let mut slot = None;
        scope(hold, || attach(&mut slot));
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "the slot keeps it");
        let mut task = std::pin::pin!(Runs::new(std::future::poll_fn(|_| {
            if let Some(hold) = slot.take() {
                begin(hold);
                with_current(|h| assert!(h.is_some(), "the run shows its hold"));
                return Poll::Pending;
            }
            Poll::Ready(())
        })));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(task.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "dropped when the run ended"
        );
        with_current(|h| assert!(h.is_none()));
        assert!(task.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn outside_a_scope_nothing_is_attached() {
        let mut slot = None;
        attach(&mut slot);
        assert!(slot.is_none());
    }
}
