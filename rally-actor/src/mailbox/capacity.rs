//! The count of queued user messages, and the bound on it.
//!
//! This is the only hand-written concurrency in the mailbox (the queues themselves are tokio's
//! channels), so it is the part modelled with loom: concurrent senders never push the count
//! past the limit and the count never underflows.

#[cfg(loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// Queued-message count with an optional limit.
#[derive(Debug)]
pub(crate) struct Capacity {
    len: AtomicUsize,
    limit: Option<usize>,
}

impl Capacity {
    pub(crate) fn new(limit: Option<usize>) -> Self {
        Self {
            len: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes one slot; `false` when the mailbox is at its limit.
    pub(crate) fn try_reserve(&self) -> bool {
        let Some(limit) = self.limit else {
            // Unbounded: the count only feeds queue-length figures, so a plain add suffices.
            self.len.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let mut current = self.len.load(Ordering::Relaxed);
        loop {
            if current >= limit {
                return false;
            }
            match self.len.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives one slot back after a message left the queue (handled, or never enqueued).
    pub(crate) fn release(&self) {
        let previous = self.len.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(previous > 0, "released more slots than were reserved");
    }

    /// Messages queued now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> Option<usize> {
        self.limit
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bounded_refuses_past_limit_and_recovers() {
        let cap = Capacity::new(Some(2));
        assert!(cap.try_reserve());
        assert!(cap.try_reserve());
        assert!(!cap.try_reserve());
        assert_eq!(cap.len(), 2);
        cap.release();
        assert!(cap.try_reserve());
        assert_eq!(cap.len(), 2);
    }

    #[test]
    fn unbounded_counts() {
        let cap = Capacity::new(None);
        for _ in 0..1000 {
            assert!(cap.try_reserve());
        }
        assert_eq!(cap.len(), 1000);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// Two senders race for one free slot while the receiver releases one: the count never
    /// exceeds the limit, and every successful reservation is accounted for.
    #[test]
    fn concurrent_reserve_never_exceeds_limit() {
        loom::model(|| {
            let cap = Arc::new(Capacity::new(Some(1)));
            assert!(cap.try_reserve());
            let senders: Vec<_> = (0..2)
                .map(|_| {
                    let cap = cap.clone();
                    thread::spawn(move || {
                        let ok = cap.try_reserve();
                        assert!(cap.len() <= 1);
                        ok
                    })
                })
                .collect();
            cap.release();
            let won: usize = senders
                .into_iter()
                .map(|h| usize::from(h.join().unwrap()))
                .sum();
            assert!(won <= 1, "two senders got the single slot");
            assert_eq!(cap.len(), won);
        });
    }
}
