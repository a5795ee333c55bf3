//! local-ping-pong on actix: each pair on its own `System` (actix's per-thread event loop).

use std::time::Duration;

use actix::prelude::*;
use anyhow::anyhow;
use tokio::sync::oneshot;

use crate::pairs::{self, ActixSystem, Pair};

struct Pinger {
    target: Addr<Ponger>,
    in_flight: u64,
    want: u64,
    sent: u64,
    received: u64,
    done: Option<oneshot::Sender<()>>,
}

impl Pinger {
    fn fill(&mut self, upto: u64, me: &Addr<Pinger>) {
        while self.sent < upto.min(self.want) {
            self.sent += 1;
            // do_send bypasses the mailbox capacity, like the other frameworks' unbounded tell.
            self.target.do_send(Ping(me.clone()));
        }
    }
}

impl Actor for Pinger {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct Go;

#[derive(Message)]
#[rtype(result = "()")]
struct Pong;

#[derive(Message)]
#[rtype(result = "()")]
struct Ping(Addr<Pinger>);

#[derive(Message)]
#[rtype(result = "()")]
struct AskPing;

impl Handler<Go> for Pinger {
    type Result = ();

    fn handle(&mut self, _: Go, ctx: &mut Context<Self>) {
        let me = ctx.address();
        self.fill(self.in_flight, &me);
    }
}

impl Handler<Pong> for Pinger {
    type Result = ();

    fn handle(&mut self, _: Pong, ctx: &mut Context<Self>) {
        self.received += 1;
        if self.received == self.want {
            if let Some(done) = self.done.take() {
                let _ = done.send(());
            }
            return;
        }
        let me = ctx.address();
        self.fill(self.sent + 1, &me);
    }
}

struct Ponger;

impl Actor for Ponger {
    type Context = Context<Self>;
}

impl Handler<Ping> for Ponger {
    type Result = ();

    fn handle(&mut self, Ping(reply_to): Ping, _: &mut Context<Self>) {
        reply_to.do_send(Pong);
    }
}

impl Handler<AskPing> for Ponger {
    type Result = ();

    fn handle(&mut self, _: AskPing, _: &mut Context<Self>) {}
}

async fn setup(in_flight: u64, want: u64) -> anyhow::Result<Pair> {
    let ponger = Ponger.start();
    let (tx, rx) = oneshot::channel();
    let pinger = Pinger {
        target: ponger,
        in_flight,
        want,
        sent: 0,
        received: 0,
        done: Some(tx),
    }
    .start();
    Ok(Pair {
        go: Box::new(move || {
            pinger.do_send(Go);
            Ok(())
        }),
        done: rx,
    })
}

pub fn run_pairs(pairs: usize, in_flight: u64, want: u64) -> anyhow::Result<Duration> {
    pairs::run_thread_per_pair(
        pairs,
        || Ok(Box::new(ActixSystem(System::new())) as Box<dyn pairs::BlockOn>),
        move || setup(in_flight, want),
    )
}

pub fn run_ask(round_trips: u64) -> anyhow::Result<Duration> {
    let system = System::new();
    system.block_on(async {
        let ponger = Ponger.start();
        pairs::time_asks(async {
            for _ in 0..round_trips {
                ponger
                    .send(AskPing)
                    .await
                    .map_err(|e| anyhow!("ask: {e}"))?;
            }
            Ok(())
        })
        .await
    })
}
