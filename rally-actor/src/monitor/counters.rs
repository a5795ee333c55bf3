//! The real counters (feature `monitoring`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::{ActorSnapshot, DispatcherStats};
use crate::ActorId;

/// Sampled enqueue times kept per actor: with one sample in 16 messages this covers a backlog
/// of 4,096 messages; beyond that, samples are skipped (the queue length tells the story).
const STAMPS: usize = 256;

/// Where a mailbox keeps its counters: nothing for an unmonitored actor.
#[derive(Default)]
pub(crate) struct Slot(Option<Arc<ActorCounters>>);

impl Slot {
    pub(crate) fn on(counters: Arc<ActorCounters>) -> Self {
        Self(Some(counters))
    }

    #[inline(always)]
    pub(crate) fn counters(&self) -> Option<&Arc<ActorCounters>> {
        self.0.as_ref()
    }
}

/// One monitored actor's counters. The senders' fields and the actor's own fields sit on
/// separate cache lines, so counting does not make the two sides fight over one line.
pub(crate) struct ActorCounters {
    pub(crate) id: ActorId,
    pub(crate) path: Arc<str>,
    pub(crate) dispatcher: Arc<DispatcherStats>,
    /// One message in `sample_mask + 1` (a power of two) has its waiting time measured.
    sample_mask: u64,
    threshold: Duration,
    epoch: Instant,
    senders: SenderSide,
    actor: ActorSide,
}

#[repr(align(128))]
struct SenderSide {
    arrived: AtomicU64,
    max_queued: AtomicUsize,
    woken: AtomicBool,
    stamps: Box<[Stamp]>,
}

struct Stamp {
    seq: AtomicU64,
    at_nanos: AtomicU64,
}

#[repr(align(128))]
struct ActorSide {
    completed: AtomicU64,
    in_progress: AtomicU64,
    busy_nanos: AtomicU64,
    on_thread_nanos: AtomicU64,
    blocking_nanos: AtomicU64,
    max_poll_nanos: AtomicU64,
    waited_nanos: AtomicU64,
    wait_samples: AtomicU64,
    /// When the current run of handling began (nanoseconds since `epoch`, plus 1), or 0.
    running_since: AtomicU64,
    /// When the current poll began (as above), or 0: long polls count while they last.
    polling_since: AtomicU64,
}

impl ActorCounters {
    pub(crate) fn new(
        id: ActorId,
        path: Arc<str>,
        dispatcher: Arc<DispatcherStats>,
        sample_every: u32,
        threshold: Duration,
    ) -> Self {
        Self {
            id,
            path,
            dispatcher,
            sample_mask: u64::from(sample_every.max(1)).next_power_of_two() - 1,
            threshold,
            epoch: Instant::now(),
            senders: SenderSide {
                arrived: AtomicU64::new(0),
                max_queued: AtomicUsize::new(0),
                woken: AtomicBool::new(false),
                stamps: (0..STAMPS)
                    .map(|_| Stamp {
                        seq: AtomicU64::new(u64::MAX),
                        at_nanos: AtomicU64::new(0),
                    })
                    .collect(),
            },
            actor: ActorSide {
                completed: AtomicU64::new(0),
                in_progress: AtomicU64::new(0),
                busy_nanos: AtomicU64::new(0),
                on_thread_nanos: AtomicU64::new(0),
                blocking_nanos: AtomicU64::new(0),
                max_poll_nanos: AtomicU64::new(0),
                waited_nanos: AtomicU64::new(0),
                wait_samples: AtomicU64::new(0),
                running_since: AtomicU64::new(0),
                polling_since: AtomicU64::new(0),
            },
        }
    }

    /// Counters for a newly monitored actor.
    pub(crate) fn make(
        id: ActorId,
        path: Arc<str>,
        dispatcher: Arc<DispatcherStats>,
        sample_every: u32,
        threshold: Duration,
    ) -> Option<Arc<Self>> {
        Some(Arc::new(Self::new(
            id,
            path,
            dispatcher,
            sample_every,
            threshold,
        )))
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A sender put a message in the mailbox, whose queue now holds `queued` (under the mailbox
    /// lock, so arrivals are numbered in queue order). `in_batch` (messages the actor took and
    /// has not handled yet) is written by the actor on every message, so it is read only for the
    /// sampled messages: reading it on every send would pull the actor's cache line to every
    /// sender.
    #[inline]
    pub(crate) fn arrived(&self, queued: usize, in_batch: impl FnOnce() -> usize) {
        // Senders count under the mailbox lock, so plain loads and stores suffice (no locked
        // read-modify-write on the hot path).
        let seq = self.senders.arrived.load(Ordering::Relaxed);
        self.senders.arrived.store(seq + 1, Ordering::Relaxed);
        let mut queued = queued;
        if seq & self.sample_mask == 0 {
            queued += in_batch();
            let stamp = &self.senders.stamps[self.stamp_index(seq)];
            stamp
                .at_nanos
                .store(self.nanos(Instant::now()), Ordering::Relaxed);
            stamp.seq.store(seq, Ordering::Release);
        }
        if queued > self.senders.max_queued.load(Ordering::Relaxed) {
            self.senders.max_queued.store(queued, Ordering::Relaxed);
        }
    }

    /// A sender woke the parked actor: it is runnable and waits for a thread.
    #[inline]
    pub(crate) fn woke(&self) {
        if !self.senders.woken.swap(true, Ordering::Relaxed) {
            self.dispatcher.runnable.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The actor runs again after waiting for messages: a run of handling begins.
    #[inline]
    pub(crate) fn resume(&self) -> Instant {
        if self.senders.woken.swap(false, Ordering::Relaxed) {
            self.dispatcher.runnable.fetch_sub(1, Ordering::Relaxed);
        }
        self.dispatcher.running.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        self.actor
            .running_since
            .store(self.nanos(now) + 1, Ordering::Relaxed);
        now
    }

    /// The run of handling that began at `start` ends (the actor waits for messages or yields).
    #[inline]
    pub(crate) fn pause(&self, start: Instant) {
        self.actor.running_since.store(0, Ordering::Relaxed);
        let busy = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.actor.busy_nanos.fetch_add(busy, Ordering::Relaxed);
        self.dispatcher.running.fetch_sub(1, Ordering::Relaxed);
    }

    /// The actor yields its thread with messages left: runnable again at once.
    #[inline]
    pub(crate) fn yielding(&self) {
        self.dispatcher.runnable.fetch_add(1, Ordering::Relaxed);
    }

    /// The actor runs again after a yield.
    #[inline]
    pub(crate) fn yielded(&self) {
        self.dispatcher.runnable.fetch_sub(1, Ordering::Relaxed);
    }

    /// The actor took the message numbered `seq` (counting from 0) from its mailbox.
    #[inline]
    pub(crate) fn taken(&self, seq: u64) {
        self.actor.in_progress.store(1, Ordering::Relaxed);
        if seq & self.sample_mask == 0 {
            let stamp = &self.senders.stamps[self.stamp_index(seq)];
            if stamp.seq.load(Ordering::Acquire) == seq {
                let at = stamp.at_nanos.load(Ordering::Relaxed);
                let waited = self.nanos(Instant::now()).saturating_sub(at);
                self.actor.waited_nanos.fetch_add(waited, Ordering::Relaxed);
                self.actor.wait_samples.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The message taken last has been handled.
    #[inline]
    pub(crate) fn completed(&self) {
        self.actor.in_progress.store(0, Ordering::Relaxed);
        // Only the actor's own task counts completions.
        let done = self.actor.completed.load(Ordering::Relaxed);
        self.actor.completed.store(done + 1, Ordering::Relaxed);
    }

    fn stamp_index(&self, seq: u64) -> usize {
        ((seq >> self.sample_mask.count_ones()) as usize) % STAMPS
    }

    fn polling(&self, start: Instant) {
        self.actor
            .polling_since
            .store(self.nanos(start) + 1, Ordering::Relaxed);
    }

    fn polled(&self, took: Duration) {
        self.actor.polling_since.store(0, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.actor
            .on_thread_nanos
            .fetch_add(nanos, Ordering::Relaxed);
        self.actor
            .max_poll_nanos
            .fetch_max(nanos, Ordering::Relaxed);
        if took >= self.threshold {
            self.actor
                .blocking_nanos
                .fetch_add(nanos, Ordering::Relaxed);
        }
        self.dispatcher
            .busy_nanos
            .fetch_add(nanos, Ordering::Relaxed);
    }

    /// The figures now, with the queue length the mailbox reports.
    pub(crate) fn snapshot(&self, queued: usize, reset: bool) -> ActorSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let d = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        let (max_queued, max_poll) = if reset {
            (
                self.senders.max_queued.swap(queued, Ordering::Relaxed),
                self.actor.max_poll_nanos.swap(0, Ordering::Relaxed),
            )
        } else {
            (
                self.senders.max_queued.load(Ordering::Relaxed),
                self.actor.max_poll_nanos.load(Ordering::Relaxed),
            )
        };
        // A run or a poll under way counts up to now, so a long one shows in the period it
        // happens in, not only in the one it ends in.
        let now = self.nanos(Instant::now());
        let since = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            start => Duration::from_nanos(now.saturating_sub(start - 1)),
        };
        let running = since(&self.actor.running_since);
        let polling = since(&self.actor.polling_since);
        let blocking_now = if polling >= self.threshold {
            polling
        } else {
            Duration::ZERO
        };
        ActorSnapshot {
            id: self.id,
            path: self.path.clone(),
            dispatcher: self.dispatcher.name.clone(),
            arrived: load(&self.senders.arrived),
            completed: load(&self.actor.completed),
            queued,
            in_progress: load(&self.actor.in_progress),
            max_queued: max_queued.max(queued),
            busy: d(&self.actor.busy_nanos) + running,
            on_thread: d(&self.actor.on_thread_nanos) + polling,
            blocking: d(&self.actor.blocking_nanos) + blocking_now,
            max_poll: Duration::from_nanos(max_poll).max(polling),
            waited: d(&self.actor.waited_nanos),
            wait_samples: load(&self.actor.wait_samples),
        }
    }
}

/// An actor's task, timing every poll (how long it holds its thread).
pub(crate) struct Timed<F> {
    future: Pin<Box<F>>,
    counters: Arc<ActorCounters>,
}

impl<F> Timed<F> {
    pub(crate) fn new(future: F, counters: &Arc<ActorCounters>) -> Self {
        Self {
            future: Box::pin(future),
            counters: counters.clone(),
        }
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let start = Instant::now();
        self.counters.polling(start);
        let out = self.future.as_mut().poll(cx);
        self.counters.polled(start.elapsed());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(sample_every: u32) -> ActorCounters {
        ActorCounters::new(
            ActorId(1),
            "/user/t".into(),
            Arc::new(DispatcherStats::new("d".into())),
            sample_every,
            Duration::from_millis(1),
        )
    }

    #[test]
    fn sampled_waits_pair_arrivals_with_takes_in_order() {
        let c = counters(2);
        for queued in 1..=4 {
            c.arrived(queued, || 0);
        }
        for seq in 0..4 {
            c.taken(seq);
            c.completed();
        }
        let s = c.snapshot(0, true);
        assert_eq!((s.arrived, s.completed, s.wait_samples), (4, 4, 2));
        assert_eq!(s.max_queued, 4);
        assert_eq!(c.snapshot(0, false).max_queued, 0);
    }

    #[test]
    fn runnable_counts_one_wake_per_park() {
        let c = counters(16);
        c.woke();
        c.woke();
        assert_eq!(c.dispatcher.runnable.load(Ordering::Relaxed), 1);
        let start = c.resume();
        assert_eq!(c.dispatcher.runnable.load(Ordering::Relaxed), 0);
        c.pause(start);
        assert_eq!(c.dispatcher.running.load(Ordering::Relaxed), 0);
    }
}
