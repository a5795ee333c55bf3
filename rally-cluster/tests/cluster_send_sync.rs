//! The public types can cross threads and tasks.

use rally_cluster::provider::{GossipProvider, MemoryNetwork, MemoryProvider, ViewPublisher};
use rally_cluster::{
    Cluster, ClusterConfig, Decision, DowningStrategy, Member, MemberEvent, MemberEvents, MemberId,
    Membership, MembershipStats, PacketError, Transmit,
};

fn send<T: Send>() {}
fn send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<Cluster>();
    send::<MemberEvents>();
    send::<Membership>();
    send::<GossipProvider>();
    send::<MemoryProvider>();
    send_sync::<MemoryNetwork>();
    send_sync::<ViewPublisher>();
    send_sync::<(
        MemberId,
        Member,
        MemberEvent,
        MembershipStats,
        PacketError,
        Transmit,
    )>();
    send_sync::<(ClusterConfig, DowningStrategy, Decision)>();
}
