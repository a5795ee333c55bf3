//! Running independent pairs on a tokio runtime: all on one multi-thread runtime, or one
//! current-thread runtime per OS thread (one pair per thread). The frameworks plug in a `setup`
//! that spawns one pair and hands back how to start it and how to learn it is done.

use std::future::Future;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use tokio::sync::oneshot;

use crate::ROW_LIMIT;

/// A spawned pair: `go` sends the start signal, `done` fires when the pinger has all its replies.
pub struct Pair {
    pub go: Box<dyn FnOnce() -> anyhow::Result<()> + Send>,
    pub done: oneshot::Receiver<()>,
}

/// One multi-thread runtime with one worker per core.
pub fn multi_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .context("tokio runtime")
}

pub fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")
}

async fn wait_done(done: oneshot::Receiver<()>) -> anyhow::Result<Instant> {
    match tokio::time::timeout(ROW_LIMIT, done).await {
        Ok(Ok(())) => Ok(Instant::now()),
        Ok(Err(_)) => Err(anyhow!("a pinger stopped before its last reply")),
        Err(_) => Err(anyhow!("a pair did not finish within {ROW_LIMIT:?}")),
    }
}

/// All pairs on one multi-thread runtime.
pub fn run_multi_thread<S, F>(pairs: usize, setup: S) -> anyhow::Result<Duration>
where
    S: Fn() -> F,
    F: Future<Output = anyhow::Result<Pair>>,
{
    let rt = multi_thread_runtime()?;
    let elapsed = rt.block_on(async {
        let mut spawned = Vec::with_capacity(pairs);
        for _ in 0..pairs {
            spawned.push(setup().await?);
        }
        let start = Instant::now();
        let mut dones = Vec::with_capacity(pairs);
        for pair in spawned {
            (pair.go)()?;
            dones.push(pair.done);
        }
        let mut end = start;
        for done in dones {
            end = end.max(wait_done(done).await?);
        }
        anyhow::Ok(end - start)
    })?;
    rt.shutdown_background();
    Ok(elapsed)
}

/// One pair per OS thread, each thread driving its own single-threaded executor. `executor`
/// runs a future to completion on the calling thread (a current-thread tokio runtime, or an
/// actix `System`); it is called twice per thread, for setup and for the timed run.
pub fn run_thread_per_pair<E, S, F>(pairs: usize, executor: E, setup: S) -> anyhow::Result<Duration>
where
    E: Fn() -> anyhow::Result<Box<dyn BlockOn>> + Send + Sync + 'static,
    S: Fn() -> F + Send + Sync + 'static,
    F: Future<Output = anyhow::Result<Pair>>,
{
    let barrier = Arc::new(Barrier::new(pairs + 1));
    let executor = Arc::new(executor);
    let setup = Arc::new(setup);
    let mut threads = Vec::with_capacity(pairs);
    for _ in 0..pairs {
        let (barrier, executor, setup) = (barrier.clone(), executor.clone(), setup.clone());
        threads.push(std::thread::spawn(move || -> anyhow::Result<Instant> {
            let runner = executor();
            let prepared = runner.and_then(|mut runner| {
                let pair = runner.block_on_pair(Box::pin(setup()))?;
                Ok((runner, pair))
            });
            // Every thread reaches the barrier, even after a failed setup, so none waits forever.
            barrier.wait();
            let (mut runner, pair) = prepared?;
            runner.block_on_done(pair)
        }));
    }
    barrier.wait();
    let start = Instant::now();
    let mut end = start;
    for t in threads {
        let done = t
            .join()
            .map_err(|_| anyhow!("a pair's thread panicked"))??;
        end = end.max(done);
    }
    Ok(end - start)
}

/// A single-threaded executor that can set a pair up and run it to done.
pub trait BlockOn {
    fn block_on_pair(
        &mut self,
        setup: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<Pair>> + '_>>,
    ) -> anyhow::Result<Pair>;
    fn block_on_done(&mut self, pair: Pair) -> anyhow::Result<Instant>;
}

/// A current-thread tokio runtime as a [`BlockOn`].
pub struct TokioCurrentThread(pub tokio::runtime::Runtime);

impl BlockOn for TokioCurrentThread {
    fn block_on_pair(
        &mut self,
        setup: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<Pair>> + '_>>,
    ) -> anyhow::Result<Pair> {
        self.0.block_on(setup)
    }

    fn block_on_done(&mut self, pair: Pair) -> anyhow::Result<Instant> {
        self.0.block_on(async move {
            (pair.go)()?;
            wait_done(pair.done).await
        })
    }
}

/// An actix `System` (itself a current-thread tokio runtime) as a [`BlockOn`].
pub struct ActixSystem(pub actix::SystemRunner);

impl BlockOn for ActixSystem {
    fn block_on_pair(
        &mut self,
        setup: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<Pair>> + '_>>,
    ) -> anyhow::Result<Pair> {
        self.0.block_on(setup)
    }

    fn block_on_done(&mut self, pair: Pair) -> anyhow::Result<Instant> {
        self.0.block_on(async move {
            (pair.go)()?;
            wait_done(pair.done).await
        })
    }
}

/// Times `ask_loop`, the sequential asks of a task (not an actor); an error if it takes more
/// than `ROW_LIMIT`.
///
/// # Cancel safety
///
/// Dropping it drops `ask_loop` where it is: the asks it made so far are not waited for.
pub async fn time_asks<F>(ask_loop: F) -> anyhow::Result<Duration>
where
    F: Future<Output = anyhow::Result<()>>,
{
    let start = Instant::now();
    match tokio::time::timeout(ROW_LIMIT, ask_loop).await {
        Ok(res) => res.map(|()| start.elapsed()),
        Err(_) => Err(anyhow!("asks did not finish within {ROW_LIMIT:?}")),
    }
}
