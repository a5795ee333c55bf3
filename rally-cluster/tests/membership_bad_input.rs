//! Bad membership input: forged members and impossible transitions are dropped whole and
//! counted; a flood of join requests from distinct forged senders stops at `max-members`.

use std::time::{Duration, Instant};

use foca::{Header, Message, State};
use rally_cluster::{ClusterConfig, MemberEvent, MemberId, Membership, PacketError};
use rally_remote::{Incarnation, NodeAddress};
use serde::{Deserialize, Serialize};

/// The membership packet as `docs/cluster-protocol.md` describes it.
#[derive(Serialize, Deserialize)]
enum Packet {
    Swim(Vec<u8>),
    Leaving(MemberId),
}

fn address(system: &str, port: u16) -> NodeAddress {
    NodeAddress {
        system: system.into(),
        host: "127.0.0.1".into(),
        port,
    }
}

fn id(port: u16) -> MemberId {
    MemberId::new(
        address("c", port),
        Incarnation(u64::from(port) * 31),
        u64::from(port),
    )
}

/// A SWIM packet from `src` to `dst` carrying `updates`, encoded as foca's postcard codec
/// does: header, update count (u16, big-endian), updates.
fn swim(
    src: &MemberId,
    dst: &MemberId,
    message: Message<MemberId>,
    updates: &[(MemberId, u16, State)],
) -> Vec<u8> {
    let header = Header {
        src: src.clone(),
        src_incarnation: 0,
        dst: dst.clone(),
        message,
    };
    let mut bytes = postcard::to_allocvec(&header).unwrap();
    if !updates.is_empty() {
        bytes.extend_from_slice(&u16::try_from(updates.len()).unwrap().to_be_bytes());
        for (member, incarnation, state) in updates {
            let member = foca::Member::new(member.clone(), *incarnation, *state);
            bytes.extend(postcard::to_allocvec(&member).unwrap());
        }
    }
    postcard::to_allocvec(&Packet::Swim(bytes)).unwrap()
}

/// Members A (port 1) and B (port 2), joined; returns A and B.
fn pair(config: ClusterConfig) -> (Membership, Membership, Instant) {
    let now = Instant::now();
    let mut a = Membership::new(id(1), config.clone(), 1, now).unwrap();
    let mut b_config = config;
    b_config.seeds = vec![id(1).address];
    let mut b = Membership::new(id(2), b_config, 2, now).unwrap();
    a.join(now);
    b.join(now);
    for _ in 0..4 {
        while let Some(t) = a.poll_transmit() {
            b.handle_packet(&t.payload, now).unwrap();
        }
        while let Some(t) = b.poll_transmit() {
            a.handle_packet(&t.payload, now).unwrap();
        }
    }
    assert_eq!(a.members().len(), 2);
    while a.poll_event().is_some() {}
    (a, b, now)
}

#[test]
fn a_member_of_another_cluster_is_dropped_and_counted() {
    let (mut a, _b, now) = pair(ClusterConfig::default());
    let foreign = MemberId::new(address("other", 9), Incarnation(9), 9);
    let dropped = a.handle_packet(&swim(&foreign, &id(1), Message::Announce, &[]), now);
    assert!(
        matches!(dropped, Err(PacketError::Forged(ref why)) if why.contains("another cluster")),
        "{dropped:?}"
    );
    assert_eq!(a.stats().forged, 1);
    assert_eq!(a.members().len(), 2);
    assert_eq!(a.poll_event(), None);
}

#[test]
fn a_forged_member_in_an_honest_members_gossip_drops_the_whole_packet() {
    let (mut a, _b, now) = pair(ClusterConfig::default());
    // B, known, gossips a new member 3 (which would be admitted) and a member on port 0.
    let impossible = MemberId::new(address("c", 0), Incarnation(5), 5);
    let packet = swim(
        &id(2),
        &id(1),
        Message::Gossip,
        &[(id(3), 0, State::Alive), (impossible, 0, State::Alive)],
    );
    let dropped = a.handle_packet(&packet, now);
    assert!(
        matches!(dropped, Err(PacketError::Forged(_))),
        "{dropped:?}"
    );
    assert_eq!(a.stats().forged, 1);
    assert!(
        a.members().iter().all(|m| m.id != id(3)),
        "nothing of the packet applied"
    );
    // The same gossip without the forged member is applied.
    a.handle_packet(
        &swim(&id(2), &id(1), Message::Gossip, &[(id(3), 0, State::Alive)]),
        now,
    )
    .unwrap();
    assert_eq!(a.poll_event(), Some(MemberEvent::Joined(id(3))));
}

#[test]
fn a_sender_claiming_this_members_address_is_forged() {
    let (mut a, _b, now) = pair(ClusterConfig::default());
    let impostor = MemberId::new(address("c", 1), Incarnation(77), 1_000_000);
    let dropped = a.handle_packet(&swim(&impostor, &id(1), Message::Announce, &[]), now);
    assert!(
        matches!(dropped, Err(PacketError::Forged(_))),
        "{dropped:?}"
    );
    assert_eq!(a.stats().forged, 1);
    assert_eq!(a.local().id, id(1));
}

#[test]
fn this_member_alive_at_an_incarnation_it_never_announced_is_impossible() {
    let (mut a, _b, now) = pair(ClusterConfig::default());
    let packet = swim(
        &id(2),
        &id(1),
        Message::Gossip,
        &[(id(1), 40, State::Alive)],
    );
    let dropped = a.handle_packet(&packet, now);
    assert!(
        matches!(dropped, Err(PacketError::ImpossibleTransition(_))),
        "{dropped:?}"
    );
    assert_eq!(a.stats().impossible, 1);
}

#[test]
fn leaving_for_a_member_that_is_not_serving_is_impossible() {
    let (mut a, _b, now) = pair(ClusterConfig::default());
    let stranger = postcard::to_allocvec(&Packet::Leaving(id(9))).unwrap();
    assert!(matches!(
        a.handle_packet(&stranger, now),
        Err(PacketError::ImpossibleTransition(_))
    ));
    // A downed member cannot be leaving either (down -> leaving).
    a.down(&id(2), now);
    assert_eq!(a.poll_event(), Some(MemberEvent::Down(id(2))));
    let downed = postcard::to_allocvec(&Packet::Leaving(id(2))).unwrap();
    assert!(matches!(
        a.handle_packet(&downed, now),
        Err(PacketError::ImpossibleTransition(_))
    ));
    assert_eq!(a.stats().impossible, 2);
    assert_eq!(a.poll_event(), None);
}

#[test]
fn garbage_is_malformed_and_counted() {
    let (mut a, _b, now) = pair(ClusterConfig::default());
    for junk in [&b""[..], b"\x00", b"\x00\x05abc", b"\x07\x07\x07"] {
        assert!(matches!(
            a.handle_packet(junk, now),
            Err(PacketError::Malformed(_))
        ));
    }
    assert_eq!(a.stats().malformed, 4);
    assert_eq!(a.members().len(), 2);
}

#[test]
fn a_flood_of_join_requests_stops_at_max_members() {
    let config = ClusterConfig::builder().max_members(50).build().unwrap();
    let (mut a, _b, mut now) = pair(config);
    let placeholder = MemberId::new(address("c", 1), Incarnation(0), 0);
    for port in 1_000..6_000u16 {
        let sender = MemberId::new(address("c", port), Incarnation(u64::from(port)), 7);
        let _ = a.handle_packet(&swim(&sender, &placeholder, Message::Announce, &[]), now);
        while a.poll_transmit().is_some() {}
        while a.poll_event().is_some() {}
        if port % 100 == 0 {
            now += Duration::from_millis(100);
            a.handle_timeout(now);
        }
    }
    let members = a.members().len();
    assert!(members <= 51, "{members} members remembered");
    assert!(a.stats().full >= 4_900, "{:?}", a.stats());
}

proptest::proptest! {
    /// Arbitrary bytes, and arbitrary bytes behind a valid packet tag, never panic the core,
    /// are counted when dropped, and never add a member.
    #[test]
    fn arbitrary_packets_are_dropped_or_harmless(
        raw in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        swim_tagged in proptest::bool::ANY,
    ) {
        let (mut a, _b, now) = pair(ClusterConfig::default());
        let payload = if swim_tagged {
            postcard::to_allocvec(&Packet::Swim(raw)).unwrap()
        } else {
            raw
        };
        let before = a.stats();
        let result = a.handle_packet(&payload, now);
        let after = a.stats();
        let dropped = (after.malformed + after.forged + after.impossible + after.full)
            - (before.malformed + before.forged + before.impossible + before.full);
        proptest::prop_assert_eq!(dropped, u64::from(result.is_err()));
        proptest::prop_assert!(a.members().len() <= 2);
    }
}
