//! Actors shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use rally::sync::Mutex;
use rally::{Actor, ActorResult, Context, Handler, Message};

/// A shared, ordered log of lifecycle events.
pub(crate) type Log = Arc<Mutex<Vec<String>>>;

pub(crate) fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

pub(crate) fn entries(log: &Log) -> Vec<String> {
    log.lock().clone()
}

/// Records its lifecycle and counts; panics or errors on request.
pub(crate) struct Recorder {
    pub name: String,
    pub log: Log,
    pub count: u64,
}

impl Recorder {
    pub(crate) fn new(name: &str, log: &Log) -> Self {
        Self {
            name: name.to_owned(),
            log: log.clone(),
            count: 0,
        }
    }
}

impl Actor for Recorder {
    async fn started(&mut self, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.log.lock().push(format!("{} started", self.name));
        Ok(())
    }

    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.log.lock().push(format!("{} stopped", self.name));
    }

    async fn pre_restart(&mut self, _ctx: &mut Context<Self>, failure: &str) {
        self.log
            .lock()
            .push(format!("{} pre_restart: {failure}", self.name));
    }
}

/// Adds one and replies with the running count.
pub(crate) struct Incr;
impl Message for Incr {
    type Reply = u64;
}

impl Handler<Incr> for Recorder {
    async fn handle(&mut self, _: Incr, _ctx: &mut Context<Self>) -> ActorResult<u64> {
        self.count += 1;
        Ok(self.count)
    }
}

/// Makes the handler panic.
pub(crate) struct Panic;
impl Message for Panic {
    type Reply = ();
}

impl Handler<Panic> for Recorder {
    async fn handle(&mut self, _: Panic, _ctx: &mut Context<Self>) -> ActorResult<()> {
        panic!("asked to panic");
    }
}

/// Makes the handler return an error.
pub(crate) struct Fail;
impl Message for Fail {
    type Reply = ();
}

impl Handler<Fail> for Recorder {
    async fn handle(&mut self, _: Fail, _ctx: &mut Context<Self>) -> ActorResult<()> {
        Err("asked to fail".into())
    }
}

/// Sleeps in the handler (async), to keep a message in flight.
pub(crate) struct Sleep(pub std::time::Duration);
impl Message for Sleep {
    type Reply = ();
}

impl Handler<Sleep> for Recorder {
    async fn handle(&mut self, msg: Sleep, _ctx: &mut Context<Self>) -> ActorResult<()> {
        tokio::time::sleep(msg.0).await;
        Ok(())
    }
}
