//! local-ping-pong on ractor.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::oneshot;

use crate::pairs::{self, Pair, TokioCurrentThread};

pub enum PingMsg {
    Go,
    Pong,
}

pub enum PongMsg {
    Ping(ActorRef<PingMsg>),
    Ask(RpcReplyPort<()>),
}

struct Pinger;

struct PingerState {
    me: ActorRef<PingMsg>,
    target: ActorRef<PongMsg>,
    in_flight: u64,
    want: u64,
    sent: u64,
    received: u64,
    done: Option<oneshot::Sender<()>>,
}

impl PingerState {
    fn fill(&mut self, upto: u64) -> Result<(), ActorProcessingErr> {
        while self.sent < upto.min(self.want) {
            self.sent += 1;
            self.target.cast(PongMsg::Ping(self.me.clone()))?;
        }
        Ok(())
    }
}

impl Actor for Pinger {
    type Msg = PingMsg;
    type State = PingerState;
    type Arguments = (ActorRef<PongMsg>, u64, u64, oneshot::Sender<()>);

    async fn pre_start(
        &self,
        myself: ActorRef<PingMsg>,
        (target, in_flight, want, done): Self::Arguments,
    ) -> Result<PingerState, ActorProcessingErr> {
        Ok(PingerState {
            me: myself,
            target,
            in_flight,
            want,
            sent: 0,
            received: 0,
            done: Some(done),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<PingMsg>,
        msg: PingMsg,
        state: &mut PingerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PingMsg::Go => state.fill(state.in_flight),
            PingMsg::Pong => {
                state.received += 1;
                if state.received == state.want {
                    if let Some(done) = state.done.take() {
                        let _ = done.send(());
                    }
                    return Ok(());
                }
                state.fill(state.sent + 1)
            }
        }
    }
}

struct Ponger;

impl Actor for Ponger {
    type Msg = PongMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<PongMsg>,
        (): (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<PongMsg>,
        msg: PongMsg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PongMsg::Ping(reply_to) => reply_to.cast(PingMsg::Pong)?,
            PongMsg::Ask(port) => port.send(())?,
        }
        Ok(())
    }
}

async fn setup(in_flight: u64, want: u64) -> anyhow::Result<Pair> {
    let (ponger, _) = Actor::spawn(None, Ponger, ())
        .await
        .map_err(|e| anyhow!("spawn ponger: {e}"))?;
    let (tx, rx) = oneshot::channel();
    let (pinger, _) = Actor::spawn(None, Pinger, (ponger, in_flight, want, tx))
        .await
        .map_err(|e| anyhow!("spawn pinger: {e}"))?;
    Ok(Pair {
        go: Box::new(move || pinger.cast(PingMsg::Go).map_err(|e| anyhow!("start: {e}"))),
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
    let (ponger, _) = Actor::spawn(None, Ponger, ())
        .await
        .map_err(|e| anyhow!("spawn ponger: {e}"))?;
    pairs::time_asks(async {
        for _ in 0..round_trips {
            ractor::call!(ponger, PongMsg::Ask).map_err(|e| anyhow!("ask: {e}"))?;
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
    if multi_thread {
        let rt = pairs::multi_thread_runtime()?;
        // The asking task runs on a worker, as a caller inside the application would.
        let elapsed = rt.block_on(async {
            tokio::spawn(ask_loop(round_trips))
                .await
                .context("ask task")?
        })?;
        rt.shutdown_background();
        Ok(elapsed)
    } else {
        let rt = pairs::current_thread_runtime()?;
        let elapsed = rt.block_on(ask_loop(round_trips))?;
        rt.shutdown_background();
        Ok(elapsed)
    }
}
