//! The no-op twin of the counters (feature `monitoring` off): [`ActorCounters`] cannot be
//! made, so every `if let Some(counters)` on the hot path compiles to nothing.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::{ActorSnapshot, DispatcherStats};
use crate::ActorId;

/// Always empty.
#[derive(Default)]
pub(crate) struct Slot;

impl Slot {
    pub(crate) fn on(counters: Arc<ActorCounters>) -> Self {
        match *counters {}
    }

    #[inline(always)]
    pub(crate) fn counters(&self) -> Option<&Arc<ActorCounters>> {
        None
    }
}

/// Uninhabited: no actor is ever monitored.
pub(crate) enum ActorCounters {}

#[allow(clippy::unused_self)]
impl ActorCounters {
    pub(crate) fn make(
        _id: ActorId,
        _path: Arc<str>,
        _dispatcher: Arc<DispatcherStats>,
        _sample_every: u32,
        _threshold: Duration,
    ) -> Option<Arc<Self>> {
        None
    }

    pub(crate) fn arrived(&self, _queued: usize, _in_batch: impl FnOnce() -> usize) {
        match *self {}
    }

    pub(crate) fn woke(&self) {
        match *self {}
    }

    pub(crate) fn resume(&self) -> Instant {
        match *self {}
    }

    pub(crate) fn pause(&self, _start: Instant) {
        match *self {}
    }

    pub(crate) fn yielding(&self) {
        match *self {}
    }

    pub(crate) fn yielded(&self) {
        match *self {}
    }

    pub(crate) fn taken(&self, _seq: u64) {
        match *self {}
    }

    pub(crate) fn completed(&self) {
        match *self {}
    }

    pub(crate) fn snapshot(&self, _queued: usize, _reset: bool) -> ActorSnapshot {
        match *self {}
    }
}

/// Never made.
pub(crate) struct Timed<F>(PhantomData<F>, ActorCounters);

impl<F> Timed<F> {
    pub(crate) fn new(_future: F, counters: &Arc<ActorCounters>) -> Self {
        match **counters {}
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.1 {}
    }
}
