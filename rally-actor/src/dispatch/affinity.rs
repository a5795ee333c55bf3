//! The threads of an affinity dispatcher: a fixed set of OS threads, each running its own
//! current-thread tokio runtime. An actor is placed on one thread when it is spawned and runs
//! there for its whole life, so a message between two actors of one thread wakes its receiver
//! on the same core: no work stealing, no wake-up of another core's thread.
//!
//! Placement: code already running on one of the set's threads (an actor's handler or hook
//! spawning a child, a timer an actor set) spawns onto that same thread; anything else (the
//! application's `main`, another dispatcher) takes the threads in turn.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Sets of threads started so far: gives each set an identity its threads recognise.
static NEXT_SET: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// On a thread of an affinity set: the set's identity and the thread's index in it.
    static PLACE: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
}

/// A running set of threads; dropping it stops them (each drops the tasks still on it).
pub(super) struct Threads {
    set: usize,
    runtimes: Vec<Handle>,
    next: AtomicUsize,
    /// Dropped with the set: each thread's runtime returns from `block_on` and shuts down.
    _stop: Vec<oneshot::Sender<()>>,
}

impl Threads {
    /// Starts `count` threads named `{name}-{index}`.
    pub(super) fn start(name: &str, count: usize) -> std::io::Result<Self> {
        let set = NEXT_SET.fetch_add(1, Ordering::Relaxed);
        let mut runtimes = Vec::with_capacity(count);
        let mut stop = Vec::with_capacity(count);
        for index in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            runtimes.push(runtime.handle().clone());
            std::thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || {
                    PLACE.set(Some((set, index)));
                    // Runs the tasks spawned onto this runtime until the set is dropped; the
                    // runtime's drop then drops the actors still on it.
                    let _ = runtime.block_on(stop_rx);
                })?;
            // Pushed after the spawn succeeded: on an error, the threads started so far see
            // their senders dropped and end.
            stop.push(stop_tx);
        }
        Ok(Self {
            set,
            runtimes,
            next: AtomicUsize::new(0),
            _stop: stop,
        })
    }

    /// The thread count.
    pub(super) fn len(&self) -> usize {
        self.runtimes.len()
    }

    /// The runtime of thread `index` (for the dispatcher's helper tasks).
    pub(super) fn handle(&self, index: usize) -> &Handle {
        &self.runtimes[index % self.runtimes.len()]
    }

    /// Spawns `future` on the calling thread if it is one of this set's, else on the next
    /// thread in turn.
    pub(super) fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handle(self.place()).spawn(future)
    }

    /// The index of the thread a task spawned now goes to.
    fn place(&self) -> usize {
        match PLACE.get() {
            Some((set, index)) if set == self.set => index,
            _ => self.next.fetch_add(1, Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// The index of the affinity thread the caller runs on, if it runs on one.
    fn current_index() -> Option<usize> {
        PLACE.get().map(|(_, index)| index)
    }

    fn index_of_next_spawn(threads: &Threads) -> usize {
        let (tx, rx) = mpsc::channel();
        threads.spawn(async move {
            tx.send(current_index()).unwrap();
        });
        rx.recv().unwrap().expect("ran on an affinity thread")
    }

    #[test]
    fn spawns_from_outside_take_the_threads_in_turn() {
        let threads = Threads::start("t", 3).unwrap();
        let order: Vec<usize> = (0..6).map(|_| index_of_next_spawn(&threads)).collect();
        assert_eq!(order, [0, 1, 2, 0, 1, 2]);
        assert_eq!(
            current_index(),
            None,
            "the test's own thread is not one of them"
        );
    }

    #[test]
    fn a_task_spawned_from_a_thread_of_the_set_stays_on_that_thread() {
        let threads = std::sync::Arc::new(Threads::start("t", 2).unwrap());
        let (tx, rx) = mpsc::channel();
        let inner = threads.clone();
        // Lands on thread 0, then spawns five tasks from there.
        threads.spawn(async move {
            for _ in 0..5 {
                let tx = tx.clone();
                inner.spawn(async move {
                    tx.send(current_index()).unwrap();
                });
            }
        });
        let seen: Vec<_> = rx.iter().take(5).collect();
        assert_eq!(seen, [Some(0); 5]);
        // The turn was not advanced by the spawns from inside.
        assert_eq!(index_of_next_spawn(&threads), 1);
    }

    #[test]
    fn a_spawn_from_another_sets_thread_takes_a_turn() {
        let first = std::sync::Arc::new(Threads::start("a", 2).unwrap());
        let second = Threads::start("b", 2).unwrap();
        index_of_next_spawn(&first);
        index_of_next_spawn(&first);
        // From `second`'s thread 0, a spawn on `first` is a spawn from outside: thread 0 of
        // `first` by turn, not "the same index".
        let (tx, rx) = mpsc::channel();
        let onto = first.clone();
        second.spawn(async move {
            onto.spawn(async move {
                tx.send(current_index()).unwrap();
            });
        });
        assert_eq!(rx.recv().unwrap(), Some(0));
        assert_eq!(index_of_next_spawn(&first), 1);
    }

    #[test]
    fn dropping_the_set_ends_its_threads_and_drops_their_tasks() {
        struct OnDrop(mpsc::Sender<&'static str>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                let _ = self.0.send("dropped");
            }
        }
        let threads = Threads::start("t", 2).unwrap();
        let (tx, rx) = mpsc::channel();
        let guard = OnDrop(tx);
        let (started_tx, started_rx) = mpsc::channel();
        threads.spawn(async move {
            let _guard = guard;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        started_rx.recv().unwrap();
        drop(threads);
        assert_eq!(
            rx.recv_timeout(std::time::Duration::from_secs(10)),
            Ok("dropped")
        );
    }
}
