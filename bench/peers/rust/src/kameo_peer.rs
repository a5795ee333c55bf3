//! local-ping-pong on kameo.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use kameo::Actor;
use kameo::actor::{ActorRef, Spawn};
use kameo::error::Infallible;
use kameo::mailbox;
use kameo::message::{Context, Message};
use tokio::sync::oneshot;

use crate::pairs::{self, Pair, TokioCurrentThread};

struct Pinger {
    me: Option<ActorRef<Pinger>>,
    target: ActorRef<Ponger>,
    in_flight: u64,
    want: u64,
    sent: u64,
    received: u64,
    done: Option<oneshot::Sender<()>>,
}

impl Pinger {
    fn fill(&mut self, upto: u64) {
        let me = self
            .me
            .as_ref()
            .expect("set in on_start, before any message");
        while self.sent < upto.min(self.want) {
            self.sent += 1;
            // Unbounded mailbox: try_send only fails if the ponger is gone, which the missing
            // replies then report as a timeout.
            let _ = self.target.tell(Ping(me.clone())).try_send();
        }
    }
}

impl Actor for Pinger {
    type Args = Self;
    type Error = Infallible;

    async fn on_start(mut args: Self, actor_ref: ActorRef<Self>) -> Result<Self, Infallible> {
        args.me = Some(actor_ref);
        Ok(args)
    }
}

struct Go;
struct Pong;
struct Ping(ActorRef<Pinger>);
struct AskPing;

impl Message<Go> for Pinger {
    type Reply = ();

    async fn handle(&mut self, _: Go, _ctx: &mut Context<Self, ()>) {
        self.fill(self.in_flight);
    }
}

impl Message<Pong> for Pinger {
    type Reply = ();

    async fn handle(&mut self, _: Pong, _ctx: &mut Context<Self, ()>) {
        self.received += 1;
        if self.received == self.want {
            if let Some(done) = self.done.take() {
                let _ = done.send(());
            }
            // Break the self-reference so the actor can stop once its runtime goes.
            self.me = None;
            return;
        }
        self.fill(self.sent + 1);
    }
}

struct Ponger;

impl Actor for Ponger {
    type Args = Self;
    type Error = Infallible;

    async fn on_start(args: Self, _: ActorRef<Self>) -> Result<Self, Infallible> {
        Ok(args)
    }
}

impl Message<Ping> for Ponger {
    type Reply = ();

    async fn handle(&mut self, Ping(reply_to): Ping, _ctx: &mut Context<Self, ()>) {
        let _ = reply_to.tell(Pong).try_send();
    }
}

impl Message<AskPing> for Ponger {
    type Reply = ();

    async fn handle(&mut self, _: AskPing, _ctx: &mut Context<Self, ()>) {}
}

async fn setup(in_flight: u64, want: u64) -> anyhow::Result<Pair> {
    let ponger = Ponger::spawn_with_mailbox(Ponger, mailbox::unbounded());
    let (tx, rx) = oneshot::channel();
    let pinger = Pinger::spawn_with_mailbox(
        Pinger {
            me: None,
            target: ponger,
            in_flight,
            want,
            sent: 0,
            received: 0,
            done: Some(tx),
        },
        mailbox::unbounded(),
    );
    pinger.wait_for_startup().await;
    Ok(Pair {
        go: Box::new(move || {
            pinger
                .tell(Go)
                .try_send()
                .map_err(|e| anyhow!("start: {e}"))
        }),
        done: rx,
    })
}

pub fn run_pairs(
    multi_thread: bool,
    pairs: usize,
    in_flight: u64,
    want: u64,
) -> anyhow::Result<Duration> {
    if multi_thread {
        pairs::run_multi_thread(pairs, || setup(in_flight, want))
    } else {
        pairs::run_thread_per_pair(
            pairs,
            || {
                Ok(
                    Box::new(TokioCurrentThread(pairs::current_thread_runtime()?))
                        as Box<dyn pairs::BlockOn>,
                )
            },
            move || setup(in_flight, want),
        )
    }
}

async fn ask_loop(round_trips: u64) -> anyhow::Result<Duration> {
    let ponger = Ponger::spawn_with_mailbox(Ponger, mailbox::unbounded());
    ponger.wait_for_startup().await;
    pairs::time_asks(async {
        for _ in 0..round_trips {
            ponger.ask(AskPing).await.map_err(|e| anyhow!("ask: {e}"))?;
        }
        Ok(())
    })
    .await
}

/// `ask` from a thread outside the runtime (`block_on` on the caller's thread): every request
/// and every reply crosses between that thread and a worker.
pub fn run_ask_outside(round_trips: u64) -> anyhow::Result<Duration> {
    let rt = pairs::multi_thread_runtime()?;
    let elapsed = rt.block_on(ask_loop(round_trips))?;
    rt.shutdown_background();
    Ok(elapsed)
}

pub fn run_ask(multi_thread: bool, round_trips: u64) -> anyhow::Result<Duration> {
    let rt = if multi_thread {
        pairs::multi_thread_runtime()?
    } else {
        pairs::current_thread_runtime()?
    };
    let elapsed = if multi_thread {
        // The asking task runs on a worker, as a caller inside the application would.
        rt.block_on(async {
            tokio::spawn(ask_loop(round_trips))
                .await
                .context("ask task")?
        })?
    } else {
        rt.block_on(ask_loop(round_trips))?
    };
    rt.shutdown_background();
    Ok(elapsed)
}
