//! The sans-I/O ownership core: from the member events a member has seen, and the time, where
//! a message for an identity goes and when a holder that went away may be taken over from.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::placement::Placement;
use crate::config::ClusterConfig;
use crate::member::{KindDeclaration, MemberEvent, MemberId, MemberStatus};

/// Where a message for an identity should go, as this member sees the cluster.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use rally::cluster::{ClusterConfig, MemberEvent, MemberId};
/// use rally::cluster::virtual_actors::{Hashed, Ownership, Route};
/// use rally::remote::Incarnation;
///
/// let me = MemberId::new("rally://shop@127.0.0.1:1".parse().unwrap(), Incarnation(1), 1)
///     .with_kinds(["cart"]);
/// let mut ownership = Ownership::new(me.clone(), &ClusterConfig::default(), Duration::ZERO);
/// assert_eq!(ownership.route("cart", "u1", &Hashed), Route::Local);
/// ownership.apply(&MemberEvent::Leaving(me.clone()), Instant::now());
/// assert_eq!(ownership.route("cart", "u1", &Hashed), Route::NoHost);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    /// This member should activate it.
    Local,
    /// Another member should.
    Remote(MemberId),
    /// No serving member hosts the kind.
    NoHost,
}

/// What to do about an identity the state store says another owner holds.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use rally::cluster::{ClusterConfig, MemberEvent, MemberId};
/// use rally::cluster::virtual_actors::{Holder, Ownership};
/// use rally::remote::Incarnation;
///
/// let member = |port: u16| MemberId::new(format!("rally://shop@127.0.0.1:{port}").parse().unwrap(), Incarnation(1), 1);
/// let t0 = Instant::now();
/// let mut ownership = Ownership::new(member(1), &ClusterConfig::default(), Duration::from_secs(5));
/// ownership.apply(&MemberEvent::Up(member(2)), t0);
/// let holder = Ownership::owner_key(&member(2));
/// assert_eq!(ownership.holder(&holder, t0), Holder::Forward(member(2)));
/// ownership.apply(&MemberEvent::Down(member(2)), t0);
/// // One member seen: the membership's margin for one (0.6 s + 2 s) plus 5 s of deactivation.
/// let at = t0 + Duration::from_millis(7_600);
/// assert_eq!(ownership.takeover_after(), Duration::from_millis(7_600));
/// assert_eq!(ownership.holder(&holder, t0), Holder::WaitUntil(at));
/// assert_eq!(ownership.holder(&holder, at), Holder::TakeOver);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// The holder is serving: send the message there.
    Forward(MemberId),
    /// The holder is down (or gone) but may still be running on the losing side of a
    /// partition until this instant: keep the message until then.
    WaitUntil(Instant),
    /// The holder was downed long enough ago that it has stopped: take the identity over.
    TakeOver,
    /// This member itself holds it (an activation of this member is under way).
    Local,
}

/// One member's ownership view: which members host which kinds, who is up, who was downed
/// and when. Fed with [`MemberEvent`]s and the instant they were seen; no I/O, no clock.
///
/// # Example
///
/// See [`Route`] and [`Holder`].
#[derive(Debug, Clone)]
pub struct Ownership {
    local: MemberId,
    membership: ClusterConfig,
    extra: Duration,
    members: BTreeMap<MemberId, Seen>,
    /// When the last member event came.
    changed_at: Option<Instant>,
    /// Holders met that are in no record, with when first met.
    unknown: BTreeMap<String, Instant>,
    stopped: bool,
    /// Every kind some serving member hosts, as this view sees it, rebuilt on each event, so a
    /// route (once per message from a member that does not host the kind) copies nothing.
    kinds: HashMap<String, KindView>,
    /// The instant `kinds` was computed for.
    as_of: Instant,
}

/// A kind as one view sees it.
#[derive(Debug, Clone)]
struct KindView {
    /// What the cluster agrees on: the declaration of the oldest serving member hosting it.
    agreed: KindDeclaration,
    /// The serving members hosting it with that declaration.
    hosts: Vec<MemberId>,
    /// Those hosting it with another: never placed on.
    dissenting: Vec<MemberId>,
}

/// Unknown holders remembered at most (a bound on memory whatever the store holds); past it the
/// oldest are forgotten, which only restarts their wait.
const MAX_UNKNOWN_HOLDERS: usize = 4096;

#[derive(Debug, Clone)]
struct Seen {
    /// The record as last announced (its kinds are what it hosts).
    id: MemberId,
    status: MemberStatus,
    /// When this member first saw it down, leaving or removed: from then on it is taking its
    /// activations down, which it has done by `gone_since + takeover_after`.
    gone_since: Option<Instant>,
}

impl Ownership {
    /// A view for `local`, empty until events arrive. A member seen going down (or leaving)
    /// may have its activations taken over `membership.takeover_margin(n) + extra` later,
    /// where `n` is the number of members this view has seen (the margin grows with the
    /// cluster) and `extra` the time a deactivation may take.
    pub fn new(local: MemberId, membership: &ClusterConfig, extra: Duration) -> Self {
        let mut view = Self {
            local,
            membership: membership.clone(),
            extra,
            members: BTreeMap::new(),
            changed_at: None,
            unknown: BTreeMap::new(),
            stopped: false,
            kinds: HashMap::new(),
            as_of: Instant::now(),
        };
        view.rebuild_hosts(Instant::now());
        view
    }

    /// The member this view belongs to.
    pub fn local(&self) -> &MemberId {
        &self.local
    }

    /// The string an owner is recorded under in the state store: address and incarnation.
    pub fn owner_key(member: &MemberId) -> String {
        member.to_string()
    }

    /// Takes in an event seen at `now`.
    pub fn apply(&mut self, event: &MemberEvent, now: Instant) {
        self.changed_at = Some(now);
        self.record(event, now);
        self.rebuild_hosts(now);
    }

    fn record(&mut self, event: &MemberEvent, now: Instant) {
        let id = event.member();
        let status = match event {
            MemberEvent::Joined(_) => MemberStatus::Joining,
            MemberEvent::Up(_) => MemberStatus::Up,
            MemberEvent::Leaving(_) => MemberStatus::Leaving,
            MemberEvent::Down(_) => MemberStatus::Down,
            MemberEvent::Removed(_) => MemberStatus::Removed,
            // Reachability does not change ownership: an unreachable owner keeps its
            // identities until it is downed (messages to it fail meanwhile).
            MemberEvent::Unreachable(_) | MemberEvent::Reachable(_) => {
                self.members.entry(id.clone()).or_insert_with(|| Seen {
                    id: id.clone(),
                    status: MemberStatus::Joining,
                    gone_since: None,
                });
                return;
            }
        };
        let seen = self.members.entry(id.clone()).or_insert_with(|| Seen {
            id: id.clone(),
            status,
            gone_since: None,
        });
        seen.id = id.clone();
        // A member's life only moves forward: a late `Up` after `Down` changes nothing.
        if rank(status) >= rank(seen.status) {
            seen.status = status;
        }
        if matches!(
            seen.status,
            MemberStatus::Leaving | MemberStatus::Down | MemberStatus::Removed
        ) && seen.gone_since.is_none()
        {
            seen.gone_since = Some(now);
        }
        if *id == self.local && matches!(seen.status, MemberStatus::Down | MemberStatus::Removed) {
            self.stopped = true;
        }
    }

    /// Whether this view has settled at `now`: this member sees itself up, no member it sees
    /// is still joining, and no member event came for `stable-after` (members that start
    /// together see each other within it). A kind no member of a settled view hosts has no
    /// host on its way.
    pub fn is_settled(&self, now: Instant) -> bool {
        let quiet = self
            .changed_at
            .is_some_and(|at| now.saturating_duration_since(at) >= self.membership.stable_after);
        quiet
            && self.is_up()
            && self
                .members
                .values()
                .all(|seen| seen.status != MemberStatus::Joining)
    }

    /// A kind some member of this view hosts whose name is close to `kind` (at most a third
    /// of its letters differ, at least one; case and `-`/`_` aside), the closest first.
    pub fn similar_kind(&self, kind: &str) -> Option<String> {
        let fold = |s: &str| s.to_lowercase().replace(['-', '_'], "");
        let wanted = fold(kind);
        let allowed = (wanted.chars().count() / 3).max(1);
        self.kinds
            .keys()
            .chain(self.local.kinds.keys())
            .filter(|hosted| hosted.as_str() != kind)
            .map(|hosted| (strsim::levenshtein(&fold(hosted), &wanted), hosted))
            .filter(|(distance, _)| *distance <= allowed)
            .min()
            .map(|(_, hosted)| hosted.clone())
    }

    /// Whether this member was downed or removed: it must hold no activation any more.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The members that are up and host `kind` (reachable or not) with the declaration the
    /// cluster agrees on (the oldest such member's: see [`agreed`](Self::agreed)). This member
    /// counts from the start, up or not yet (others send to it only once they see it up), until
    /// it leaves or is downed: a member that has just joined and sees nobody yet still places
    /// on itself, never bouncing a message back to a sender whose view is ahead of its own.
    pub fn hosts(&self, kind: &str) -> Vec<MemberId> {
        self.hosts_of(kind).to_vec()
    }

    fn hosts_of(&self, kind: &str) -> &[MemberId] {
        self.kinds
            .get(kind)
            .map_or(&[], |view| view.hosts.as_slice())
    }

    /// The declaration of `kind` the cluster agrees on: that of the oldest serving member that
    /// hosts it. Members that declare another are refused for the kind.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use rally::cluster::{ClusterConfig, KindDeclaration, MemberEvent, MemberId};
    /// use rally::cluster::virtual_actors::Ownership;
    /// use rally::remote::Incarnation;
    ///
    /// let member = |port: u16, placement: &str| {
    ///     let address = format!("rally://shop@127.0.0.1:{port}").parse().unwrap();
    ///     MemberId::new(address, Incarnation(1), u64::from(port)).with_kind("cart", placement)
    /// };
    /// let (old, young) = (member(1, "hashed"), member(2, "prefer-local"));
    /// let mut view = Ownership::new(young.clone(), &ClusterConfig::default(), Duration::ZERO);
    /// view.apply(&MemberEvent::Up(old.clone()), Instant::now());
    /// view.apply(&MemberEvent::Up(young.clone()), Instant::now());
    /// assert_eq!(view.agreed("cart"), Some(&KindDeclaration::new("hashed")));
    /// assert_eq!(view.hosts("cart"), [old]);
    /// assert_eq!(view.dissenting("cart"), [young]);
    /// ```
    pub fn agreed(&self, kind: &str) -> Option<&KindDeclaration> {
        self.kinds.get(kind).map(|view| &view.agreed)
    }

    /// The serving members that host `kind` with a declaration other than the agreed one.
    pub fn dissenting(&self, kind: &str) -> &[MemberId] {
        self.kinds
            .get(kind)
            .map_or(&[], |view| view.dissenting.as_slice())
    }

    /// How the member at `address` with `incarnation` declared `kind`: `None` if this view
    /// does not know it, `Some(None)` if it does not host the kind.
    pub fn declaration_of(
        &self,
        address: &rally_remote::NodeAddress,
        incarnation: rally_remote::Incarnation,
        kind: &str,
    ) -> Option<Option<&KindDeclaration>> {
        self.members
            .values()
            .find(|seen| seen.id.address == *address && seen.id.incarnation == incarnation)
            .map(|seen| seen.id.declaration(kind))
    }

    /// Whether this member sees itself up.
    pub fn is_up(&self) -> bool {
        self.members
            .get(&self.local)
            .is_some_and(|seen| seen.status == MemberStatus::Up)
    }

    /// Time passed: a member gone for longer than the takeover wait no longer counts towards
    /// the agreed declarations (see [`agreed`](Self::agreed)).
    pub fn refresh(&mut self, now: Instant) {
        self.rebuild_hosts(now);
    }

    /// When a member that went away stops counting towards a kind's agreed declaration, if one
    /// still does: the view should be [refreshed](Self::refresh) then.
    pub fn next_change(&self) -> Option<Instant> {
        let after = self.takeover_after();
        self.members
            .values()
            .filter(|seen| !seen.id.kinds.is_empty())
            .filter_map(|seen| seen.gone_since.map(|since| since + after))
            .filter(|at| *at > self.as_of)
            .min()
    }

    fn rebuild_hosts(&mut self, now: Instant) {
        self.as_of = now;
        let kinds: BTreeSet<String> = self
            .members
            .values()
            .flat_map(|seen| seen.id.kinds.keys())
            .chain(self.local.kinds.keys())
            .cloned()
            .collect();
        self.kinds = kinds
            .into_iter()
            .filter_map(|kind| {
                let view = self.compute_kind(&kind)?;
                Some((kind, view))
            })
            .collect();
    }

    fn compute_kind(&self, kind: &str) -> Option<KindView> {
        let mut serving: Vec<&MemberId> = self
            .members
            .values()
            .filter(|seen| seen.status == MemberStatus::Up && seen.id.hosts_kind(kind))
            .map(|seen| &seen.id)
            .collect();
        let local_serving = self
            .members
            .get(&self.local)
            .is_none_or(|seen| rank(seen.status) <= rank(MemberStatus::Up));
        if local_serving && self.local.hosts_kind(kind) && !serving.contains(&&self.local) {
            serving.push(&self.local);
        }
        // Who decides, oldest first: the members that host the kind and have not been gone for
        // the takeover wait (joining, up, leaving, or down or removed less than that ago: they
        // may still be stopping what they hosted), this member included while it serves.
        let after = self.takeover_after();
        let mut deciding: Vec<&MemberId> = self
            .members
            .values()
            .filter(|seen| {
                seen.id.hosts_kind(kind)
                    && seen
                        .gone_since
                        .is_none_or(|since| self.as_of < since + after)
            })
            .map(|seen| &seen.id)
            .chain(serving.iter().copied())
            .collect();
        deciding.sort();
        deciding.dedup();
        // The cluster's settings are the oldest's, and only the members before the first that
        // declares others host the kind: a member with other settings never hosts beside the
        // others, and no member hosts with settings that another, older member of the deciding
        // ones does not share, so two settings never host at once, even while views differ on
        // which member is gone. A change of settings takes effect once every member with the
        // previous ones has been gone for the takeover wait.
        let agreed = deciding.first()?.declaration(kind)?.clone();
        let agreeing = deciding
            .iter()
            .take_while(|member| {
                member
                    .declaration(kind)
                    .is_some_and(|declared| declared.fingerprint == agreed.fingerprint)
            })
            .count();
        let allowed: Vec<&MemberId> = deciding[..agreeing].to_vec();
        serving.sort();
        let (hosts, dissenting): (Vec<MemberId>, Vec<MemberId>) = serving
            .into_iter()
            .cloned()
            .partition(|member| allowed.contains(&member));
        Some(KindView {
            agreed,
            hosts,
            dissenting,
        })
    }

    /// Where a message for `identity` of `kind` goes.
    pub fn route(&self, kind: &str, identity: &str, placement: &dyn Placement) -> Route {
        self.place(kind, identity, placement, self.hosts_of(kind))
    }

    /// Where a message for `identity` of `kind` goes from a member that no longer hosts
    /// anything (it stopped): never [`Route::Local`].
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use rally::cluster::virtual_actors::{Hashed, Ownership, Route};
    /// use rally::cluster::{ClusterConfig, MemberEvent, MemberId};
    /// use rally::remote::Incarnation;
    ///
    /// let member = |port: u16| {
    ///     let address = format!("rally://shop@127.0.0.1:{port}").parse().unwrap();
    ///     MemberId::new(address, Incarnation(1), u64::from(port)).with_kinds(["cart"])
    /// };
    /// let mut view = Ownership::new(member(1), &ClusterConfig::default(), Duration::ZERO);
    /// assert_eq!(view.route("cart", "c-1", &Hashed), Route::Local);
    /// assert_eq!(view.route_elsewhere("cart", "c-1", &Hashed), Route::NoHost);
    /// view.apply(&MemberEvent::Up(member(2)), Instant::now());
    /// assert_eq!(view.route_elsewhere("cart", "c-1", &Hashed), Route::Remote(member(2)));
    /// ```
    pub fn route_elsewhere(&self, kind: &str, identity: &str, placement: &dyn Placement) -> Route {
        let mut hosts = self.hosts(kind);
        hosts.retain(|host| *host != self.local);
        self.place(kind, identity, placement, &hosts)
    }

    fn place(
        &self,
        kind: &str,
        identity: &str,
        placement: &dyn Placement,
        hosts: &[MemberId],
    ) -> Route {
        match placement.place(kind, identity, hosts, &self.local) {
            None => Route::NoHost,
            Some(owner) if *owner == self.local => Route::Local,
            Some(owner) => Route::Remote(owner.clone()),
        }
    }

    /// What to do about an identity held, in the state store, by `holder` (an
    /// [`owner_key`](Self::owner_key)), at `now`.
    ///
    /// A holder in no record of this view is one of two things: a member that joined a moment
    /// ago (this view will learn of it within a gossip round or two), or a process that died
    /// while nobody watched it, for example in a whole-cluster restart over a durable store.
    /// If another life of the process now runs at the holder's address (this member's own
    /// included), the holder has exited (its port was bound again): take over at once.
    /// Otherwise the holder is treated as a member seen going away when first met: waited for
    /// [`takeover_after`](Self::takeover_after), then taken over, unless it shows up meanwhile
    /// (then the message goes to it).
    pub fn holder(&mut self, holder: &str, now: Instant) -> Holder {
        if holder == Self::owner_key(&self.local) {
            return Holder::Local;
        }
        let Some(seen) = self
            .members
            .values()
            .find(|seen| Self::owner_key(&seen.id) == holder)
        else {
            return self.unknown_holder(holder, now);
        };
        self.unknown.remove(holder);
        match (seen.status, seen.gone_since) {
            (MemberStatus::Down | MemberStatus::Removed, Some(since)) => {
                let at = since + self.takeover_after();
                if now >= at {
                    Holder::TakeOver
                } else {
                    Holder::WaitUntil(at)
                }
            }
            _ => Holder::Forward(seen.id.clone()),
        }
    }

    fn unknown_holder(&mut self, holder: &str, now: Instant) -> Holder {
        let address = holder
            .rsplit_once('#')
            .map_or(holder, |(address, _)| address);
        let rebound = std::iter::once(&self.local)
            .chain(self.members.values().map(|seen| &seen.id))
            .any(|member| member.address.to_string() == address);
        if rebound {
            self.unknown.remove(holder);
            return Holder::TakeOver;
        }
        if self.unknown.len() >= MAX_UNKNOWN_HOLDERS && !self.unknown.contains_key(holder) {
            let oldest = self
                .unknown
                .iter()
                .min_by_key(|(_, since)| **since)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.unknown.remove(&oldest);
            }
        }
        let since = *self.unknown.entry(holder.to_owned()).or_insert(now);
        let at = since + self.takeover_after();
        if now >= at {
            Holder::TakeOver
        } else {
            Holder::WaitUntil(at)
        }
    }

    /// How long after a member is seen going away its activations may be taken over.
    pub fn takeover_after(&self) -> Duration {
        self.membership.takeover_margin(self.members.len().max(1)) + self.extra
    }

    /// The member record of a holder key, if known and serving.
    pub fn member(&self, holder: &str) -> Option<&MemberId> {
        self.members
            .values()
            .find(|seen| Self::owner_key(&seen.id) == holder)
            .map(|seen| &seen.id)
    }
}

/// The order of a member's life.
fn rank(status: MemberStatus) -> u8 {
    match status {
        MemberStatus::Joining => 0,
        MemberStatus::Up => 1,
        MemberStatus::Leaving => 2,
        MemberStatus::Down => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use rally_remote::Incarnation;

    use super::*;
    use crate::virtual_actors::placement::Hashed;

    /// A view whose takeover wait is exactly `wait` (no membership margin).
    fn view(local: MemberId, wait: Duration) -> Ownership {
        let membership = ClusterConfig {
            probe_period: Duration::from_nanos(1),
            down_all_when_unstable: Duration::ZERO,
            ..ClusterConfig::default()
        };
        let mut view = Ownership::new(local, &membership, wait);
        view.membership = membership;
        view
    }

    fn member(port: u16, kinds: &[&str]) -> MemberId {
        MemberId::new(
            format!("rally://c@127.0.0.1:{port}").parse().unwrap(),
            Incarnation(1),
            u64::from(port),
        )
        .with_kinds(kinds.iter().copied())
    }

    #[test]
    fn only_up_members_hosting_the_kind_own() {
        let t = Instant::now();
        let me = member(1, &[]);
        let mut view = view(me.clone(), Duration::from_secs(1));
        view.apply(&MemberEvent::Up(me), t);
        assert_eq!(
            view.route("cart", "x", &Hashed),
            Route::NoHost,
            "client-only"
        );
        view.apply(&MemberEvent::Joined(member(2, &["cart"])), t);
        assert_eq!(view.route("cart", "x", &Hashed), Route::NoHost, "joining");
        view.apply(&MemberEvent::Up(member(2, &["cart"])), t);
        view.apply(&MemberEvent::Up(member(3, &["order"])), t);
        assert_eq!(
            view.route("cart", "x", &Hashed),
            Route::Remote(member(2, &["cart"]))
        );
        view.apply(&MemberEvent::Leaving(member(2, &["cart"])), t);
        assert_eq!(view.route("cart", "x", &Hashed), Route::NoHost, "leaving");
    }

    #[test]
    fn a_downed_holder_is_taken_over_only_after_the_margin_and_never_revived() {
        let t = Instant::now();
        let margin = Duration::from_secs(10);
        let me = member(1, &["k"]);
        let other = member(2, &["k"]);
        let key = Ownership::owner_key(&other);
        let mut view = view(me, margin);
        // Unknown: waited for like a member seen going away now...
        assert_eq!(
            view.holder(&key, t),
            Holder::WaitUntil(t + view.takeover_after())
        );
        // ...and once it shows up, the message goes to it.
        view.apply(&MemberEvent::Up(other.clone()), t);
        assert_eq!(view.holder(&key, t), Holder::Forward(other.clone()));
        view.apply(
            &MemberEvent::Down(other.clone()),
            t + Duration::from_secs(1),
        );
        // A stale Up gossiped late does not bring it back.
        view.apply(&MemberEvent::Up(other.clone()), t + Duration::from_secs(2));
        let at = t + Duration::from_secs(1) + view.takeover_after();
        assert!(view.takeover_after() >= margin);
        assert_eq!(
            view.holder(&key, at - Duration::from_millis(1)),
            Holder::WaitUntil(at)
        );
        // Removal later does not restart the clock.
        view.apply(&MemberEvent::Removed(other), t + Duration::from_secs(5));
        assert_eq!(view.holder(&key, at), Holder::TakeOver);
    }

    #[test]
    fn a_leaving_holder_is_forwarded_to_until_it_is_gone() {
        let t = Instant::now();
        let me = member(1, &["k"]);
        let other = member(2, &["k"]);
        let key = Ownership::owner_key(&other);
        let mut view = view(me, Duration::from_secs(10));
        view.apply(&MemberEvent::Up(other.clone()), t);
        view.apply(&MemberEvent::Leaving(other.clone()), t);
        assert_eq!(view.holder(&key, t), Holder::Forward(other.clone()));
        view.apply(&MemberEvent::Removed(other), t + Duration::from_secs(1));
        // The wait counts from when it announced leaving.
        assert_eq!(
            view.holder(&key, t + Duration::from_secs(1)),
            Holder::WaitUntil(t + view.takeover_after())
        );
    }

    #[test]
    fn this_member_downed_is_stopped() {
        let me = member(1, &["k"]);
        let mut view = view(me.clone(), Duration::from_secs(1));
        view.apply(&MemberEvent::Up(me.clone()), Instant::now());
        assert!(!view.is_stopped());
        view.apply(&MemberEvent::Down(me), Instant::now());
        assert!(view.is_stopped());
    }

    /// A whole cluster restarted over a durable store: the claims of the dead lives are taken
    /// over (they used to fail every message with `HolderUnknown` forever).
    #[test]
    fn a_previous_life_at_a_known_address_is_taken_over_at_once() {
        let t = Instant::now();
        let me = member(1, &["k"]);
        let other = member(2, &["k"]);
        let mut view = view(me, Duration::from_secs(10));
        view.apply(&MemberEvent::Up(other), t);
        for port in [1, 2] {
            let old_life = MemberId::new(
                format!("rally://c@127.0.0.1:{port}").parse().unwrap(),
                Incarnation(99),
                1,
            );
            assert_eq!(
                view.holder(&Ownership::owner_key(&old_life), t),
                Holder::TakeOver,
                "previous life at port {port}"
            );
        }
    }

    #[test]
    fn an_unknown_holder_is_waited_for_from_when_first_met_then_taken_over() {
        let t = Instant::now();
        let mut view = view(member(1, &["k"]), Duration::from_secs(10));
        let stranger = Ownership::owner_key(&member(7, &["k"]));
        let at = t + view.takeover_after();
        assert_eq!(view.holder(&stranger, t), Holder::WaitUntil(at));
        // Met again later: the wait still counts from the first meeting.
        assert_eq!(
            view.holder(&stranger, t + Duration::from_secs(3)),
            Holder::WaitUntil(at)
        );
        assert_eq!(view.holder(&stranger, at), Holder::TakeOver);
    }

    #[test]
    fn unknown_holders_remembered_are_bounded() {
        let t = Instant::now();
        let mut view = view(member(1, &["k"]), Duration::from_secs(10));
        for i in 0..MAX_UNKNOWN_HOLDERS + 100 {
            let _ = view.holder(&format!("rally://c@10.0.0.1:{i}#1"), t);
        }
        assert_eq!(view.unknown.len(), MAX_UNKNOWN_HOLDERS);
    }
}
