//! The membership core: SWIM (foca) plus Rally's member states, events and downing, with no
//! I/O and no clock.
//!
//! [`Membership`] is driven from outside: packets in ([`handle_packet`]), time in
//! ([`handle_timeout`]), and it hands back packets to send ([`poll_transmit`]), the next
//! instant it needs to be woken ([`poll_timeout`]) and member events ([`poll_event`]). The
//! gossip provider runs it over Rally's connections; the simulation ([`crate::sim`]) runs many
//! of them over a seeded simulated network, deterministically.
//!
//! [`handle_packet`]: Membership::handle_packet
//! [`handle_timeout`]: Membership::handle_timeout
//! [`poll_transmit`]: Membership::poll_transmit
//! [`poll_timeout`]: Membership::poll_timeout
//! [`poll_event`]: Membership::poll_event

mod guard;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::num::{NonZeroU8, NonZeroUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use foca::{
    AccumulatingRuntime, Foca, NoCustomBroadcast, OwnedNotification, PeriodicParams, State, Timer,
};
use rally_remote::{Incarnation, NodeAddress, UniqueAddress};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::config::{ClusterConfig, ClusterConfigError};
use crate::downing::{Decision, ViewMember, decide};
use crate::member::{Member, MemberEvent, MemberId, MemberStatus};
use guard::{CodecError, FocaId, Guard, GuardedCodec, Reject};
use rally_actor::sync::Mutex;

/// Foca's own suspect-to-down timer is a last resort only: downing is Rally's decision, taken
/// after `stable-after` on both sides of a partition. Letting SWIM down a suspect on its own
/// would let both sides of a split down each other and both carry on.
const SUSPECT_TO_DOWN_LAST_RESORT: Duration = Duration::from_secs(24 * 60 * 60);
/// How often a member asks one random member for members it may not know: a slow safety net
/// behind the joins and the gossip, so a member missed by both is still found.
const ANNOUNCE_PERIOD: Duration = Duration::from_secs(10);

/// One packet to send: membership bytes for the member at `to`.
///
/// # Example
///
/// ```
/// use std::time::Instant;
/// use rally::cluster::{ClusterConfig, Membership, MemberId};
/// use rally::remote::Incarnation;
///
/// let me = MemberId::new("rally://c@127.0.0.1:2".parse().unwrap(), Incarnation(2), 2);
/// let mut config = ClusterConfig::default();
/// config.seeds = vec!["rally://c@127.0.0.1:1".parse().unwrap()];
/// let mut core = Membership::new(me, config, 1, Instant::now()).unwrap();
/// core.join(Instant::now());
/// let join = core.poll_transmit().unwrap();
/// assert_eq!(join.to.port, 1);
/// assert!(!join.payload.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub to: NodeAddress,
    /// The packet, opaque to the transport.
    pub payload: Vec<u8>,
}

/// Why a membership packet was dropped. Every drop is also counted in [`MembershipStats`].
///
/// # Example
///
/// ```
/// use std::time::Instant;
/// use rally::cluster::{ClusterConfig, Membership, MemberId, PacketError};
/// use rally::remote::Incarnation;
///
/// let me = MemberId::new("rally://c@127.0.0.1:1".parse().unwrap(), Incarnation(1), 1);
/// let mut core = Membership::new(me, ClusterConfig::default(), 7, Instant::now()).unwrap();
/// let dropped = core.handle_packet(b"\xff\xff junk", Instant::now());
/// assert!(matches!(dropped, Err(PacketError::Malformed(_))));
/// assert_eq!(core.stats().malformed, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// Not a membership packet of this version.
    #[error("malformed membership packet: {0}")]
    Malformed(String),
    /// It names a member that cannot exist (another cluster's, an impossible address, this
    /// running member under another incarnation or as its sender).
    #[error("{0}")]
    Forged(String),
    /// It reports a transition no honest member can report.
    #[error("{0}")]
    ImpossibleTransition(String),
    /// It would add members past `max-members`.
    #[error("{0}")]
    Full(String),
}

/// Figures of one membership core.
///
/// # Example
///
/// ```
/// use std::time::Instant;
/// use rally::cluster::{ClusterConfig, Membership, MemberId};
/// use rally::remote::Incarnation;
///
/// let me = MemberId::new("rally://c@127.0.0.1:1".parse().unwrap(), Incarnation(1), 1);
/// let mut core = Membership::new(me, ClusterConfig::default(), 1, Instant::now()).unwrap();
/// let _ = core.handle_packet(b"junk", Instant::now());
/// let stats = core.stats();
/// assert_eq!((stats.packets_in, stats.bytes_in, stats.malformed), (1, 4, 1));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MembershipStats {
    /// Packets handed in.
    pub packets_in: u64,
    /// Packets handed out.
    pub packets_out: u64,
    /// Bytes of the packets handed in (membership payload, before the transport's framing).
    pub bytes_in: u64,
    /// Bytes of the packets handed out (membership payload, before the transport's framing).
    pub bytes_out: u64,
    /// Dropped: undecodable.
    pub malformed: u64,
    /// Dropped: forged member.
    pub forged: u64,
    /// Dropped: impossible transition.
    pub impossible: u64,
    /// Dropped: member table full.
    pub full: u64,
    /// Downing decisions taken (of any kind).
    pub decisions: u64,
}

/// This member's view of the cluster, sans-I/O: packets in
/// ([`handle_packet`](Self::handle_packet)), time in ([`handle_timeout`](Self::handle_timeout)),
/// packets out ([`poll_transmit`](Self::poll_transmit)), the next wake-up
/// ([`poll_timeout`](Self::poll_timeout)) and member events ([`poll_event`](Self::poll_event)).
///
/// # Example
///
/// Two members, wired by hand:
///
/// ```
/// use std::time::Instant;
/// use rally::cluster::{ClusterConfig, Membership, MemberEvent, MemberId};
/// use rally::remote::Incarnation;
///
/// let id = |port: u16| MemberId::new(format!("rally://c@127.0.0.1:{port}").parse().unwrap(), Incarnation(port.into()), 1);
/// let now = Instant::now();
/// let mut a = Membership::new(id(1), ClusterConfig::default(), 1, now).unwrap();
/// let mut config = ClusterConfig::default();
/// config.seeds = vec![id(1).address];
/// let mut b = Membership::new(id(2), config, 2, now).unwrap();
/// a.join(now);
/// b.join(now);
/// for _ in 0..4 {
///     while let Some(t) = a.poll_transmit() { b.handle_packet(&t.payload, now).unwrap(); }
///     while let Some(t) = b.poll_transmit() { a.handle_packet(&t.payload, now).unwrap(); }
/// }
/// assert_eq!(a.members().len(), 2);
/// assert!(std::iter::from_fn(|| b.poll_event()).any(|e| e == MemberEvent::Up(id(1))));
/// // Every byte one sent, the other received.
/// assert!(a.stats().bytes_out > 0);
/// assert_eq!(a.stats().bytes_out, b.stats().bytes_in);
/// ```
pub struct Membership {
    foca: Foca<FocaId, GuardedCodec, StdRng, NoCustomBroadcast>,
    runtime: AccumulatingRuntime<FocaId>,
    guard: Arc<Mutex<Guard>>,
    timers: BTreeMap<(Instant, u64), Timer<FocaId>>,
    timer_seq: u64,
    config: ClusterConfig,
    local: Member,
    members: HashMap<MemberId, Member>,
    next_join: Option<Instant>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<MemberEvent>,
    stability: Stability,
    stats: MembershipStats,
    stopped: bool,
    /// Lives seen down or removed. A life never comes back (a restart is a new incarnation),
    /// so one that shows up again after foca forgot it (`remove-down-after`), as a process
    /// paused for longer does, is declared down again instead of admitted.
    buried: Buried,
    /// Members the transport's own failure detector (the remoting heartbeats' phi-accrual)
    /// suspects; unreachable in this view whatever SWIM says.
    transport_unreachable: HashSet<UniqueAddress>,
    /// This member's graceful leave, while it waits for the members to acknowledge it.
    departure: Option<Departure>,
}

/// A graceful leave between its `Leaving` notice and its SWIM down. The down is gossiped
/// onwards by every member that hears it, so it could overtake the notice on its way to a
/// member (packets from different members travel on different connections), and that member
/// would report a down. So the down is sent only once every member has acknowledged that it
/// holds this one as leaving: each then reports it removed.
#[derive(Debug)]
struct Departure {
    /// Members whose acknowledgement of the notice has not come yet.
    awaiting: HashSet<MemberId>,
    /// When the notice goes again to the members in `awaiting` (a packet may be lost).
    resend_at: Instant,
    /// When the leave goes on without the acknowledgements still missing: a member that has
    /// not answered within `stable-after` cannot hear this one, and would be deciding about it
    /// as about any unreachable member by then.
    give_up_at: Instant,
}

/// The most recent lives seen down or removed, at most `max-members` of them.
#[derive(Debug)]
struct Buried {
    set: HashSet<MemberId>,
    order: VecDeque<MemberId>,
    capacity: usize,
}

impl Buried {
    fn new(capacity: usize) -> Self {
        Self {
            set: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    fn insert(&mut self, id: MemberId) {
        if self.set.insert(id.clone()) {
            self.order.push_back(id);
            while self.order.len() > self.capacity {
                if let Some(oldest) = self.order.pop_front() {
                    self.set.remove(&oldest);
                }
            }
        }
    }

    fn contains(&self, id: &MemberId) -> bool {
        self.set.contains(id)
    }
}

/// A membership packet on the wire (postcard). SWIM bytes are foca's; `Leaving` is Rally's
/// notice that precedes a graceful exit, so the others report *removed*, not *down*;
/// `LeavingSeen` is a member's acknowledgement of it, which the leaver waits for before it
/// declares itself down.
#[derive(Debug, Serialize, Deserialize)]
enum Packet {
    Swim(Vec<u8>),
    Leaving(MemberId),
    LeavingSeen { leaver: MemberId, by: MemberId },
}

/// When the view last changed, and since when members have been unreachable.
#[derive(Debug)]
struct Stability {
    fingerprint: Vec<(MemberId, bool)>,
    changed_at: Instant,
    unreachable_since: Option<Instant>,
    decided: bool,
}

impl Membership {
    /// A member that is not yet part of any cluster; [`join`](Self::join) starts it.
    ///
    /// `local.address.system` is the cluster's name: packets naming members of another
    /// cluster are dropped. `seed` seeds the protocol's random choices (probe order, gossip
    /// targets), so a run is reproducible.
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError`] if the configuration is out of range.
    pub fn new(
        local: MemberId,
        config: ClusterConfig,
        seed: u64,
        now: Instant,
    ) -> Result<Self, ClusterConfigError> {
        config.validate()?;
        let guard = Arc::new(Mutex::new(Guard::new(local.clone(), config.max_members)));
        let foca = Foca::new(
            FocaId(local.clone()),
            foca_config(&config),
            StdRng::seed_from_u64(seed),
            GuardedCodec::new(guard.clone()),
        );
        let mut events = VecDeque::new();
        events.push_back(MemberEvent::Joined(local.clone()));
        let config_max_members = config.max_members;
        Ok(Self {
            foca,
            runtime: AccumulatingRuntime::new(),
            guard,
            timers: BTreeMap::new(),
            timer_seq: 0,
            config,
            local: Member::new(local, MemberStatus::Joining, true),
            members: HashMap::new(),
            next_join: None,
            transmits: VecDeque::new(),
            events,
            stability: Stability {
                fingerprint: Vec::new(),
                changed_at: now,
                unreachable_since: None,
                decided: false,
            },
            stats: MembershipStats::default(),
            stopped: false,
            buried: Buried::new(config_max_members),
            transport_unreachable: HashSet::new(),
            departure: None,
        })
    }

    /// Joins through the configured seeds, re-sending every `join-retry` until a member
    /// answers. With no seed but itself, this member founds the cluster and is up at once.
    pub fn join(&mut self, now: Instant) {
        if self.stopped || self.local.status != MemberStatus::Joining {
            return;
        }
        if self.seeds().next().is_none() {
            self.local.status = MemberStatus::Up;
            self.events
                .push_back(MemberEvent::Up(self.local.id.clone()));
            return;
        }
        self.announce_to_seeds(now);
    }

    /// Handles one packet from another member.
    ///
    /// # Errors
    ///
    /// [`PacketError`] when the packet is dropped (it is counted in [`stats`](Self::stats));
    /// nothing of a dropped packet is applied.
    pub fn handle_packet(&mut self, payload: &[u8], now: Instant) -> Result<(), PacketError> {
        self.handle_packet_from(payload, None, now)
    }

    /// Like [`handle_packet`](Self::handle_packet), for a packet that came over a connection
    /// whose handshake authenticated `from`: a packet whose sender (or whose leaving member)
    /// is another node is dropped and counted as forged, so a holder of the cluster secret
    /// cannot speak for members it is not.
    ///
    /// # Errors
    ///
    /// As [`handle_packet`](Self::handle_packet).
    pub fn handle_packet_from(
        &mut self,
        payload: &[u8],
        from: Option<&rally_remote::UniqueAddress>,
        now: Instant,
    ) -> Result<(), PacketError> {
        self.guard.lock().authenticated = from.map(|f| (f.address.clone(), f.incarnation));
        let result = self.handle_unchecked(payload, from, now);
        self.guard.lock().authenticated = None;
        result
    }

    fn handle_unchecked(
        &mut self,
        payload: &[u8],
        from: Option<&rally_remote::UniqueAddress>,
        now: Instant,
    ) -> Result<(), PacketError> {
        if self.stopped {
            return Ok(());
        }
        self.stats.packets_in += 1;
        self.stats.bytes_in += payload.len() as u64;
        let packet: Packet = match postcard::from_bytes(payload) {
            Ok(packet) => packet,
            Err(e) => return Err(self.count(PacketError::Malformed(e.to_string()))),
        };
        match packet {
            Packet::Swim(data) => {
                let result = self.foca.handle_data(&data, &mut self.runtime);
                let sender = self.guard.lock().sender.take();
                let result = result.map_err(|e| self.classify(e));
                self.after_interaction(now);
                result?;
                if let Some(member) = sender.and_then(|s| self.members.get_mut(&s)) {
                    if member.status == MemberStatus::Joining {
                        member.status = MemberStatus::Up;
                        self.events.push_back(MemberEvent::Up(member.id.clone()));
                    }
                }
                Ok(())
            }
            Packet::Leaving(id) => {
                if let Some(from) = from
                    && (from.address != id.address || from.incarnation != id.incarnation)
                {
                    return Err(self.count(PacketError::Forged(format!(
                        "{id} leaving, sent by {}",
                        from.address
                    ))));
                }
                self.handle_leaving(id, now)
            }
            Packet::LeavingSeen { leaver, by } => {
                if let Some(from) = from
                    && unique(&by) != *from
                {
                    return Err(self.count(PacketError::Forged(format!(
                        "{by} saw a leave, sent by {}",
                        from.address
                    ))));
                }
                self.handle_leaving_seen(&leaver, &by, now)
            }
        }
    }

    /// Runs what is due at `now`: the protocol's timers, join retries, downing decisions.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        let mut due = Vec::new();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        // Foca asks for late timers to be handled in its own order (an indirect probe before
        // the next probe), which its `Ord` gives; the sort is stable for equal kinds.
        due.sort();
        for timer in due {
            if let Err(e) = self.foca.handle_timer(timer, &mut self.runtime) {
                tracing::debug!(error = %e, "membership timer");
            }
            self.drain_runtime(now);
        }
        if self.next_join.is_some_and(|at| at <= now) {
            self.announce_to_seeds(now);
        }
        self.after_interaction(now);
        self.check_downing(now);
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let timer = self.timers.keys().next().map(|(at, _)| *at);
        let may_decide = matches!(self.local.status, MemberStatus::Up | MemberStatus::Leaving);
        let downing = self
            .stability
            .unreachable_since
            .filter(|_| may_decide)
            .map(|since| {
                let unstable = self.unstable_due(since);
                if self.stability.decided {
                    unstable
                } else {
                    self.decision_due(since).min(unstable)
                }
            });
        let departure = self
            .departure
            .as_ref()
            .map(|d| d.resend_at.min(d.give_up_at));
        [timer, self.next_join, downing, departure]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let transmit = self.transmits.pop_front()?;
        self.stats.packets_out += 1;
        self.stats.bytes_out += transmit.payload.len() as u64;
        Some(transmit)
    }

    /// The next member event.
    pub fn poll_event(&mut self) -> Option<MemberEvent> {
        self.events.pop_front()
    }

    /// Leaves gracefully: tells every member it is leaving, waits until each has
    /// acknowledged it (re-sending the notice every `probe-period` to those that have not,
    /// for `stable-after` at most), then tells the cluster it is gone (SWIM's down) and
    /// stops. A member that holds this one as leaving reports its down as *removed*; waiting
    /// for the acknowledgements keeps the down, which the others gossip onwards, from
    /// reaching a member before the notice does.
    ///
    /// Keep driving the core (packets, timeouts, [`poll_transmit`](Self::poll_transmit))
    /// until [`is_stopped`](Self::is_stopped).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Instant;
    /// use rally::cluster::{ClusterConfig, Membership, MemberEvent, MemberId};
    /// use rally::remote::Incarnation;
    ///
    /// let id = |port: u16| MemberId::new(format!("rally://c@127.0.0.1:{port}").parse().unwrap(), Incarnation(port.into()), port.into());
    /// let now = Instant::now();
    /// let mut a = Membership::new(id(1), ClusterConfig::default(), 1, now).unwrap();
    /// let mut config = ClusterConfig::default();
    /// config.seeds = vec![id(1).address];
    /// let mut b = Membership::new(id(2), config, 2, now).unwrap();
    /// a.join(now);
    /// b.join(now);
    /// for _ in 0..4 {
    ///     while let Some(t) = a.poll_transmit() { b.handle_packet(&t.payload, now).unwrap(); }
    ///     while let Some(t) = b.poll_transmit() { a.handle_packet(&t.payload, now).unwrap(); }
    /// }
    /// b.leave(now);
    /// let notice = b.poll_transmit().unwrap();
    /// assert!(b.poll_transmit().is_none(), "no down before the notice is acknowledged");
    /// a.handle_packet(&notice.payload, now).unwrap();
    /// let seen = a.poll_transmit().unwrap();
    /// b.handle_packet(&seen.payload, now).unwrap();
    /// assert!(b.is_stopped());
    /// // b's down, and a reports b removed.
    /// while let Some(t) = b.poll_transmit() { a.handle_packet(&t.payload, now).unwrap(); }
    /// let about_b: Vec<_> = std::iter::from_fn(|| a.poll_event()).filter(|e| *e.member() == id(2)).collect();
    /// assert_eq!(about_b[about_b.len() - 2..], [MemberEvent::Leaving(id(2)), MemberEvent::Removed(id(2))]);
    /// ```
    pub fn leave(&mut self, now: Instant) {
        if self.stopped || self.departure.is_some() {
            return;
        }
        self.local.status = MemberStatus::Leaving;
        self.next_join = None;
        self.events
            .push_back(MemberEvent::Leaving(self.local.id.clone()));
        let awaiting = self
            .members
            .values()
            .filter(|m| m.is_serving())
            .map(|m| m.id.clone())
            .collect();
        self.departure = Some(Departure {
            awaiting,
            resend_at: now + self.config.probe_period,
            give_up_at: now + self.config.stable_after,
        });
        self.send_leaving_notices();
        self.check_departure(now);
    }

    /// Declares `member` down (an operator's decision, or a downing decision). Downing this
    /// member itself stops it.
    pub fn down(&mut self, member: &MemberId, now: Instant) {
        if self.stopped {
            return;
        }
        if *member == self.local.id {
            self.down_self();
            return;
        }
        let Some(incarnation) = self
            .foca
            .iter_membership_state()
            .find(|m| m.id().0 == *member)
            .map(foca::Member::incarnation)
        else {
            return;
        };
        let update = foca::Member::new(FocaId(member.clone()), incarnation, State::Down);
        if let Err(e) = self
            .foca
            .apply_many(std::iter::once(update), true, &mut self.runtime)
        {
            tracing::debug!(error = %e, "downing a member");
        }
        self.after_interaction(now);
    }

    /// Takes in the transport's own verdict on a peer: the remoting heartbeats' phi-accrual
    /// detector suspects it (`reachable: false`) or hears it again (`true`). A member is
    /// reachable in this view only while both SWIM's probes and the transport's heartbeats
    /// say so, so the two detectors give one reachability view (a connection whose heartbeats
    /// stop while indirect probes still get through counts as unreachable). A peer that is no
    /// member of this view is ignored.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Instant;
    /// use rally::cluster::{ClusterConfig, Membership, MemberId};
    /// use rally::remote::{Incarnation, UniqueAddress};
    ///
    /// let id = MemberId::new("rally://c@127.0.0.1:1".parse().unwrap(), Incarnation(1), 1);
    /// let mut core = Membership::new(id, ClusterConfig::default(), 1, Instant::now()).unwrap();
    /// let stranger = UniqueAddress {
    ///     address: "rally://c@127.0.0.1:9".parse().unwrap(),
    ///     incarnation: Incarnation(9),
    /// };
    /// core.handle_transport_reachability(&stranger, false, Instant::now());
    /// assert!(core.members().iter().all(|m| m.reachable), "not a member: ignored");
    /// ```
    pub fn handle_transport_reachability(
        &mut self,
        peer: &UniqueAddress,
        reachable: bool,
        now: Instant,
    ) {
        if self.stopped {
            return;
        }
        let changed = if reachable {
            self.transport_unreachable.remove(peer)
        } else {
            let known = self.members.keys().any(|id| unique(id) == *peer);
            known && self.transport_unreachable.insert(peer.clone())
        };
        if changed {
            self.after_interaction(now);
        }
    }

    /// This member.
    pub fn local(&self) -> &Member {
        &self.local
    }

    /// Every member this member knows (itself included) that is not removed, oldest first.
    pub fn members(&self) -> Vec<Member> {
        let mut all: Vec<Member> = self.members.values().cloned().collect();
        if self.local.status != MemberStatus::Removed {
            all.push(self.local.clone());
        }
        all.sort_by(|a, b| a.id.age_order(&b.id));
        all
    }

    /// Whether the core has stopped (left, or downed): it ignores input from now on.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// This core's counters.
    pub fn stats(&self) -> MembershipStats {
        self.stats
    }

    fn seeds(&self) -> impl Iterator<Item = &NodeAddress> {
        let own = &self.local.id.address;
        self.config.seeds.iter().filter(move |s| *s != own)
    }

    fn announce_to_seeds(&mut self, now: Instant) {
        let seeds: Vec<NodeAddress> = self.seeds().cloned().collect();
        for seed in seeds {
            // A seed's incarnation is not known yet: foca accepts a join addressed to any
            // incarnation at the receiver's address.
            let placeholder = FocaId(MemberId::new(seed, Incarnation(0), 0));
            if let Err(e) = self.foca.announce(placeholder, &mut self.runtime) {
                tracing::debug!(error = %e, "join");
            }
        }
        self.next_join = Some(now + self.config.join_retry);
        self.drain_runtime(now);
    }

    fn handle_leaving(&mut self, id: MemberId, now: Instant) -> Result<(), PacketError> {
        if id.address == self.local.id.address {
            return Err(self.count(PacketError::Forged(format!(
                "forged member {id}: a leaving notice for this member's address"
            ))));
        }
        match self.members.get_mut(&id) {
            Some(member) if member.is_serving() => {
                if member.status != MemberStatus::Leaving {
                    member.status = MemberStatus::Leaving;
                    self.events.push_back(MemberEvent::Leaving(id.clone()));
                }
                // Acknowledged once held as leaving, so the leaver's down that follows can
                // only be reported here as removed. A repeated notice is acknowledged again
                // (the first acknowledgement may have been lost).
                let seen = Packet::LeavingSeen {
                    leaver: id.clone(),
                    by: self.local.id.clone(),
                };
                self.transmits.push_back(Transmit {
                    to: id.address,
                    payload: postcard::to_allocvec(&seen).expect("member ids always encode"),
                });
                self.after_interaction(now);
                Ok(())
            }
            _ => Err(self.count(PacketError::ImpossibleTransition(format!(
                "impossible transition of {id}: leaving, but not a serving member"
            )))),
        }
    }

    fn handle_leaving_seen(
        &mut self,
        leaver: &MemberId,
        by: &MemberId,
        now: Instant,
    ) -> Result<(), PacketError> {
        if *leaver != self.local.id {
            // For an earlier life at this address (its leave was acknowledged late): stale.
            return Ok(());
        }
        let Some(departure) = &mut self.departure else {
            return Err(self.count(PacketError::ImpossibleTransition(format!(
                "impossible transition of {leaver}: its leave seen by {by}, but it never left"
            ))));
        };
        departure.awaiting.remove(by);
        self.check_departure(now);
        Ok(())
    }

    /// Sends the `Leaving` notice to every member whose acknowledgement is awaited.
    fn send_leaving_notices(&mut self) {
        let Some(departure) = &self.departure else {
            return;
        };
        let notice = postcard::to_allocvec(&Packet::Leaving(self.local.id.clone()))
            .expect("a member id always encodes");
        let mut to: Vec<&MemberId> = departure.awaiting.iter().collect();
        // In age order, so that a simulation replays from its seed.
        to.sort_by(|a, b| a.age_order(b));
        for member in to {
            self.transmits.push_back(Transmit {
                to: member.address.clone(),
                payload: notice.clone(),
            });
        }
    }

    /// Moves a graceful leave on: done once every member acknowledged it (or is no longer
    /// serving here: downed, removed) or the wait is over; the notice again when it is due.
    fn check_departure(&mut self, now: Instant) {
        let Some(departure) = &mut self.departure else {
            return;
        };
        let members = &self.members;
        departure
            .awaiting
            .retain(|id| members.get(id).is_some_and(Member::is_serving));
        if departure.awaiting.is_empty() || now >= departure.give_up_at {
            self.finish_leave(now);
        } else if now >= departure.resend_at {
            departure.resend_at = now + self.config.probe_period;
            self.send_leaving_notices();
        }
    }

    /// Tells the cluster this member is gone (SWIM's down, which foca gossips to a few
    /// members that pass it on) and stops.
    fn finish_leave(&mut self, now: Instant) {
        if let Some(departure) = self.departure.take()
            && !departure.awaiting.is_empty()
        {
            tracing::info!(member = %self.local.id, missing = departure.awaiting.len(), "leaving without every member's acknowledgement");
        }
        let id = self.local.id.clone();
        // Before foca's own down, which it reports as `Defunct`: the exit, not a downing.
        self.local.status = MemberStatus::Removed;
        if let Err(e) = self.foca.leave_cluster(&mut self.runtime) {
            tracing::debug!(error = %e, "leaving the membership");
        }
        self.drain_runtime(now);
        self.events.push_back(MemberEvent::Removed(id));
        self.stop();
    }

    fn classify(&mut self, error: foca::Error) -> PacketError {
        let dropped = match error {
            foca::Error::Decode(inner) => match inner.downcast_ref::<CodecError>() {
                Some(CodecError::Rejected(reject @ Reject::Forged { .. })) => {
                    PacketError::Forged(reject.to_string())
                }
                Some(CodecError::Rejected(reject @ Reject::Impossible { .. })) => {
                    PacketError::ImpossibleTransition(reject.to_string())
                }
                Some(CodecError::Rejected(reject @ Reject::Full(_))) => {
                    PacketError::Full(reject.to_string())
                }
                _ => PacketError::Malformed(inner.to_string()),
            },
            foca::Error::DataFromOurselves | foca::Error::IndirectForOurselves => {
                PacketError::Forged(error.to_string())
            }
            other => PacketError::Malformed(other.to_string()),
        };
        self.count(dropped)
    }

    fn count(&mut self, error: PacketError) -> PacketError {
        match &error {
            PacketError::Malformed(_) => self.stats.malformed += 1,
            PacketError::Forged(_) => self.stats.forged += 1,
            PacketError::ImpossibleTransition(_) => self.stats.impossible += 1,
            PacketError::Full(_) => self.stats.full += 1,
        }
        tracing::debug!(%error, "membership packet dropped");
        error
    }

    /// Takes what foca produced: notifications, timers, packets.
    fn drain_runtime(&mut self, now: Instant) {
        while let Some(notification) = self.runtime.to_notify() {
            match notification {
                OwnedNotification::Active if self.local.status == MemberStatus::Joining => {
                    self.local.status = MemberStatus::Up;
                    self.next_join = None;
                    self.events
                        .push_back(MemberEvent::Up(self.local.id.clone()));
                }
                // A leave ends with foca declaring itself down: that is the exit, not a
                // downing. Downed by the others while waiting for the leave's
                // acknowledgements, it still completes the leave when the wait ends.
                OwnedNotification::Defunct
                    if !matches!(
                        self.local.status,
                        MemberStatus::Leaving | MemberStatus::Removed
                    ) =>
                {
                    self.down_self();
                }
                _ => {}
            }
        }
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.timer_seq += 1;
            self.timers.insert((now + after, self.timer_seq), timer);
        }
        while let Some((to, data)) = self.runtime.to_send() {
            let payload = postcard::to_allocvec(&Packet::Swim(data.to_vec()))
                .expect("a byte string always encodes");
            self.transmits.push_back(Transmit {
                to: to.0.address,
                payload,
            });
        }
    }

    /// Brings Rally's view in line with foca's table, emitting the events of the differences.
    fn after_interaction(&mut self, now: Instant) {
        self.drain_runtime(now);
        if self.stopped {
            return;
        }
        let table: Vec<(MemberId, State)> = self
            .foca
            .iter_membership_state()
            .map(|m| (m.id().0.clone(), m.state()))
            .collect();
        // The gate counts every member foca holds, down ones included, against the bound.
        self.guard.lock().refresh(table.iter().map(|(id, _)| id));
        let present: HashSet<&MemberId> = table.iter().map(|(id, _)| id).collect();
        // Gone from foca's table: forgotten after `remove-down-after`, or replaced by a later
        // incarnation at the same address. Reported first, so a restart reads "removed" then
        // "joined".
        let mut gone: Vec<MemberId> = self
            .members
            .keys()
            .filter(|id| !present.contains(id))
            .cloned()
            .collect();
        gone.sort_by(|a, b| a.age_order(b));
        for id in gone {
            self.members.remove(&id);
            self.transport_unreachable.remove(&unique(&id));
            self.buried.insert(id.clone());
            self.events.push_back(MemberEvent::Removed(id));
        }
        let mut returned = Vec::new();
        for (id, state) in table {
            let Some(member) = self.members.get_mut(&id) else {
                if state != State::Down && self.buried.contains(&id) {
                    returned.push(id);
                } else if state != State::Down {
                    let reachable =
                        state == State::Alive && !self.transport_unreachable.contains(&unique(&id));
                    self.members.insert(
                        id.clone(),
                        Member::new(id.clone(), MemberStatus::Joining, reachable),
                    );
                    self.events.push_back(MemberEvent::Joined(id.clone()));
                    if !reachable {
                        self.events.push_back(MemberEvent::Unreachable(id));
                    }
                }
                continue;
            };
            if !member.is_serving() {
                continue;
            }
            let transport_ok = !self.transport_unreachable.contains(&unique(&id));
            match state {
                State::Alive | State::Suspect => {
                    let reachable = state == State::Alive && transport_ok;
                    if reachable != member.reachable {
                        member.reachable = reachable;
                        self.events.push_back(if reachable {
                            MemberEvent::Reachable(id)
                        } else {
                            MemberEvent::Unreachable(id)
                        });
                    }
                }
                State::Down if member.status == MemberStatus::Leaving => {
                    self.members.remove(&id);
                    self.buried.insert(id.clone());
                    self.events.push_back(MemberEvent::Removed(id));
                }
                State::Down => {
                    member.status = MemberStatus::Down;
                    self.buried.insert(id.clone());
                    self.events.push_back(MemberEvent::Down(id));
                }
            }
        }
        self.bury_again(returned, now);
        self.update_stability(now);
        self.check_departure(now);
    }

    /// Declares down again, to foca and through it to everyone, lives that came back after
    /// foca forgot them; each is counted as an impossible transition. The returned member
    /// learns it is down from the next member it talks to (`notify_down_members`) and stops.
    fn bury_again(&mut self, returned: Vec<MemberId>, now: Instant) {
        if returned.is_empty() {
            return;
        }
        for id in &returned {
            tracing::warn!(member = %id, "a member seen down or removed came back; declared down again");
            self.stats.impossible += 1;
        }
        let updates: Vec<_> = self
            .foca
            .iter_membership_state()
            .filter(|m| returned.contains(&m.id().0))
            .map(|m| foca::Member::new(m.id().clone(), m.incarnation(), State::Down))
            .collect();
        if let Err(e) = self
            .foca
            .apply_many(updates.into_iter(), true, &mut self.runtime)
        {
            tracing::debug!(error = %e, "declaring a returned member down");
        }
        self.drain_runtime(now);
    }

    /// The members a downing decision is taken over: every serving member, this one included.
    fn view(&self) -> Vec<ViewMember> {
        let mut view: Vec<ViewMember> = self
            .members
            .values()
            .filter(|m| m.is_serving())
            .map(|m| ViewMember {
                id: m.id.clone(),
                reachable: m.reachable,
            })
            .collect();
        view.push(ViewMember {
            id: self.local.id.clone(),
            reachable: true,
        });
        view.sort_by(|a, b| a.id.age_order(&b.id));
        view
    }

    fn update_stability(&mut self, now: Instant) {
        let fingerprint: Vec<(MemberId, bool)> = self
            .view()
            .into_iter()
            .map(|m| (m.id, m.reachable))
            .collect();
        let any_unreachable = fingerprint.iter().any(|(_, reachable)| !reachable);
        if fingerprint != self.stability.fingerprint {
            self.stability.fingerprint = fingerprint;
            self.stability.changed_at = now;
            self.stability.decided = false;
        }
        if any_unreachable {
            self.stability.unreachable_since.get_or_insert(now);
        } else {
            self.stability.unreachable_since = None;
        }
    }

    /// When a decision may be taken: the view unchanged for `stable-after`, and members
    /// unreachable for at least the detection bound, so that every member this one cannot
    /// reach is seen as unreachable. A decision on a partial view (some of the other side
    /// still looking reachable) could let a losing side down part of the winning side and
    /// survive.
    fn decision_due(&self, unreachable_since: Instant) -> Instant {
        let stable = self.stability.changed_at + self.config.stable_after;
        let complete = unreachable_since
            + self
                .config
                .detection_bound(self.stability.fingerprint.len());
        stable.max(complete)
    }

    /// When members unreachable since `unreachable_since` without a decision make this member
    /// down itself: `down-all-when-unstable` after the earliest a decision could have come.
    fn unstable_due(&self, unreachable_since: Instant) -> Instant {
        let earliest = self.config.stable_after.max(
            self.config
                .detection_bound(self.stability.fingerprint.len()),
        );
        unreachable_since + earliest + self.config.down_all_when_unstable
    }

    fn check_downing(&mut self, now: Instant) {
        if self.stopped || !matches!(self.local.status, MemberStatus::Up | MemberStatus::Leaving) {
            return;
        }
        let Some(since) = self.stability.unreachable_since else {
            return;
        };
        let decision = if !self.stability.decided && now >= self.decision_due(since) {
            self.stability.decided = true;
            decide(&self.config.downing, &self.view())
        } else if now >= self.unstable_due(since) {
            tracing::warn!(member = %self.local.id, "the view never settled: downing itself");
            Decision::DownAll
        } else {
            return;
        };
        self.stats.decisions += 1;
        tracing::info!(member = %self.local.id, ?decision, "downing decision");
        match decision {
            Decision::DownUnreachable(ids) => {
                for id in ids {
                    self.down(&id, now);
                }
            }
            Decision::DownSelf | Decision::DownAll => self.down_self(),
            Decision::Nothing => {}
        }
    }

    /// This member is down: it says so and goes silent. It does not broadcast its own down:
    /// on the losing side of a partition that would only reset the stability clock of the
    /// members beside it, which are reaching the same decision on their own.
    fn down_self(&mut self) {
        if self.stopped {
            return;
        }
        self.local.status = MemberStatus::Down;
        self.events
            .push_back(MemberEvent::Down(self.local.id.clone()));
        self.stop();
    }

    fn stop(&mut self) {
        self.stopped = true;
        self.departure = None;
        self.timers.clear();
        self.next_join = None;
        self.stability.unreachable_since = None;
    }
}

/// The transport's name for a member's life.
fn unique(id: &MemberId) -> UniqueAddress {
    UniqueAddress {
        address: id.address.clone(),
        incarnation: id.incarnation,
    }
}

fn foca_config(config: &ClusterConfig) -> foca::Config {
    let nonzero = |n: usize| NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
    let mut foca = foca::Config::simple();
    foca.probe_period = config.probe_period;
    foca.probe_rtt = config.probe_rtt;
    foca.num_indirect_probes = nonzero(config.indirect_probes);
    foca.max_transmissions = NonZeroU8::new(config.max_transmissions).unwrap_or(NonZeroU8::MIN);
    foca.suspect_to_down_after =
        SUSPECT_TO_DOWN_LAST_RESORT.max((config.stable_after + config.down_all_when_unstable) * 4);
    foca.remove_down_after = config.remove_down_after;
    foca.max_packet_size = nonzero(config.max_packet_bytes);
    // A member that was downed while paused or cut off learns it from the first member it
    // talks to, and stops hosting.
    foca.notify_down_members = true;
    foca.periodic_announce = Some(PeriodicParams {
        frequency: ANNOUNCE_PERIOD,
        num_members: NonZeroUsize::MIN,
    });
    foca.periodic_announce_to_down_members = None;
    foca.periodic_gossip = Some(PeriodicParams {
        frequency: config.gossip_period,
        num_members: nonzero(config.gossip_fanout),
    });
    foca
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership").finish_non_exhaustive()
    }
}
