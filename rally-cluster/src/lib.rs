//! Rally cluster membership: who is in the cluster, who is out, and which side of a partition
//! survives.
//!
//! Nodes that can reach each other ([`RemoteNode`](rally_remote::RemoteNode)) do not yet form a cluster:
//! nobody knows who the members are, who is down, or who may host what. This crate answers the
//! first two questions, so that placement and virtual actors can stand on it:
//!
//! - **Membership** is SWIM gossip built on `foca`, which does no I/O of its own: the
//!   [`Membership`] core takes packets and time in and hands packets, timers and
//!   [`MemberEvent`]s out. Its packets ride Rally's own authenticated connections (no second
//!   port, no second secret).
//! - **A member is an address plus an incarnation** ([`MemberId`]): a process restarted on the
//!   same address is a new member, admitted at once; its previous life is removed, never
//!   confused with it.
//! - **Downing** ([`DowningStrategy`], [`decide`]) is decided by every member over a view that
//!   has been stable for `stable-after`; the losing side of a partition downs itself. The
//!   timing rules are in `docs/cluster-protocol.md`.
//!
//! # Modules
//!
//! - [`Cluster`], [`MemberEvents`]: join, leave, down, the members and their events
//! - [`MemberId`], [`Member`], [`MemberStatus`], [`MemberEvent`]: identities, states, events
//! - [`provider`]: where membership comes from (gossip over Rally's connections, in-memory)
//! - [`Membership`]: the sans-I/O core (SWIM plus states, events and downing)
//! - [`DowningStrategy`], [`decide`]: split-brain resolution as a pure function
//! - [`ClusterConfig`]: every setting with its default and why
//! - [`ClusterSingleton`], [`SingletonProxy`], [`SingletonGate`]: one actor in the cluster, on
//!   the oldest member, handed over with no overlap
//! - [`sim`]: many cores on simulated time and network, reproducible from a seed
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use rally::cluster::sim::MembershipSimulation;
//! use rally::cluster::{ClusterConfig, MemberStatus};
//!
//! // Five members in one process, on simulated time.
//! let mut sim = MembershipSimulation::new(7);
//! let members = sim.add_members(5, &ClusterConfig::default());
//! assert!(sim.run_until(Duration::from_secs(30), |sim| sim.converged()).is_ok());
//! // Cut two off: the three keep the cluster, the two down themselves.
//! sim.partition(&[&members[..3], &members[3..]]);
//! sim.run_for(Duration::from_secs(30));
//! assert_eq!(sim.status_seen_by(&members[0], &members[4]), Some(MemberStatus::Down));
//! assert!(sim.core(&members[4]).unwrap().is_stopped());
//! ```

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

mod cluster;
mod config;
mod downing;
mod figures;
mod member;
mod membership;
pub mod provider;
pub mod sim;
mod singleton;
pub mod virtual_actors;

pub use cluster::{
    Cluster, DownError, JoinError, LeaveError, MemberEvents, ShutdownError, ShutdownPhase, UpError,
};
pub use config::{
    ClusterConfig, ClusterConfigBuilder, ClusterConfigError, DOWNED_EXIT_CODE, WhenDowned,
};
pub use downing::{Decision, DowningStrategy, ViewMember, decide};
pub use member::{KindDeclaration, Member, MemberEvent, MemberId, MemberStatus};
pub use membership::{Membership, MembershipStats, PacketError, Transmit};
pub use singleton::{ClusterSingleton, ProxyError, SingletonChange, SingletonGate, SingletonProxy};
