//! Who a member is, what state it is in, and the events that report its changes.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};

use rally_remote::{Incarnation, NodeAddress};
use serde::{Deserialize, Serialize};

/// A member's identity: its address, the incarnation of the process at that address, and the
/// moment that process joined (its generation), with the roles and the hosted virtual-actor
/// kinds it declared when it joined.
///
/// A member that hosts no kind is a *client-only* member: it is in the cluster (it sees the
/// members, it can send to virtual actors) but nothing is placed on it.
///
/// A process that restarts on the same address draws a new incarnation (and has a later
/// generation), so it is a new member: it is admitted at once and never confused with its
/// previous life, which the cluster sees as removed.
///
/// # Example
///
/// ```
/// use rally::cluster::MemberId;
/// use rally::remote::{Incarnation, NodeAddress};
///
/// let address: NodeAddress = "rally://shop@127.0.0.1:2552".parse().unwrap();
/// let first = MemberId::new(address.clone(), Incarnation(7), 1_000);
/// let restarted = MemberId::new(address, Incarnation(3), 2_000);
/// assert_ne!(first, restarted);
/// assert!(restarted.supersedes(&first));
/// assert!(first.is_older_than(&restarted));
///
/// let worker = restarted.with_roles(["worker"]).with_kinds(["cart"]);
/// assert!(worker.has_role("worker"));
/// assert!(worker.hosts_kind("cart") && !worker.is_client_only());
/// assert!(first.is_client_only());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "WireMemberId", into = "WireMemberId")]
pub struct MemberId {
    /// Where the member listens; its system name is the cluster's name.
    pub address: NodeAddress,
    /// Which life of the process at that address (the remote node's incarnation).
    pub incarnation: Incarnation,
    /// When this incarnation joined, in milliseconds since the Unix epoch: orders members by age
    /// (keep-oldest, and later the singleton) and decides which of two incarnations at one
    /// address is the later one.
    pub generation: u64,
    /// What this member is for (for example `"frontend"`, `"worker"`), fixed for its
    /// incarnation. Attributes, not identity: equality and order ignore them.
    pub roles: BTreeSet<String>,
    /// The virtual-actor kinds this member hosts (for example `"cart"`), each with how it
    /// places them, fixed for its incarnation; none makes it a client-only member. Attributes,
    /// not identity.
    pub kinds: BTreeMap<String, KindDeclaration>,
}

/// What a member declares about a virtual-actor kind it hosts: the placement strategy, and the
/// fingerprint of everything placement depends on ([`fingerprint`](crate::virtual_actors::fingerprint)).
/// Members whose declarations of a kind differ never host it beside each other.
///
/// # Example
///
/// ```
/// use rally::cluster::KindDeclaration;
/// use rally::cluster::virtual_actors::fingerprint;
///
/// let hashed = KindDeclaration::new("hashed");
/// assert_eq!(hashed.fingerprint, fingerprint("hashed"));
/// assert_ne!(hashed, KindDeclaration::new("prefer-local"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KindDeclaration {
    /// The placement strategy's name.
    pub placement: String,
    /// The fingerprint of the placement settings.
    pub fingerprint: u64,
}

impl KindDeclaration {
    /// The declaration of a kind placed by the strategy named `placement`, with this build's
    /// fingerprint of it.
    pub fn new(placement: &str) -> Self {
        Self {
            placement: placement.to_owned(),
            fingerprint: crate::virtual_actors::fingerprint(placement),
        }
    }
}

/// The placement a kind is declared with when none is named.
pub(crate) const DEFAULT_PLACEMENT: &str = "hashed";

impl MemberId {
    /// A member identity, with no roles and no hosted kinds (client-only).
    pub fn new(address: NodeAddress, incarnation: Incarnation, generation: u64) -> Self {
        Self {
            address,
            incarnation,
            generation,
            roles: BTreeSet::new(),
            kinds: BTreeMap::new(),
        }
    }

    /// The same identity, hosting the virtual-actor `kinds`, each placed by the default
    /// strategy (hashed).
    pub fn with_kinds(mut self, kinds: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.kinds = kinds
            .into_iter()
            .map(|kind| (kind.into(), KindDeclaration::new(DEFAULT_PLACEMENT)))
            .collect();
        self
    }

    /// The same identity, also hosting `kind`, placed by the strategy named `placement`.
    pub fn with_kind(mut self, kind: impl Into<String>, placement: &str) -> Self {
        self.kinds
            .insert(kind.into(), KindDeclaration::new(placement));
        self
    }

    /// The same identity, with the roles and kinds (and the kinds' placements) `config`
    /// declares: what a member started with that configuration announces.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::{ClusterConfig, MemberId};
    /// use rally::cluster::virtual_actors::PreferLocal;
    /// use rally::remote::Incarnation;
    ///
    /// let config = ClusterConfig::builder().kind("cart").kind_placed("session", &PreferLocal).build().unwrap();
    /// let id = MemberId::new("rally://shop@127.0.0.1:1".parse().unwrap(), Incarnation(1), 1).declaring(&config);
    /// assert_eq!(id.declaration("session").unwrap().placement, "prefer-local");
    /// assert_eq!(id.declaration("cart").unwrap().placement, "hashed");
    /// ```
    pub fn declaring(self, config: &crate::ClusterConfig) -> Self {
        let mut id = self.with_roles(config.roles.iter().cloned());
        id.kinds = config
            .kinds
            .iter()
            .map(|kind| {
                let placement = config
                    .placements
                    .get(kind)
                    .map_or(DEFAULT_PLACEMENT, String::as_str);
                (kind.clone(), KindDeclaration::new(placement))
            })
            .collect();
        id
    }

    /// Whether the member hosts virtual actors of `kind`.
    pub fn hosts_kind(&self, kind: &str) -> bool {
        self.kinds.contains_key(kind)
    }

    /// How the member declared `kind`, if it hosts it.
    pub fn declaration(&self, kind: &str) -> Option<&KindDeclaration> {
        self.kinds.get(kind)
    }

    /// Whether the member hosts no kind at all: nothing is placed on it.
    pub fn is_client_only(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The same identity, declaring `roles`.
    pub fn with_roles(mut self, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// Whether the member declared `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }

    /// Whether `self` is a later incarnation at the same address as `other` (a restart):
    /// the later generation wins, the incarnation breaks a tie.
    pub fn supersedes(&self, other: &Self) -> bool {
        self.address == other.address
            && (self.generation, self.incarnation) > (other.generation, other.incarnation)
    }

    /// Whether `self` joined before `other`. Ties (same millisecond) are broken by address, then
    /// incarnation, so every member orders the same members the same way.
    pub fn is_older_than(&self, other: &Self) -> bool {
        self.age_order(other) == Ordering::Less
    }

    /// The total order by age used by every strategy: oldest first.
    pub(crate) fn age_order(&self, other: &Self) -> Ordering {
        (self.generation, &self.address, self.incarnation).cmp(&(
            other.generation,
            &other.address,
            other.incarnation,
        ))
    }
}

/// Identity is address, incarnation and generation; roles are attributes of it.
impl PartialEq for MemberId {
    fn eq(&self, other: &Self) -> bool {
        (self.generation, &self.address, self.incarnation)
            == (other.generation, &other.address, other.incarnation)
    }
}

impl Eq for MemberId {}

impl Hash for MemberId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.generation, &self.address, self.incarnation).hash(state);
    }
}

/// Oldest first: by generation, then address, then incarnation (the fields of identity, so
/// it agrees with equality).
impl Ord for MemberId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.age_order(other)
    }
}

impl PartialOrd for MemberId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.address, self.incarnation)
    }
}

/// The serialized form of [`MemberId`] (the address types of `rally-remote` carry no serde).
#[derive(Clone, Serialize, Deserialize)]
struct WireMemberId {
    system: String,
    host: String,
    port: u16,
    incarnation: u64,
    generation: u64,
    roles: BTreeSet<String>,
    kinds: BTreeMap<String, KindDeclaration>,
}

impl From<WireMemberId> for MemberId {
    fn from(w: WireMemberId) -> Self {
        Self {
            address: NodeAddress {
                system: w.system,
                host: w.host,
                port: w.port,
            },
            incarnation: Incarnation(w.incarnation),
            generation: w.generation,
            roles: w.roles,
            kinds: w.kinds,
        }
    }
}

impl From<MemberId> for WireMemberId {
    fn from(m: MemberId) -> Self {
        Self {
            system: m.address.system,
            host: m.address.host,
            port: m.address.port,
            incarnation: m.incarnation.0,
            generation: m.generation,
            roles: m.roles,
            kinds: m.kinds,
        }
    }
}

/// Where a member is in its life, as this member sees it.
///
/// `Joining → Up → Leaving → Removed` for a member that leaves gracefully;
/// `Joining | Up | Leaving → Down → Removed` for one that is downed. Reachability is separate
/// (see [`Member::reachable`]): an unreachable member keeps its status until a downing
/// decision (or an operator's [`down`](crate::Cluster::down)) marks it down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MemberStatus {
    /// Known to the cluster, not yet heard from directly by this member.
    Joining,
    /// Heard from directly: it is a working member.
    Up,
    /// Announced that it is leaving; it hands over, then exits.
    Leaving,
    /// Declared down (by a downing decision, by an operator, or by itself on the losing side
    /// of a partition). Final for this incarnation: it never comes back, a restart is a new
    /// member.
    Down,
    /// Gone from the membership (left, or down and forgotten, or replaced by a new
    /// incarnation at its address).
    Removed,
}

/// A member as this member sees it.
///
/// # Example
///
/// ```
/// use rally::cluster::{Member, MemberId, MemberStatus};
/// use rally::remote::Incarnation;
///
/// let id = MemberId::new("rally://shop@127.0.0.1:2552".parse().unwrap(), Incarnation(1), 10);
/// let member = Member::new(id, MemberStatus::Up, true);
/// assert!(member.is_serving());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its identity.
    pub id: MemberId,
    /// Its status.
    pub status: MemberStatus,
    /// Whether the failure detector currently reaches it.
    pub reachable: bool,
}

impl Member {
    /// A member with this status and reachability.
    pub fn new(id: MemberId, status: MemberStatus, reachable: bool) -> Self {
        Self {
            id,
            status,
            reachable,
        }
    }

    /// Whether the member is part of the cluster for placement and downing decisions:
    /// joining, up or leaving (not down, not removed), reachable or not.
    pub fn is_serving(&self) -> bool {
        matches!(
            self.status,
            MemberStatus::Joining | MemberStatus::Up | MemberStatus::Leaving
        )
    }
}

/// A change in the membership, as this member saw it happen.
///
/// Events about one member arrive in the order of its life (joined before up before
/// leaving/down before removed); `Unreachable` and `Reachable` alternate in between.
/// Events about this member itself are delivered too (it is up, it is leaving, it was downed).
///
/// # Example
///
/// ```
/// use rally::cluster::{MemberEvent, MemberId};
/// use rally::remote::Incarnation;
///
/// let id = MemberId::new("rally://shop@127.0.0.1:2552".parse().unwrap(), Incarnation(1), 10);
/// let event = MemberEvent::Down(id.clone());
/// assert_eq!(event.member(), &id);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MemberEvent {
    /// A member became known (status joining).
    Joined(MemberId),
    /// A member was heard from directly (status up).
    Up(MemberId),
    /// The failure detector stopped reaching a member.
    Unreachable(MemberId),
    /// An unreachable member is reached again.
    Reachable(MemberId),
    /// A member announced that it is leaving.
    Leaving(MemberId),
    /// A member was declared down.
    Down(MemberId),
    /// A member is gone from the membership.
    Removed(MemberId),
}

/// Member events are also published on the actor system's event stream
/// ([`rally_actor::EventStream`]) by [`Cluster::join`](crate::Cluster::join): an actor
/// subscribes with `system.event_stream().subscribe(actor.recipient::<MemberEvent>())`.
impl rally_actor::Message for MemberEvent {
    type Reply = ();
}

impl MemberEvent {
    /// The member the event is about.
    pub fn member(&self) -> &MemberId {
        match self {
            Self::Joined(m)
            | Self::Up(m)
            | Self::Unreachable(m)
            | Self::Reachable(m)
            | Self::Leaving(m)
            | Self::Down(m)
            | Self::Removed(m) => m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(port: u16, incarnation: u64, generation: u64) -> MemberId {
        MemberId::new(
            NodeAddress {
                system: "c".into(),
                host: "h".into(),
                port,
            },
            Incarnation(incarnation),
            generation,
        )
    }

    #[test]
    fn a_restart_supersedes_by_generation_then_incarnation() {
        assert!(id(1, 9, 2).supersedes(&id(1, 100, 1)));
        assert!(!id(1, 100, 1).supersedes(&id(1, 9, 2)));
        assert!(id(1, 5, 1).supersedes(&id(1, 4, 1)));
        assert!(!id(2, 9, 9).supersedes(&id(1, 1, 1)), "another address");
        assert!(!id(1, 1, 1).supersedes(&id(1, 1, 1)), "itself");
    }

    #[test]
    fn age_is_a_total_order_oldest_first() {
        assert!(id(9, 0, 1).is_older_than(&id(1, 0, 2)));
        assert!(id(1, 0, 5).is_older_than(&id(2, 0, 5)), "tie: address");
        assert!(!id(1, 0, 5).is_older_than(&id(1, 0, 5)));
    }

    #[test]
    fn ids_round_trip_through_postcard() {
        let original = id(2552, u64::MAX, 1_700_000_000_000)
            .with_roles(["a", "b"])
            .with_kinds(["cart", "order"]);
        let bytes = postcard::to_allocvec(&original).unwrap();
        let back: MemberId = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, original);
        assert_eq!(back.roles, original.roles);
        assert_eq!(back.kinds, original.kinds);
    }

    #[test]
    fn roles_are_attributes_not_identity() {
        let plain = id(1, 1, 1);
        let worker = plain.clone().with_roles(["worker"]);
        assert_eq!(plain, worker);
        assert!(worker.has_role("worker") && !plain.has_role("worker"));
        let set: std::collections::HashSet<MemberId> = [plain, worker].into_iter().collect();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn kinds_are_attributes_and_none_means_client_only() {
        let client = id(1, 1, 1);
        let host = client.clone().with_kinds(["cart"]);
        assert_eq!(client, host);
        assert_eq!(
            host.declaration("cart"),
            Some(&KindDeclaration::new("hashed"))
        );
        let other = client.clone().with_kind("cart", "prefer-local");
        assert_ne!(other.declaration("cart"), host.declaration("cart"));
        assert!(client.is_client_only() && !client.hosts_kind("cart"));
        assert!(!host.is_client_only() && host.hosts_kind("cart") && !host.hosts_kind("order"));
    }
}
