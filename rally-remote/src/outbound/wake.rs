//! The writer's wake-up: one stored permit, as `tokio::sync::Notify::notify_one` gives. A
//! wake-up with nobody waiting is kept for the next wait, so one given between the writer
//! finding the lane empty and its going to sleep is never lost.
//!
//! Under `--cfg loom` the permit is loom's `Notify` (same semantics, blocking), so the loom
//! model in `outbound` explores the lane's protocol around it: which pushes wake the writer,
//! on every path including the failing ones, and closing.

/// Wakes the lane's single writer.
#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    #[cfg(not(loom))]
    permit: tokio::sync::Notify,
    #[cfg(loom)]
    permit: loom::sync::Notify,
}

impl Wakeup {
    /// Wakes the writer, or lets its next wait return at once.
    pub(crate) fn wake(&self) {
        #[cfg(not(loom))]
        self.permit.notify_one();
        #[cfg(loom)]
        self.permit.notify();
    }

    /// Completes once a wake-up has been given since the last wait completed.
    #[cfg(not(loom))]
    pub(crate) async fn wait(&self) {
        self.permit.notified().await;
    }

    /// The loom build's wait: blocks the (loom) thread.
    #[cfg(loom)]
    pub(crate) async fn wait(&self) {
        self.permit.wait();
    }

    /// Blocks until woken (the loom model's writer).
    #[cfg(loom)]
    pub(crate) fn wait_blocking(&self) {
        self.permit.wait();
    }
}
