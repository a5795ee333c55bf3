//! Grain requests between two nodes over real loopback TCP: the frame kind the virtual-actor
//! runtime sends, and what its sender learns of each — a reply, a reply too large for a frame
//! (handled, its reply lost), a node with no grain service (not handled), a reply dropped
//! unanswered, and a node that goes away while the request is with it (unknown); tells that
//! come before a node's grain service is installed, kept for it when the node holds them.

#[path = "support/nodes.rs"]
mod nodes;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use nodes::{T, client_node, config};
use rally_actor::ActorSystem;
use rally_remote::{
    GrainAnswer, GrainAsk, GrainFlags, GrainOutcome, GrainPeer, GrainReplyTo, GrainRequest,
    GrainSend, GrainService, Handled, RemoteNode, UniqueAddress,
};
use tokio::sync::mpsc;

/// The frame limit of these nodes: small, so a reply can be made larger than it.
const MAX_FRAME: u32 = 64 * 1024;

/// What an ask's sender learned: the outcome (or `None` for not sent / unknown) and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Learned {
    Replied(GrainOutcome, Vec<u8>),
    NotSent,
    Unknown,
}

impl Learned {
    fn handled(&self) -> Handled {
        match self {
            Self::Replied(outcome, _) => outcome.handled(),
            Self::NotSent => Handled::No,
            Self::Unknown => Handled::Unknown,
        }
    }
}

/// An ask whose message is `payload` and whose answer goes to a channel.
struct Ask {
    payload: Vec<u8>,
    answer: mpsc::UnboundedSender<Learned>,
}

impl GrainAsk for Ask {
    fn encode(&self, buf: &mut BytesMut) -> Result<(), String> {
        buf.extend_from_slice(&self.payload);
        Ok(())
    }

    fn answer(self: Box<Self>, answer: GrainAnswer<'_>) {
        let learned = match answer {
            GrainAnswer::Replied { outcome, body } => Learned::Replied(outcome, body.to_vec()),
            GrainAnswer::NotSent(_) => Learned::NotSent,
            GrainAnswer::Unknown(_) => Learned::Unknown,
        };
        let _ = self.answer.send(learned);
    }
}

/// Serves by the payload: `echo…` replies it, `big` replies twice the frame limit, `drop`
/// drops the reply unanswered, `hold` keeps it (for a node that goes away meanwhile); tells
/// are counted.
#[derive(Default)]
struct Service {
    held: Mutex<Vec<GrainReplyTo>>,
    requests: Mutex<Vec<(String, String, Option<Duration>)>>,
}

impl GrainService for Service {
    fn request(&self, _: &UniqueAddress, request: GrainRequest<'_>, reply: Option<GrainReplyTo>) {
        self.requests.lock().unwrap().push((
            request.kind.to_owned(),
            request.identity.to_owned(),
            request.wait,
        ));
        let Some(reply) = reply else { return };
        let payload = request.payload.to_vec();
        match payload.as_slice() {
            b"big" => reply.send(GrainOutcome::OK, |buf| {
                buf.extend_from_slice(&vec![7; 2 * MAX_FRAME as usize]);
                Ok(())
            }),
            b"unencodable" => reply.send(GrainOutcome::OK, |_| Err("no".to_owned())),
            b"drop" => drop(reply),
            b"hold" => self.held.lock().unwrap().push(reply),
            _ => reply.send(GrainOutcome::OK, |buf| {
                buf.extend_from_slice(&payload);
                Ok(())
            }),
        }
    }
}

fn small_frames() -> rally_remote::RemoteConfig {
    let mut config = config();
    config.max_frame_bytes = MAX_FRAME;
    config
}

/// A grain request to `identity` of kind `account`, as an ask waiting `T`.
fn send(identity: &str) -> GrainSend<'_> {
    GrainSend {
        kind: "account",
        manifest: Some("bank.Deposit"),
        identity,
        hops: 1,
        wait: Some(T),
        flags: GrainFlags::default(),
        context: None,
    }
}

/// Asks `peer` with `payload` and waits for what is learned.
async fn ask(peer: &GrainPeer, payload: &[u8]) -> Learned {
    let (to, mut answer) = mpsc::unbounded_channel();
    peer.ask(
        &send("a-1"),
        Box::new(Ask {
            payload: payload.to_vec(),
            answer: to,
        }),
    );
    tokio::time::timeout(T, answer.recv())
        .await
        .expect("an answer within the timeout")
        .expect("answered once")
}

/// Node B serving grain requests with a [`Service`], and node A's peer to it.
struct Served {
    _systems: (ActorSystem, ActorSystem),
    _a: RemoteNode,
    b: RemoteNode,
    /// Held here: B holds its service weakly.
    service: Arc<Service>,
    peer: GrainPeer,
}

async fn served() -> Served {
    let (b_system, b) = client_node("b", small_frames()).await;
    let service = Arc::new(Service::default());
    let dyn_service: Arc<dyn GrainService> = service.clone();
    b.serve_grains(Arc::downgrade(&dyn_service));
    let (a_system, a) = client_node("a", small_frames()).await;
    let peer = a.grain_peer(b.address());
    Served {
        _systems: (a_system, b_system),
        _a: a,
        b,
        service,
        peer,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outcome_reaches_the_sender_and_says_whether_the_request_was_handled() {
    // Every field bound (`..` would drop the nodes at once).
    let Served {
        _systems,
        _a,
        b: _b,
        service,
        peer,
    } = served().await;

    // A reply.
    let echoed = ask(&peer, b"echo 1").await;
    assert_eq!(
        echoed,
        Learned::Replied(GrainOutcome::OK, b"echo 1".to_vec())
    );
    assert_eq!(echoed.handled(), Handled::Yes);
    // The request arrived with its kind, identity and how long its sender waits.
    let (kind, identity, wait) = service.requests.lock().unwrap()[0].clone();
    assert_eq!((kind.as_str(), identity.as_str()), ("account", "a-1"));
    assert!(
        wait.is_some_and(|wait| wait <= T && wait > T / 2),
        "{wait:?}"
    );

    // A reply larger than the frame limit, and one that fails to encode: handled, reply lost.
    for payload in [&b"big"[..], b"unencodable"] {
        let lost = ask(&peer, payload).await;
        assert!(
            matches!(lost, Learned::Replied(GrainOutcome::REPLY_LOST, _)),
            "{lost:?}"
        );
        assert_eq!(lost.handled(), Handled::Yes);
    }

    // A reply dropped unanswered: the sender cannot know.
    let dropped = ask(&peer, b"drop").await;
    assert!(
        matches!(dropped, Learned::Replied(GrainOutcome::UNKNOWN, _)),
        "{dropped:?}"
    );
    assert_eq!(dropped.handled(), Handled::Unknown);

    // The connection still carries requests after all of that.
    assert_eq!(
        ask(&peer, b"echo 2").await,
        Learned::Replied(GrainOutcome::OK, b"echo 2".to_vec())
    );

    // A tell reaches the service, with no wait.
    let before = service.requests.lock().unwrap().len();
    let mut tell = send("a-2");
    tell.wait = None;
    peer.tell(&tell, |buf| {
        buf.extend_from_slice(b"told");
        Ok(())
    })
    .unwrap();
    rally_test::eventually("the tell is served", T, async || {
        service.requests.lock().unwrap().len() > before
    })
    .await;
    let (_, identity, wait) = service.requests.lock().unwrap()[before].clone();
    assert_eq!((identity.as_str(), wait), ("a-2", None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_no_grain_service_refuses_requests_as_not_handled() {
    let (_b_system, b) = client_node("b", small_frames()).await;
    let (_a_system, a) = client_node("a", small_frames()).await;
    let peer = a.grain_peer(b.address());
    let refused = ask(&peer, b"echo").await;
    assert!(
        matches!(refused, Learned::Replied(GrainOutcome::UNREACHABLE, _)),
        "{refused:?}"
    );
    assert_eq!(refused.handled(), Handled::No);

    // Once a service is installed it serves; once it is dropped, requests are refused again.
    let service: Arc<dyn GrainService> = Arc::new(Service::default());
    b.serve_grains(Arc::downgrade(&service));
    assert_eq!(
        ask(&peer, b"echo").await,
        Learned::Replied(GrainOutcome::OK, b"echo".to_vec())
    );
    drop(service);
    assert!(matches!(
        ask(&peer, b"echo").await,
        Learned::Replied(GrainOutcome::UNREACHABLE, _)
    ));
}

/// Records the payloads of the tells it serves, in the order served.
#[derive(Default)]
struct Recorder(Mutex<Vec<Vec<u8>>>);

impl GrainService for Recorder {
    fn request(&self, _: &UniqueAddress, request: GrainRequest<'_>, reply: Option<GrainReplyTo>) {
        assert!(reply.is_none(), "only tells here");
        self.0.lock().unwrap().push(request.payload.to_vec());
    }
}

/// Sends tells `from..to` (each its number as payload) to one identity, then an ask to the
/// same identity: once its answer is back, the tells reached the node (one lane, in order).
async fn tells_then_a_barrier(peer: &GrainPeer, numbers: std::ops::Range<u32>) -> Learned {
    let mut tell = send("a-1");
    tell.wait = None;
    for n in numbers {
        peer.tell(&tell, |buf| {
            buf.extend_from_slice(&n.to_le_bytes());
            Ok(())
        })
        .unwrap();
    }
    ask(peer, b"barrier").await
}

/// A member's peers send to it as soon as they see it up, which can be before its virtual-actor
/// runtime is installed: a node that holds grain tells keeps the ones that come meanwhile and
/// hands them to the runtime, in order, when it is installed; asks are still refused as not
/// handled (their senders send them again). A node that does not hold them drops them, counted
/// as unknown recipients (what every node did before: a rolling restart lost tells so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_that_come_before_the_grain_service_wait_for_it_when_the_node_holds_them() {
    for holds in [true, false] {
        let (_b_system, b) = client_node("b", small_frames()).await;
        if holds {
            b.hold_grain_tells();
        }
        let (_a_system, a) = client_node("a", small_frames()).await;
        let peer = a.grain_peer(b.address());
        let barrier = tells_then_a_barrier(&peer, 0..100).await;
        assert!(
            matches!(barrier, Learned::Replied(GrainOutcome::UNREACHABLE, _)),
            "an ask is refused as before: {barrier:?}"
        );
        let recorder = Arc::new(Recorder::default());
        let service: Arc<dyn GrainService> = recorder.clone();
        b.serve_grains(Arc::downgrade(&service));
        // Once installed, tells go straight to it, after the held ones.
        let mut tell = send("a-1");
        tell.wait = None;
        peer.tell(&tell, |buf| {
            buf.extend_from_slice(&100u32.to_le_bytes());
            Ok(())
        })
        .unwrap();
        rally_test::eventually("the last tell is served", T, async || {
            recorder.0.lock().unwrap().last() == Some(&100u32.to_le_bytes().to_vec())
        })
        .await;
        let served: Vec<u32> = recorder
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|p| u32::from_le_bytes(p.as_slice().try_into().unwrap()))
            .collect();
        let unknown = b.stats().unknown_recipient;
        if holds {
            assert_eq!(
                served,
                (0..=100).collect::<Vec<_>>(),
                "every tell, in order"
            );
            assert_eq!(unknown, 1, "only the ask found no recipient");
        } else {
            assert_eq!(served, [100], "the tells before the service were dropped");
            assert_eq!(unknown, 101, "and counted");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_node_that_goes_away_has_an_unknown_outcome() {
    let Served {
        _systems,
        _a,
        b,
        service,
        peer,
    } = served().await;
    assert!(matches!(
        ask(&peer, b"echo").await,
        Learned::Replied(GrainOutcome::OK, _)
    ));

    // The request is with B (held, unanswered) when B goes away.
    let (to, mut answer) = mpsc::unbounded_channel();
    peer.ask(
        &send("a-1"),
        Box::new(Ask {
            payload: b"hold".to_vec(),
            answer: to,
        }),
    );
    rally_test::eventually("B holds the request", T, async || {
        !service.held.lock().unwrap().is_empty()
    })
    .await;
    b.leave(Duration::from_millis(200)).await;
    let learned = tokio::time::timeout(T, answer.recv())
        .await
        .expect("an answer within the timeout")
        .expect("answered once");
    assert_eq!(learned.handled(), Handled::Unknown, "{learned:?}");

    // A request to the life of B that has ended is not sent.
    let after = ask(&peer, b"echo").await;
    assert_eq!(after.handled(), Handled::No, "{after:?}");
}
