//! Bad membership input over real loopback TCP, from a node that holds the secret but is not
//! a member: garbage and a forged member are dropped and counted, and a flood of join
//! requests from distinct forged senders is dropped as forged (each speaks for a member other
//! than the node its connection authenticated), so none is admitted.

#[path = "support/nodes.rs"]
mod nodes;

use rally_actor::{Actor, ActorResult, Context, Handler, Message};
use rally_cluster::{ClusterConfig, MemberEvent, MemberId};
use rally_remote::{Incarnation, MessageTable, NodeAddress, RemoteActor, RemoteMessage};
use rally_test::eventually;
use serde::{Deserialize, Serialize};

/// The membership packet (see `docs/cluster-protocol.md`).
#[derive(Serialize, Deserialize)]
enum Packet {
    Swim(Vec<u8>),
    Leaving(MemberId),
}

/// A stand-in for the membership endpoint, so this node can address it.
struct Endpoint;

impl Actor for Endpoint {}

/// The membership carrier: same manifest, same encoding (one byte string).
#[derive(Serialize, Deserialize)]
struct Gossip(#[serde(with = "serde_bytes_compat")] Vec<u8>);

impl Message for Gossip {
    type Reply = ();
}

impl RemoteMessage for Gossip {
    const MANIFEST: &'static str = "rally.cluster.Gossip";
}

impl Handler<Gossip> for Endpoint {
    async fn handle(&mut self, _: Gossip, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}

impl RemoteActor for Endpoint {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<Gossip>();
    }
}

mod serde_bytes_compat {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        <Vec<u8>>::deserialize(d)
    }
}

/// A join request (foca's announce) from `src` to the member at `to`.
fn announce(src: &MemberId, to: &NodeAddress) -> Vec<u8> {
    let header = foca::Header {
        src: src.clone(),
        src_incarnation: 0,
        dst: MemberId::new(to.clone(), Incarnation(0), 0),
        message: foca::Message::<MemberId>::Announce,
    };
    postcard::to_allocvec(&Packet::Swim(postcard::to_allocvec(&header).unwrap())).unwrap()
}

fn forged(system: &str, port: u16) -> MemberId {
    MemberId::new(
        NodeAddress {
            system: system.into(),
            host: "127.0.0.1".into(),
            port,
        },
        Incarnation(u64::from(port)),
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_members_and_a_flood_of_joins_are_dropped_counted_and_bounded() {
    // Two members with a small bound on remembered members.
    let first = nodes::node(0).await;
    let second = nodes::node(0).await;
    let seeds = [first.node.address().clone()];
    let mut config: ClusterConfig = nodes::config(&seeds);
    config.max_members = 20;
    let mut a = nodes::join(first, config.clone());
    let b = nodes::join(second, config);
    let b_id = b.id();
    nodes::expect_event(&mut a.events, "b up", |e| {
        *e == MemberEvent::Up(b_id.clone())
    })
    .await;

    let attacker = nodes::node(0).await;
    let target = attacker
        .node
        .lookup::<Endpoint>(a.node.address(), "rally.cluster.membership");

    target.tell(Gossip(b"\x09garbage".to_vec())).unwrap();
    target
        .tell(Gossip(announce(
            &forged("another-cluster", 7),
            a.node.address(),
        )))
        .unwrap();
    eventually(
        "garbage and the forged member counted",
        nodes::T,
        async || {
            let stats = a.cluster.stats();
            stats.malformed >= 1 && stats.forged >= 1
        },
    )
    .await;

    // A flood of join requests from 3000 distinct senders of this cluster. Sent a few at a
    // time: the endpoint drops what its queue cannot take, which is bounded memory too, but
    // this test wants the membership's own bound to be what stops them.
    for port in 10_000..13_000u16 {
        let _ = target
            .send(Gossip(announce(
                &forged(nodes::CLUSTER, port),
                a.node.address(),
            )))
            .await;
        if port % 200 == 0 {
            eventually("the packets handled", nodes::T, async || {
                a.cluster.stats().packets_in > u64::from(port - 10_000)
            })
            .await;
        }
    }
    eventually("the flood dropped as forged", nodes::T, async || {
        a.cluster.stats().forged > 2_900
    })
    .await;
    let members = a.cluster.members();
    assert_eq!(members.len(), 2, "only a and b: {members:#?}");
    assert_eq!(
        a.cluster.stats().full,
        0,
        "none got as far as the member table"
    );

    drop(b);
}
