//! Which member owns an identity: rendezvous hashing over the members that host its kind, and
//! the strategies built on it.

use std::fmt;
use std::hash::{Hash, Hasher};

use rustc_hash::FxHasher;

use crate::member::MemberId;

/// Where a kind's identities are placed, given the members that host the kind.
///
/// The strategy only proposes where an activation should start; which activation is the one
/// that acts is decided by the state store's claim (see the module docs of
/// [`virtual_actors`](crate::virtual_actors)), so a strategy cannot cause two activations
/// even when members disagree about it.
///
/// # Example
///
/// ```
/// use rally::cluster::MemberId;
/// use rally::cluster::virtual_actors::{Hashed, Placement};
/// use rally::remote::Incarnation;
///
/// let member = |port: u16| {
///     MemberId::new(format!("rally://shop@127.0.0.1:{port}").parse().unwrap(), Incarnation(1), 1)
///         .with_kinds(["cart"])
/// };
/// let hosts = [member(1), member(2), member(3)];
/// assert_eq!(Hashed.name(), "hashed");
/// let owner = Hashed.place("cart", "user-42", &hosts, &hosts[0]).unwrap();
/// // Every member computes the same owner from the same hosts.
/// assert_eq!(Some(owner), Hashed.place("cart", "user-42", &hosts, &hosts[2]));
/// ```
pub trait Placement: Send + Sync + fmt::Debug + 'static {
    /// The strategy's name, as a member declares it for a kind (`ClusterConfig`'s
    /// `placements`); every member that hosts a kind must place it by the same strategy (see
    /// [`fingerprint`]). Keep it stable across releases.
    fn name(&self) -> &str;

    /// The member that should activate `identity` of `kind`, chosen among `hosts` (the
    /// serving members that host the kind, in no particular order), as seen from `local`
    /// (which may be client-only). `None` if `hosts` is empty.
    fn place<'a>(
        &self,
        kind: &str,
        identity: &str,
        hosts: &'a [MemberId],
        local: &MemberId,
    ) -> Option<&'a MemberId>;

    /// The lease `identity`'s activations are held under (see [`Scope`]): by default its
    /// shard, so one claim in the state store serves every identity of the shard that the
    /// member activates while it holds the shard. A strategy whose [`place`](Self::place)
    /// does not put every identity of a shard on one member should lease each identity on
    /// its own ([`Scope::Identity`]); otherwise its members would wait on each other's shard
    /// leases (never both act: the lease decides, whatever the placement says).
    fn scope(&self, kind: &str, identity: &str) -> Scope {
        Scope::Shard(shard_of(kind, identity))
    }

    /// Whether an activation whose identity this strategy now places on another member
    /// should move there after a membership change. `true` for strategies every member
    /// computes alike; `false` where the place depends on who asked first.
    fn moves_on_change(&self) -> bool {
        true
    }
}

/// The number of shards a kind's identities are spread over (see [`shard_of`]).
///
/// Ownership is leased per shard: a member's first activation in a shard claims the shard in
/// the state store, and later activations in it need no write to the store. Four thousand
/// shards keep the hosts' shares within a few percent of each other up to hundreds of hosts,
/// while a member's claims stay a small fraction of its activations (at most one per shard
/// while it keeps activations in the shard).
pub const SHARDS: u32 = 4096;

/// The shard of `identity` of `kind`: the same in every process and every build.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{SHARDS, shard_of};
///
/// let shard = shard_of("cart", "user-42");
/// assert!(shard < SHARDS);
/// assert_eq!(shard, shard_of("cart", "user-42"));
/// ```
pub fn shard_of(kind: &str, identity: &str) -> u32 {
    u32::try_from(key_hash(kind, identity) % u64::from(SHARDS))
        .unwrap_or_else(|_| unreachable!("a remainder of SHARDS fits in u32"))
}

/// What an activation's ownership is leased for: the state store grants a scope to one member
/// at a time, under an epoch, and every activation in the scope acts under that epoch (see
/// [`Placement::scope`]).
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{Hashed, Placement, PreferLocal, Scope, shard_of};
///
/// assert_eq!(Hashed.scope("cart", "u1"), Scope::Shard(shard_of("cart", "u1")));
/// assert_eq!(PreferLocal.scope("cart", "u1"), Scope::Identity);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// One of the kind's [`SHARDS`] shards (see [`shard_of`]).
    Shard(u32),
    /// The identity alone.
    Identity,
}

/// Rendezvous (highest random weight) hashing of the identity's shard: each host scores
/// `(kind, shard, host)`, the highest score owns every identity of the shard. Every member
/// with the same hosts computes the same owner, so a message takes one hop to the member that
/// activates; when a host joins or leaves, only the shards whose highest score changes move
/// (those it wins, or those it held).
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{Hashed, Placement};
/// use rally::cluster::MemberId;
/// use rally::remote::Incarnation;
///
/// let host = MemberId::new("rally://shop@127.0.0.1:1".parse().unwrap(), Incarnation(1), 1);
/// assert_eq!(Hashed.place("cart", "u", std::slice::from_ref(&host), &host), Some(&host));
/// assert_eq!(Hashed.place("cart", "u", &[], &host), None);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Hashed;

impl Placement for Hashed {
    fn name(&self) -> &str {
        "hashed"
    }

    fn place<'a>(
        &self,
        kind: &str,
        identity: &str,
        hosts: &'a [MemberId],
        _local: &MemberId,
    ) -> Option<&'a MemberId> {
        let key = shard_key(kind, shard_of(kind, identity));
        hosts.iter().max_by_key(|host| (score(key, host), *host))
    }
}

/// The sending member itself when it hosts the kind, otherwise [`Hashed`]: for identities
/// used mostly from one member (a session on the member that holds its connection). The
/// first member to activate an identity keeps it until it passivates; messages from other
/// members reach it through the store's record of who holds it (one more hop). Each identity
/// is leased on its own ([`Scope::Identity`]): identities of one shard live on many members.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{Placement, PreferLocal};
/// use rally::cluster::MemberId;
/// use rally::remote::Incarnation;
///
/// let member = |port: u16| {
///     MemberId::new(format!("rally://shop@127.0.0.1:{port}").parse().unwrap(), Incarnation(1), 1)
///         .with_kinds(["session"])
/// };
/// let hosts = [member(1), member(2)];
/// assert_eq!(PreferLocal.place("session", "s-9", &hosts, &hosts[1]), Some(&hosts[1]));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PreferLocal;

impl Placement for PreferLocal {
    fn name(&self) -> &str {
        "prefer-local"
    }

    fn place<'a>(
        &self,
        kind: &str,
        identity: &str,
        hosts: &'a [MemberId],
        local: &MemberId,
    ) -> Option<&'a MemberId> {
        hosts
            .iter()
            .find(|host| *host == local)
            .or_else(|| Hashed.place(kind, identity, hosts, local))
    }

    fn scope(&self, _kind: &str, _identity: &str) -> Scope {
        Scope::Identity
    }

    fn moves_on_change(&self) -> bool {
        false
    }
}

/// The placement strategies a member knows by name: the built-in ones, and any its
/// application registered (`VirtualActorsBuilder::placement`). A member routes a kind it does
/// not host by the strategy its hosts declared, found here.
#[derive(Debug, Clone)]
pub(crate) struct Placements(std::collections::HashMap<String, std::sync::Arc<dyn Placement>>);

impl Default for Placements {
    fn default() -> Self {
        let mut known = Self(std::collections::HashMap::new());
        known.add(std::sync::Arc::new(Hashed));
        known.add(std::sync::Arc::new(PreferLocal));
        known
    }
}

impl Placements {
    /// Knows `placement` by its name (replacing one of the same name).
    pub(crate) fn add(&mut self, placement: std::sync::Arc<dyn Placement>) {
        self.0.insert(placement.name().to_owned(), placement);
    }

    /// The strategy named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<std::sync::Arc<dyn Placement>> {
        self.0.get(name).cloned()
    }
}

/// The version of how identities are placed and leased (the shard count, the hash of an
/// identity, a host's score): part of every [`fingerprint`], so members built with another
/// placement scheme never host a kind beside each other. Bump it with any change to those.
const PLACEMENT_FORMAT: u64 = 1;

/// What members that host a kind must agree on, as one number: the placement strategy's name,
/// the number of shards and the version of the hashing. Members declare it for each kind they
/// host; a member whose fingerprint for a kind differs from the cluster's is refused for that
/// kind (see `docs/cluster.md`).
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{Hashed, Placement, PreferLocal, fingerprint};
///
/// assert_eq!(fingerprint(Hashed.name()), fingerprint("hashed"));
/// assert_ne!(fingerprint(Hashed.name()), fingerprint(PreferLocal.name()));
/// ```
pub fn fingerprint(placement: &str) -> u64 {
    let mut hasher = FxHasher::default();
    placement.hash(&mut hasher);
    SHARDS.hash(&mut hasher);
    PLACEMENT_FORMAT.hash(&mut hasher);
    mix(hasher.finish())
}

/// A hash of the key that is the same in every process and every build: `FxHasher` has no
/// random seed (unlike std's `RandomState`), and its input is fixed below.
fn key_hash(kind: &str, identity: &str) -> u64 {
    let mut hasher = FxHasher::default();
    kind.hash(&mut hasher);
    identity.hash(&mut hasher);
    mix(hasher.finish())
}

/// The key a shard is placed by.
fn shard_key(kind: &str, shard: u32) -> u64 {
    let mut hasher = FxHasher::default();
    kind.hash(&mut hasher);
    shard.hash(&mut hasher);
    mix(hasher.finish())
}

/// A host's score for a key: the key's hash combined with the host's identity (address,
/// incarnation, generation), so a restarted process scores differently from its previous
/// life. Fx mixes weakly; the SplitMix64 finalizer spreads every input bit over the score.
fn score(key: u64, host: &MemberId) -> u64 {
    let mut hasher = FxHasher::default();
    host.address.system.hash(&mut hasher);
    host.address.host.hash(&mut hasher);
    host.address.port.hash(&mut hasher);
    host.incarnation.0.hash(&mut hasher);
    host.generation.hash(&mut hasher);
    mix(key ^ mix(hasher.finish()))
}

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rally_remote::Incarnation;

    use super::*;

    fn host(port: u16) -> MemberId {
        MemberId::new(
            format!("rally://c@127.0.0.1:{port}").parse().unwrap(),
            Incarnation(u64::from(port) * 7),
            u64::from(port),
        )
        .with_kinds(["k"])
    }

    fn owners(hosts: &[MemberId], ids: usize) -> Vec<MemberId> {
        (0..ids)
            .map(|i| {
                Hashed
                    .place("k", &format!("id-{i}"), hosts, &hosts[0])
                    .unwrap()
                    .clone()
            })
            .collect()
    }

    #[test]
    fn the_owner_does_not_depend_on_the_order_of_hosts_or_the_asker() {
        let hosts: Vec<_> = (1..=5).map(host).collect();
        let mut reversed = hosts.clone();
        reversed.reverse();
        for i in 0..200 {
            let id = format!("id-{i}");
            assert_eq!(
                Hashed.place("k", &id, &hosts, &hosts[0]),
                Hashed
                    .place("k", &id, &reversed, &hosts[3])
                    .map(|h| { hosts.iter().find(|x| *x == h).unwrap() })
            );
        }
    }

    #[test]
    fn identities_spread_evenly() {
        let hosts: Vec<_> = (1..=4).map(host).collect();
        let owned = owners(&hosts, 20_000);
        for h in &hosts {
            let n = owned.iter().filter(|o| *o == h).count();
            // 5,000 expected; a fair split stays within a few percent.
            assert!((4_500..=5_500).contains(&n), "{h} owns {n} of 20000");
        }
    }

    #[test]
    fn every_identity_of_a_shard_has_one_owner_and_shards_spread_evenly() {
        let hosts: Vec<_> = (1..=4).map(host).collect();
        let mut owner_of_shard = std::collections::HashMap::new();
        for i in 0..50_000 {
            let id = format!("id-{i}");
            let owner = Hashed.place("k", &id, &hosts, &hosts[0]).unwrap();
            let first = owner_of_shard.entry(shard_of("k", &id)).or_insert(owner);
            assert_eq!(*first, owner, "{id}: its shard has another owner");
        }
        assert_eq!(
            owner_of_shard.len(),
            SHARDS as usize,
            "50,000 identities reach every shard"
        );
        for h in &hosts {
            let n = owner_of_shard.values().filter(|o| **o == h).count();
            // 1,024 expected; a fair split stays within a few percent.
            assert!(
                (950..=1_100).contains(&n),
                "{h} owns {n} of {SHARDS} shards"
            );
        }
    }

    #[test]
    fn a_restart_at_the_same_address_is_another_host() {
        let old = host(1);
        let restarted = MemberId::new(old.address.clone(), Incarnation(999), 999);
        let moved = (0..1000)
            .filter(|i| {
                let key = key_hash("k", &format!("id-{i}"));
                score(key, &old) != score(key, &restarted)
            })
            .count();
        assert_eq!(moved, 1000);
    }

    #[test]
    fn prefer_local_falls_back_to_hashing_on_a_member_that_does_not_host() {
        let hosts: Vec<_> = (1..=3).map(host).collect();
        let client = host(9);
        for i in 0..100 {
            let id = format!("id-{i}");
            assert_eq!(
                PreferLocal.place("k", &id, &hosts, &client),
                Hashed.place("k", &id, &hosts, &client)
            );
        }
    }

    proptest! {
        /// A host joining moves only identities to the new host; a host leaving moves only
        /// the identities it owned. Nothing else changes owner.
        #[test]
        fn a_membership_change_moves_only_what_it_must(
            size in 1usize..8,
            joiner in 100u16..200,
            leaver in 0usize..8,
        ) {
            let hosts: Vec<_> = (1..=size).map(|p| host(u16::try_from(p).unwrap())).collect();
            let before = owners(&hosts, 500);

            let mut joined = hosts.clone();
            joined.push(host(joiner));
            let after_join = owners(&joined, 500);
            for (b, a) in before.iter().zip(&after_join) {
                prop_assert!(a == b || *a == host(joiner));
            }

            if size > 1 {
                let gone = &hosts[leaver % size];
                let left: Vec<_> = hosts.iter().filter(|h| *h != gone).cloned().collect();
                let after_leave = owners(&left, 500);
                for (b, a) in before.iter().zip(&after_leave) {
                    prop_assert!(a == b || b == gone);
                }
            }
        }
    }
}
