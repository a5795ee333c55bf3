//! What the cluster layer builds on, over real TCP: peer events (connected, unreachable,
//! down) and the authenticated sender of an inbound message.

#[path = "support/nodes.rs"]
mod nodes;

use std::time::Duration;

use nodes::{Echo, T, Target, client_node, config, target_node};
use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_remote::{
    DownReason, MessageTable, PeerEvent, RemoteActor, RemoteContext, RemoteMessage, RemoteNode,
    UniqueAddress,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// The next event, or a panic after `T`.
async fn next(events: &mut broadcast::Receiver<PeerEvent>) -> PeerEvent {
    tokio::time::timeout(T, events.recv())
        .await
        .expect("an event within the deadline")
        .expect("no event lost")
}

/// Asks who sent it.
#[derive(Debug, Serialize, Deserialize)]
struct WhoSent;
impl Message for WhoSent {
    /// The sender's address and incarnation, if it came from another node.
    type Reply = Option<(String, u64)>;
}
impl RemoteMessage for WhoSent {
    const MANIFEST: &'static str = "test.WhoSent";
}

struct Witness;
impl Actor for Witness {}
impl Handler<WhoSent> for Witness {
    async fn handle(
        &mut self,
        _: WhoSent,
        ctx: &mut Context<Self>,
    ) -> ActorResult<Option<(String, u64)>> {
        Ok(ctx
            .remote_origin()
            .map(|from| (from.address.to_string(), from.incarnation.0)))
    }
}
impl RemoteActor for Witness {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<WhoSent>();
    }
}

fn described(node: &RemoteNode) -> Option<(String, u64)> {
    let UniqueAddress {
        address,
        incarnation,
    } = node.unique_address();
    Some((address.to_string(), incarnation.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_knows_which_node_sent_the_message_it_handles() {
    let system_b = ActorSystem::new("b");
    let b = RemoteNode::start(&system_b, config()).await.unwrap();
    let witness = system_b.spawn(Witness).unwrap();
    b.expose("witness", &witness).unwrap();
    let (_as, a) = client_node("a", config()).await;
    let (_cs, c) = client_node("c", config()).await;

    let from_a = a.lookup::<Witness>(b.address(), "witness");
    let from_c = c.lookup::<Witness>(b.address(), "witness");
    assert_eq!(from_a.ask(WhoSent, T).await.unwrap(), described(&a));
    assert_eq!(from_c.ask(WhoSent, T).await.unwrap(), described(&c));
    // A local message has no remote origin, also right after a remote one.
    assert_eq!(witness.ask(WhoSent, T).await.unwrap(), None);
    assert_eq!(from_a.ask(WhoSent, T).await.unwrap(), described(&a));
    assert_eq!(b.system().name(), "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_see_the_other_connect_and_a_leave_is_down_left() {
    let (_bs, b) = target_node("b", config()).await;
    let (_as, a) = client_node("a", config()).await;
    let mut a_events = a.peer_events();
    let mut b_events = b.peer_events();
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(7), T).await, Ok(7));
    assert_eq!(
        next(&mut a_events).await,
        PeerEvent::Connected(b.unique_address().clone())
    );
    assert_eq!(
        next(&mut b_events).await,
        PeerEvent::Connected(a.unique_address().clone())
    );
    b.leave(T).await;
    assert_eq!(
        next(&mut a_events).await,
        PeerEvent::Down {
            peer: b.unique_address().clone(),
            reason: DownReason::Left
        }
    );
}

/// By default a peer the detector suspects is down at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_unreachable_then_down_by_default() {
    let (bs, b) = target_node("b", config()).await;
    let (_as, a) = client_node("a", config()).await;
    let mut events = a.peer_events();
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(7), T).await, Ok(7));
    let b_id = b.unique_address().clone();
    assert_eq!(next(&mut events).await, PeerEvent::Connected(b_id.clone()));
    // B goes silent without leaving: its node is dropped, its heartbeats stop.
    drop(b);
    drop(bs);
    assert_eq!(
        next(&mut events).await,
        PeerEvent::Unreachable(b_id.clone())
    );
    assert_eq!(
        next(&mut events).await,
        PeerEvent::Down {
            peer: b_id,
            reason: DownReason::Unreachable
        }
    );
}

/// With `quarantine_unreachable_after: None` (a cluster decides), a silent peer stays
/// unreachable until someone declares it down with `RemoteNode::quarantine`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quarantine_after_an_unreachable_peer_waits_for_a_decision() {
    let (bs, b) = target_node("b", config()).await;
    let mut a_config = config();
    a_config.quarantine_unreachable_after = None;
    let (_as, a) = client_node("a", a_config).await;
    let mut events = a.peer_events();
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(7), T).await, Ok(7));
    let b_id = b.unique_address().clone();
    assert_eq!(next(&mut events).await, PeerEvent::Connected(b_id.clone()));
    drop(b);
    drop(bs);
    assert_eq!(
        next(&mut events).await,
        PeerEvent::Unreachable(b_id.clone())
    );
    // Several detector periods later, still only unreachable.
    let later = tokio::time::timeout(Duration::from_millis(1500), events.recv()).await;
    assert!(later.is_err(), "no event without a decision: {later:?}");
    a.quarantine(&b_id, "downed by the test");
    assert_eq!(
        next(&mut events).await,
        PeerEvent::Down {
            peer: b_id,
            reason: DownReason::Requested("downed by the test".into())
        }
    );
    assert!(matches!(
        target.ask(Echo(8), Duration::from_secs(1)).await,
        Err(rally_actor::AskError::Undeliverable(_))
    ));
}
