//! Actors and node helpers shared by the remoting tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_remote::transport::Transport;
use rally_remote::{MessageTable, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode};
use serde::{Deserialize, Serialize};

pub(crate) const T: Duration = Duration::from_secs(10);
pub(crate) const SECRET: &[u8] = b"test secret";

/// Replies with the same number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Echo(pub u64);
impl Message for Echo {
    type Reply = u64;
}
impl RemoteMessage for Echo {
    const MANIFEST: &'static str = "test.Echo";
}

/// Appends to the actor's log (to check ordering).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Record(pub u64);
impl Message for Record {
    type Reply = ();
}
impl RemoteMessage for Record {
    const MANIFEST: &'static str = "test.Record";
}

/// Returns the log and whether it was strictly increasing.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Check;
impl Message for Check {
    type Reply = (u64, bool);
}
impl RemoteMessage for Check {
    const MANIFEST: &'static str = "test.Check";
}

/// A large blob, encoded as one byte string (not element by element).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Blob(#[serde(with = "byte_string")] pub Vec<u8>);

mod byte_string {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        <Vec<u8>>::deserialize(d)
    }
}
impl Message for Blob {
    type Reply = usize;
}
impl RemoteMessage for Blob {
    const MANIFEST: &'static str = "test.Blob";
}

/// Asks for a blob of this many bytes back.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Fill(pub usize);
impl Message for Fill {
    type Reply = Blob;
}
impl RemoteMessage for Fill {
    const MANIFEST: &'static str = "test.Fill";
}

/// Makes the actor stop.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Quit;
impl Message for Quit {
    type Reply = ();
}
impl RemoteMessage for Quit {
    const MANIFEST: &'static str = "test.Quit";
}

/// A message type that is NOT registered for remoting.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Unregistered;
impl Message for Unregistered {
    type Reply = ();
}

/// The remote-side test actor.
#[derive(Default)]
pub(crate) struct Target {
    count: u64,
    last: Option<u64>,
    ordered: bool,
}

impl Target {
    pub(crate) fn new() -> Self {
        Self {
            count: 0,
            last: None,
            ordered: true,
        }
    }
}

impl Actor for Target {}
impl Handler<Echo> for Target {
    async fn handle(&mut self, msg: Echo, _: &mut Context<Self>) -> ActorResult<u64> {
        Ok(msg.0)
    }
}
impl Handler<Record> for Target {
    async fn handle(&mut self, msg: Record, _: &mut Context<Self>) -> ActorResult<()> {
        if self.last.is_some_and(|last| msg.0 <= last) {
            self.ordered = false;
        }
        self.last = Some(msg.0);
        self.count += 1;
        Ok(())
    }
}
impl Handler<Check> for Target {
    async fn handle(&mut self, _: Check, _: &mut Context<Self>) -> ActorResult<(u64, bool)> {
        Ok((self.count, self.ordered))
    }
}
impl Handler<Blob> for Target {
    async fn handle(&mut self, msg: Blob, _: &mut Context<Self>) -> ActorResult<usize> {
        Ok(msg.0.len())
    }
}
impl Handler<Fill> for Target {
    async fn handle(&mut self, msg: Fill, _: &mut Context<Self>) -> ActorResult<Blob> {
        Ok(Blob(vec![7; msg.0]))
    }
}
impl Handler<Quit> for Target {
    async fn handle(&mut self, _: Quit, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.stop();
        Ok(())
    }
}
impl Handler<Unregistered> for Target {
    async fn handle(&mut self, _: Unregistered, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}
impl RemoteActor for Target {
    fn messages(table: &mut MessageTable<Self>) {
        table
            .add::<Echo>()
            .add::<Record>()
            .add::<Check>()
            .add::<Blob>()
            .add::<Fill>()
            .add::<Quit>();
    }
}

/// A config for loopback tests with a quick failure detector.
pub(crate) fn config() -> RemoteConfig {
    let mut config = RemoteConfig::builder()
        .listen("127.0.0.1", 0)
        .secret(SECRET.to_vec())
        .build()
        .unwrap();
    config.heartbeat_interval = Duration::from_millis(100);
    config.failure_detector.acceptable_heartbeat_pause = Duration::from_millis(600);
    config.failure_detector.first_heartbeat_estimate = Duration::from_millis(100);
    config.failure_detector.min_std_deviation = Duration::from_millis(50);
    config
}

/// A node over real TCP exposing one `Target` as `target`.
pub(crate) async fn target_node(name: &str, config: RemoteConfig) -> (ActorSystem, RemoteNode) {
    let system = ActorSystem::new(name);
    let node = RemoteNode::start(&system, config)
        .await
        .expect("node starts");
    let target = system.spawn(Target::new()).expect("spawn");
    node.expose("target", &target).expect("expose");
    (system, node)
}

/// A node on the given transport exposing one `Target` as `target`.
pub(crate) async fn target_node_on(
    name: &str,
    config: RemoteConfig,
    transport: Arc<dyn Transport>,
) -> (ActorSystem, RemoteNode) {
    let system = ActorSystem::new(name);
    let node = RemoteNode::start_with(&system, config, transport)
        .await
        .expect("node starts");
    let target = system.spawn(Target::new()).expect("spawn");
    node.expose("target", &target).expect("expose");
    (system, node)
}

/// A node exposing nothing.
pub(crate) async fn client_node(name: &str, config: RemoteConfig) -> (ActorSystem, RemoteNode) {
    let system = ActorSystem::new(name);
    let node = RemoteNode::start(&system, config)
        .await
        .expect("node starts");
    (system, node)
}
