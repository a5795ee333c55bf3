//! The remoting defects found by attacking it, one test each (issue "remoting that cannot be
//! wedged, bloated or fooled"): a refused message must not wedge the lane, a reply that fails to
//! encode must reach the asker, a panicking `Serialize` must not poison anything, timed-out asks
//! free their slots, a peer's smaller frame maximum is honoured at the sender, a name exposed
//! late is found, and a name can be reused after its actor stops. Real TCP on loopback.

#[path = "support/nodes.rs"]
mod nodes;

use std::time::{Duration, Instant};

use nodes::{Blob, Echo, T, Target, client_node, config, target_node};
use rally_actor::{Actor, ActorResult, AskError, Context, Handler, Message, SendError};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage};
use rally_test::eventually;
use serde::{Deserialize, Serialize, Serializer};

/// A message whose `Serialize` fails (or panics) on demand.
#[derive(Debug, Clone, Copy, Deserialize)]
struct Fussy {
    panic: bool,
}
impl Serialize for Fussy {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        if self.panic {
            panic!("a user's Serialize that panics");
        }
        Err(serde::ser::Error::custom(
            "this value refuses to be encoded",
        ))
    }
}
impl Message for Fussy {
    type Reply = ();
}
impl RemoteMessage for Fussy {
    const MANIFEST: &'static str = "test.Fussy";
}

/// A reply that cannot be encoded on the replying node.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
struct BadReply;
impl Serialize for BadReply {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "this reply refuses to be encoded",
        ))
    }
}

/// Asks for a [`BadReply`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct WantBadReply;
impl Message for WantBadReply {
    type Reply = BadReply;
}
impl RemoteMessage for WantBadReply {
    const MANIFEST: &'static str = "test.WantBadReply";
}

/// Never answered in time: the handler sleeps.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Stall;
impl Message for Stall {
    type Reply = ();
}
impl RemoteMessage for Stall {
    const MANIFEST: &'static str = "test.Stall";
}

/// Accepts all of the above, and echoes.
struct Picky;
impl Actor for Picky {}
impl Handler<Echo> for Picky {
    async fn handle(&mut self, msg: Echo, _: &mut Context<Self>) -> ActorResult<u64> {
        Ok(msg.0)
    }
}
impl Handler<Fussy> for Picky {
    async fn handle(&mut self, _: Fussy, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}
impl Handler<WantBadReply> for Picky {
    async fn handle(&mut self, _: WantBadReply, _: &mut Context<Self>) -> ActorResult<BadReply> {
        Ok(BadReply)
    }
}
impl Handler<Stall> for Picky {
    async fn handle(&mut self, _: Stall, _: &mut Context<Self>) -> ActorResult<()> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
}
impl RemoteActor for Picky {
    fn messages(table: &mut MessageTable<Self>) {
        table
            .add::<Echo>()
            .add::<Fussy>()
            .add::<WantBadReply>()
            .add::<Stall>();
    }
}

/// Two nodes; `picky` exposed on the second.
async fn picky_pair(
    sender: rally_remote::RemoteConfig,
) -> (
    (rally_actor::ActorSystem, rally_remote::RemoteNode),
    (rally_actor::ActorSystem, rally_remote::RemoteNode),
) {
    let (b_system, b) = client_node("b", config()).await;
    let picky = b_system.spawn(Picky).unwrap();
    b.expose("picky", &picky).unwrap();
    let a = client_node("a", sender).await;
    (a, (b_system, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_message_refused_for_its_size_does_not_wedge_the_lane() {
    let mut small = config();
    small.max_frame_bytes = 64 * 1024;
    let ((_a_system, a), (_b_system, b)) = picky_pair(small).await;
    // The lane is connected and its writer idle, waiting for a wake-up.
    let picky = a.lookup::<Picky>(b.address(), "picky");
    assert_eq!(picky.ask(Echo(6), T).await, Ok(6));
    let target = a.lookup::<Target>(b.address(), "target-not-yet");
    // The very first frame to this recipient (its definitions go first) is refused.
    let refused = target.tell(Blob(vec![1; 100 * 1024]));
    assert!(
        matches!(refused, Err(SendError::Refused(..))),
        "{refused:?}"
    );
    // The lane was not left with stranded definitions: the next message goes through.
    assert_eq!(picky.ask(Echo(7), T).await, Ok(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_message_whose_serialize_fails_does_not_wedge_the_lane() {
    let ((_a_system, a), (_b_system, b)) = picky_pair(config()).await;
    let picky = a.lookup::<Picky>(b.address(), "picky");
    assert_eq!(picky.ask(Echo(1), T).await, Ok(1));
    // The first Fussy would define its manifest: refused, it must not strand the definition.
    let refused = picky.tell(Fussy { panic: false });
    assert!(
        matches!(refused, Err(SendError::Refused(..))),
        "{refused:?}"
    );
    assert_eq!(picky.ask(Echo(8), T).await, Ok(8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_serialize_is_a_refusal_and_poisons_nothing() {
    let ((_a_system, a), (_b_system, b)) = picky_pair(config()).await;
    let picky = a.lookup::<Picky>(b.address(), "picky");
    for _ in 0..3 {
        let refused = picky.tell(Fussy { panic: true });
        match refused {
            Err(SendError::Refused(_, why)) => assert!(why.contains("panicked"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(picky.ask(Echo(9), T).await, Ok(9));
    assert_eq!(a.stats().outbound_dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_fails_to_encode_reaches_the_asker_as_an_error() {
    let ((_a_system, a), (_b_system, b)) = picky_pair(config()).await;
    let picky = a.lookup::<Picky>(b.address(), "picky");
    // The replying node's lane back to us is connected and idle.
    assert_eq!(picky.ask(Echo(1), T).await, Ok(1));
    let started = Instant::now();
    let answer = picky.ask(WantBadReply, T).await;
    assert!(
        matches!(answer, Err(AskError::Undeliverable(_))),
        "{answer:?} after {:?}",
        started.elapsed()
    );
    // The replying node's lane back to us still works.
    assert_eq!(picky.ask(Echo(10), T).await, Ok(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_asks_free_their_slots() {
    let ((_a_system, a), (_b_system, b)) = picky_pair(config()).await;
    let picky = a.lookup::<Picky>(b.address(), "picky");
    assert_eq!(picky.ask(Echo(1), T).await, Ok(1));
    // An actor that never answers in time: every ask times out.
    for _ in 0..2_000 {
        let answer = picky.ask(Stall, Duration::from_millis(1)).await;
        assert_eq!(answer, Err(AskError::Timeout(Duration::from_millis(1))));
    }
    assert_eq!(a.stats().pending_requests, 0, "timed-out asks left slots");

    // And to an address where nothing listens (the detector never fires for it).
    let nowhere: rally_remote::NodeAddress = "rally://nobody@127.0.0.1:1".parse().unwrap();
    let ghost = a.lookup::<Picky>(&nowhere, "picky");
    for _ in 0..2_000 {
        let answer = ghost.ask(Echo(1), Duration::from_millis(1)).await;
        assert!(answer.is_err());
    }
    assert_eq!(a.stats().pending_requests, 0, "asks to nowhere left slots");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_above_the_peers_smaller_maximum_is_refused_at_the_sender() {
    // The receiver takes at most 1 MiB; the sender would take 16 MiB.
    let mut small = config();
    small.max_frame_bytes = 1024 * 1024;
    let (_b_system, b) = target_node("b", small).await;
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let answer = target.ask(Blob(vec![3; 2 * 1024 * 1024]), T).await;
    match answer {
        Err(AskError::Undeliverable(why)) => assert!(why.contains("maximum"), "{why}"),
        other => panic!("expected a refusal at the sender, got {other:?}"),
    }
    // The peers are still on speaking terms: nothing was quarantined.
    assert_eq!(target.ask(Echo(2), T).await, Ok(2));
    assert_eq!(b.stats().protocol_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_exposed_after_the_first_message_is_found_on_the_same_connection() {
    let (b_system, b) = client_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let late = a.lookup::<Target>(b.address(), "late");
    let early = late.ask(Echo(1), T).await;
    assert!(
        matches!(early, Err(AskError::Undeliverable(_))),
        "{early:?}"
    );
    b.expose("late", &b_system.spawn(Target::new()).unwrap())
        .unwrap();
    assert_eq!(late.ask(Echo(2), T).await, Ok(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_free_again_once_its_actor_stops() {
    let (b_system, b) = client_node("b", config()).await;
    let first = b_system.spawn(Target::new()).unwrap();
    b.expose("worker", &first).unwrap();
    let (_a_system, a) = client_node("a", config()).await;
    let remote = a.lookup::<Target>(b.address(), "worker");
    assert_eq!(remote.ask(Echo(1), T).await, Ok(1));
    let mut probe = rally_test::Probe::<rally_actor::Terminated>::spawn(&b_system);
    probe.watch(&first);
    first.stop();
    probe.expect_msg(T).await.expect("the first actor stops");
    // The entry went with the actor: the name can be used again, and the connection that
    // had resolved it reaches the new actor.
    let second = b_system.spawn(Target::new()).unwrap();
    b.expose("worker", &second)
        .expect("the stopped actor's name is free");
    assert_eq!(remote.ask(Echo(2), T).await, Ok(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_flowing_both_ways_at_rest() {
    let (_b_system, b) = target_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    // Heartbeats every 100 ms: each side keeps receiving frames with no user traffic.
    let (a_before, b_before) = (a.stats().frames_received, b.stats().frames_received);
    eventually("heartbeats keep coming", T, async || {
        let (a_now, b_now) = (a.stats().frames_received, b.stats().frames_received);
        if a_now >= a_before + 5 && b_now >= b_before + 5 {
            return Ok(());
        }
        Err(format!("a {a_before}->{a_now}, b {b_before}->{b_now}"))
    })
    .await;
}

#[tokio::test]
async fn an_empty_secret_is_refused_unless_asked_for() {
    let system = rally_actor::ActorSystem::new("open");
    let refused =
        rally_remote::RemoteNode::start(&system, rally_remote::RemoteConfig::default()).await;
    assert!(matches!(
        refused,
        Err(rally_remote::NodeStartError::Config(
            rally_remote::RemoteConfigError::EmptySecret
        ))
    ));
    let config = rally_remote::RemoteConfig::builder()
        .listen("127.0.0.1", 0)
        .insecure_without_secret()
        .build()
        .unwrap();
    // Debug never shows a secret, empty or not.
    assert!(format!("{config:?}").contains("not shown"));
    assert!(
        rally_remote::RemoteNode::start(&system, config)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn more_ordinary_lanes_than_the_wire_can_number_are_refused_at_start() {
    // 255 ordinary lanes would need wire bytes 1..=255, and 255 is the large lane's.
    let system = rally_actor::ActorSystem::new("lanes");
    let mut config = config();
    config.ordinary_lanes = 255;
    let refused = rally_remote::RemoteNode::start(&system, config).await;
    assert!(
        matches!(
            refused,
            Err(rally_remote::NodeStartError::Config(
                rally_remote::RemoteConfigError::Invalid {
                    key: "ordinary-lanes",
                    ..
                }
            ))
        ),
        "{:?}",
        refused.err()
    );
    let mut config = self::config();
    config.ordinary_lanes = 254;
    assert!(
        rally_remote::RemoteNode::start(&system, config)
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_refused_at_the_sender_is_counted_as_a_dead_letter() {
    let ((a_system, a), (_b_system, b)) = picky_pair(config()).await;
    let picky = a.lookup::<Picky>(b.address(), "picky");
    let before = a_system.dead_letters().count();
    assert!(picky.tell(Fussy { panic: false }).is_err());
    assert_eq!(a_system.dead_letters().count(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_unauthenticated_cap_are_refused_at_once_and_counted() {
    let mut capped = config();
    capped.max_unauthenticated_connections = 4;
    capped.handshake_timeout = Duration::from_secs(60);
    let (_b_system, b) = target_node("b", capped).await;
    let address = (b.address().host.clone(), b.address().port);
    // Four silent connections hold every slot (they never send a byte).
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(
            tokio::net::TcpStream::connect(address.clone())
                .await
                .unwrap(),
        );
    }
    // The next ones are closed at once, not held until the handshake deadline.
    for _ in 0..3 {
        let mut extra = tokio::net::TcpStream::connect(address.clone())
            .await
            .unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(T, tokio::io::AsyncReadExt::read(&mut extra, &mut byte))
            .await
            .expect("closed well before the 60 s handshake deadline");
        assert!(matches!(read, Ok(0) | Err(_)));
    }
    assert_eq!(b.stats().connections_refused, 3);
    // Once the silent ones go, a real peer is served again.
    drop(silent);
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    eventually("a real peer is served again", T, async || {
        match target.ask(Echo(1), Duration::from_millis(500)).await {
            Ok(1) => Ok(()),
            other => Err(other),
        }
    })
    .await;
}
