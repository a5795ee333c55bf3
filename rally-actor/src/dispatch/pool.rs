//! A small executor of OS threads for the blocking pool, and the same queue driven by hand for
//! the calling-thread mode.
//!
//! Growth follows `java.util.concurrent.ThreadPoolExecutor`, which Akka's thread-pool executor
//! uses: below `core` threads a new runnable actor starts a thread; above it, runnable actors
//! queue, and once more than `queue_size` wait a thread is added, up to `max`. A thread above
//! `core` that finds no work for `keep_alive` exits.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard, Weak};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use crate::sync::{Condvar, Mutex};
use tokio::runtime::Handle;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a pool is doing now.
///
/// # Example
///
/// ```
/// use rally::{Dispatcher, DispatcherKind};
///
/// let d = Dispatcher::start("t", DispatcherKind::CallingThread, 1, None).unwrap();
/// let status = d.pool_status().unwrap();
/// assert_eq!((status.threads, status.busy, status.queued), (0, 0, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStatus {
    /// Live threads.
    pub threads: usize,
    /// Threads running an actor now.
    pub busy: usize,
    /// Runnable actors waiting for a thread.
    pub queued: usize,
    /// The most threads the pool has had at once.
    pub peak_threads: usize,
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    state: Mutex<State>,
    work: Condvar,
    core: usize,
    max: usize,
    keep_alive: Duration,
    queue_size: usize,
    /// Entered while polling, so actors can use tokio timers and I/O.
    runtime: Handle,
    /// Without threads: tasks run only in `run_until_idle`.
    manual: bool,
}

struct State {
    queue: VecDeque<Arc<PoolTask>>,
    threads: usize,
    peak: usize,
    busy: usize,
    /// Threads waiting for work that no submit has claimed yet.
    idle: usize,
    /// Wake-ups handed to idle threads and not yet taken.
    permits: usize,
    next_thread: usize,
    shutdown: bool,
}

struct PoolTask {
    future: Mutex<Option<Task>>,
    scheduled: AtomicBool,
    pool: Weak<Shared>,
}

impl Wake for PoolTask {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            if let Some(pool) = self.pool.upgrade() {
                Shared::submit(&pool, self.clone());
            }
        }
    }
}

impl Pool {
    pub(crate) fn threaded(
        name: &str,
        core: usize,
        max: usize,
        keep_alive: Duration,
        queue_size: usize,
        runtime: Handle,
    ) -> Self {
        Self::new(
            name,
            core.min(max),
            max,
            keep_alive,
            queue_size,
            runtime,
            false,
        )
    }

    pub(crate) fn calling_thread(runtime: Handle) -> Self {
        Self::new("calling-thread", 0, 0, Duration::ZERO, 0, runtime, true)
    }

    fn new(
        name: &str,
        core: usize,
        max: usize,
        keep_alive: Duration,
        queue_size: usize,
        runtime: Handle,
        manual: bool,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                name: name.to_owned(),
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    threads: 0,
                    peak: 0,
                    busy: 0,
                    idle: 0,
                    permits: 0,
                    next_thread: 0,
                    shutdown: false,
                }),
                work: Condvar::new(),
                core,
                max,
                keep_alive,
                queue_size,
                runtime,
                manual,
            }),
        }
    }

    pub(crate) fn spawn<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Not a tokio worker: tokio's cooperative budget must not make resources return
        // `Pending` with a wake-up deferred to a scheduler that does not run this task.
        let task = Arc::new(PoolTask {
            future: Mutex::new(Some(Box::pin(tokio::task::unconstrained(future)))),
            scheduled: AtomicBool::new(true),
            pool: Arc::downgrade(&self.shared),
        });
        Shared::submit(&self.shared, task);
    }

    pub(crate) fn status(&self) -> PoolStatus {
        let state = self.shared.lock();
        PoolStatus {
            threads: state.threads,
            busy: state.busy,
            queued: state.queue.len(),
            peak_threads: state.peak,
        }
    }

    pub(crate) fn run_until_idle(&self) -> usize {
        let _entered = self.shared.runtime.enter();
        let mut runs = 0;
        loop {
            let next = self.shared.lock().queue.pop_front();
            let Some(task) = next else {
                return runs;
            };
            poll(&task);
            runs += 1;
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.work.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn submit(self: &Arc<Self>, task: Arc<PoolTask>) {
        let mut state = self.lock();
        if state.shutdown {
            return;
        }
        state.queue.push_back(task);
        if self.manual {
            return;
        }
        if state.idle > 0 {
            state.idle -= 1;
            state.permits += 1;
            drop(state);
            self.work.notify_one();
        } else if state.threads < self.core
            || (state.queue.len() > self.queue_size && state.threads < self.max)
        {
            self.start_thread(state);
        }
    }

    fn start_thread(self: &Arc<Self>, mut state: MutexGuard<'_, State>) {
        state.threads += 1;
        state.peak = state.peak.max(state.threads);
        let n = state.next_thread;
        state.next_thread += 1;
        drop(state);
        let shared = self.clone();
        let started = std::thread::Builder::new()
            .name(format!("{}-{n}", self.name))
            .spawn(move || shared.work_loop());
        if let Err(error) = started {
            tracing::error!(pool = %self.name, %error, "could not start a pool thread");
            self.lock().threads -= 1;
        }
    }

    fn work_loop(self: Arc<Self>) {
        let _entered = self.runtime.enter();
        let mut state = self.lock();
        loop {
            if let Some(task) = state.queue.pop_front() {
                state.busy += 1;
                drop(state);
                poll(&task);
                drop(task);
                state = self.lock();
                state.busy -= 1;
                continue;
            }
            if state.shutdown {
                state.threads -= 1;
                return;
            }
            state.idle += 1;
            loop {
                let (next, timeout) = self
                    .work
                    .wait_timeout(state, self.keep_alive.max(Duration::from_millis(1)));
                state = next;
                if state.permits > 0 {
                    state.permits -= 1;
                    break;
                }
                if state.shutdown || (timeout.timed_out() && state.threads > self.core) {
                    state.idle -= 1;
                    state.threads -= 1;
                    return;
                }
            }
        }
    }
}

fn poll(task: &Arc<PoolTask>) {
    let mut slot = task.future.lock();
    let Some(future) = slot.as_mut() else {
        return;
    };
    task.scheduled.store(false, Ordering::Release);
    let waker = Waker::from(task.clone());
    let mut cx = Context::from_waker(&waker);
    if future.as_mut().poll(&mut cx).is_ready() {
        *slot = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn calling_thread_runs_tasks_in_order_only_when_driven() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let pool = Pool::calling_thread(runtime.handle().clone());
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            let tx = tx.clone();
            pool.spawn(async move { tx.send(i).unwrap() });
        }
        assert!(rx.try_recv().is_err());
        assert_eq!(pool.run_until_idle(), 3);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn threads_start_up_to_core_then_when_the_queue_overflows() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let pool = Pool::threaded(
            "p",
            1,
            2,
            Duration::from_secs(60),
            1,
            runtime.handle().clone(),
        );
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        for _ in 0..3 {
            let gate = gate.clone();
            pool.spawn(async move {
                let mut open = gate.0.lock();
                while !*open {
                    open = gate.1.wait(open);
                }
            });
        }
        // Core 1, queue 1: the first task started a thread, the third found two queued and
        // added the second (and last) thread.
        assert_eq!(pool.status().threads, 2);
        *gate.0.lock() = true;
        gate.1.notify_all();
    }
}
