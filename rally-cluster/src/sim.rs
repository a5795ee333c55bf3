//! Many members in one process on simulated time and a simulated network, reproducible from
//! a seed.
//!
//! A [`MembershipSimulation`] runs [`Membership`] cores (the same code the gossip provider runs over
//! real connections) against each other. Time is virtual: the simulation jumps from one due
//! instant to the next, so minutes of cluster life take milliseconds. The network delays every
//! packet by a random latency, may drop packets at a given rate, and can be cut into sides
//! ([`partition`](MembershipSimulation::partition)) and healed; members can crash. Every random
//! choice (latencies, drops, each core's probe order) flows from the one seed, so a failing
//! seed replays exactly.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use rally::cluster::sim::MembershipSimulation;
//! use rally::cluster::{ClusterConfig, MemberStatus};
//!
//! let mut sim = MembershipSimulation::new(42);
//! let members = sim.add_members(3, &ClusterConfig::default());
//! assert!(sim.run_until(Duration::from_secs(30), |sim| sim.converged()).is_ok());
//! sim.crash(&members[2]);
//! assert!(sim.run_until(Duration::from_secs(60), |sim| {
//!     sim.status_seen_by(&members[0], &members[2]) == Some(MemberStatus::Down)
//! }).is_ok());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rally_remote::{Incarnation, NodeAddress};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::ClusterConfig;
use crate::member::{MemberEvent, MemberId, MemberStatus};
use crate::membership::Membership;

/// The cluster name of simulated members.
pub const SIM_CLUSTER: &str = "sim";

/// One event as a member saw it, at a simulated instant.
///
/// # Example
///
/// ```
/// use rally::cluster::sim::MembershipSimulation;
/// use rally::cluster::{ClusterConfig, MemberEvent};
///
/// let mut sim = MembershipSimulation::new(1);
/// let founder = sim.add_member(&ClusterConfig::default());
/// let first = &sim.log()[0];
/// assert_eq!(first.observer, founder);
/// assert_eq!(first.event, MemberEvent::Joined(founder.clone()));
/// assert!(first.at.is_zero());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    /// Simulated time since the start.
    pub at: Duration,
    /// The member that saw it.
    pub observer: MemberId,
    /// What it saw.
    pub event: MemberEvent,
}

/// [`MembershipSimulation::run_until`]'s condition did not hold within its limit (of
/// simulated time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the condition did not hold within {0:?} of simulated time")]
pub struct SimTimeout(pub Duration);

/// A simulated cluster. See the [module docs](self).
pub struct MembershipSimulation {
    rng: StdRng,
    start: Instant,
    now: Instant,
    members: BTreeMap<NodeAddress, SimMember>,
    in_flight: BTreeMap<(Instant, u64), (NodeAddress, NodeAddress, Vec<u8>)>,
    seq: u64,
    latency: (Duration, Duration),
    drop_rate: f64,
    side_of: BTreeMap<NodeAddress, usize>,
    log: Vec<LoggedEvent>,
    next_port: u16,
    /// Last delivery instant per (from, to): packets between two members stay in order, as
    /// on Rally's connections.
    last_delivery: BTreeMap<(NodeAddress, NodeAddress), Instant>,
    /// Extra latency of one direction of a link (see [`MembershipSimulation::delay_link`]).
    link_delay: BTreeMap<(NodeAddress, NodeAddress), Duration>,
    /// Steps in a row that did not advance time.
    steps_without_progress: u32,
}

struct SimMember {
    core: Membership,
    alive: bool,
    /// Packets that reached it while paused, handed in when it resumes.
    paused: Option<Vec<Vec<u8>>>,
}

impl SimMember {
    fn runs(&self) -> bool {
        self.alive && self.paused.is_none()
    }
}

impl MembershipSimulation {
    /// An empty simulation; `seed` decides every random choice.
    pub fn new(seed: u64) -> Self {
        let now = Instant::now();
        Self {
            rng: StdRng::seed_from_u64(seed),
            start: now,
            now,
            members: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            seq: 0,
            latency: (Duration::from_micros(200), Duration::from_millis(5)),
            drop_rate: 0.0,
            side_of: BTreeMap::new(),
            log: Vec::new(),
            next_port: 1,
            last_delivery: BTreeMap::new(),
            link_delay: BTreeMap::new(),
            steps_without_progress: 0,
        }
    }

    /// Starts a member with `config`; its seeds, if empty, are every member started before
    /// it (the first founds the cluster).
    pub fn add_member(&mut self, config: &ClusterConfig) -> MemberId {
        let port = self.next_port;
        self.next_port += 1;
        self.add_member_at(port, config)
    }

    /// Starts `n` members with `config` at once (each seeded with the first), and returns them.
    pub fn add_members(&mut self, n: usize, config: &ClusterConfig) -> Vec<MemberId> {
        let first = NodeAddress {
            system: SIM_CLUSTER.into(),
            host: "10.0.0.1".into(),
            port: self.next_port,
        };
        let mut config = config.clone();
        if config.seeds.is_empty() {
            config.seeds = vec![first];
        }
        (0..n).map(|_| self.add_member(&config)).collect()
    }

    /// Starts a member on `port` (a restart if a member ran there before: a new incarnation).
    pub fn add_member_at(&mut self, port: u16, config: &ClusterConfig) -> MemberId {
        let address = NodeAddress {
            system: SIM_CLUSTER.into(),
            host: "10.0.0.1".into(),
            port,
        };
        let mut config = config.clone();
        if config.seeds.is_empty() {
            config.seeds = self.members.keys().cloned().collect();
        }
        let generation = u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        // Roles and kinds travel with the member, as `Cluster::join` gives them.
        let id = MemberId::new(address.clone(), Incarnation(self.rng.random()), generation)
            .declaring(&config);
        let mut core = Membership::new(id.clone(), config, self.rng.random(), self.now)
            .expect("simulation configurations are valid");
        core.join(self.now);
        self.members.insert(
            address,
            SimMember {
                core,
                alive: true,
                paused: None,
            },
        );
        self.collect();
        id
    }

    /// Delays packets by a uniform latency in `[min, max]`.
    pub fn set_latency(&mut self, min: Duration, max: Duration) {
        self.latency = (min, max.max(min));
    }

    /// Drops each packet with probability `rate` (0.0 to 1.0).
    pub fn set_drop_rate(&mut self, rate: f64) {
        self.drop_rate = rate.clamp(0.0, 1.0);
    }

    /// Slows the packets from `from` to `to` by `extra` on top of the network's latency, in
    /// that direction only and still in order, as behind a backed-up connection: other
    /// members' packets can then overtake the ones on this link. `Duration::ZERO` restores it.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::sim::MembershipSimulation;
    /// use rally::cluster::ClusterConfig;
    ///
    /// let mut sim = MembershipSimulation::new(7);
    /// let members = sim.add_members(3, &ClusterConfig::default());
    /// sim.delay_link(&members[0], &members[1], Duration::from_millis(300));
    /// // Indirect probes through the third member keep the slow link's ends reachable.
    /// assert!(sim.run_until(Duration::from_secs(30), |sim| sim.converged()).is_ok());
    /// ```
    pub fn delay_link(&mut self, from: &MemberId, to: &MemberId, extra: Duration) {
        let link = (from.address.clone(), to.address.clone());
        if extra.is_zero() {
            self.link_delay.remove(&link);
        } else {
            self.link_delay.insert(link, extra);
        }
    }

    /// Cuts the network into `sides`: packets cross no border (members in no side form one
    /// more side together). Packets already in flight across a border are lost.
    pub fn partition(&mut self, sides: &[&[MemberId]]) {
        self.side_of.clear();
        for (i, side) in sides.iter().enumerate() {
            for id in *side {
                self.side_of.insert(id.address.clone(), i + 1);
            }
        }
        let side_of = &self.side_of;
        self.in_flight
            .retain(|_, (from, to, _)| side_of.get(from) == side_of.get(to));
    }

    /// Heals every partition.
    pub fn heal(&mut self) {
        self.side_of.clear();
    }

    /// Crashes a member (as SIGKILL does): it sends and receives nothing from now on.
    pub fn crash(&mut self, id: &MemberId) {
        if let Some(member) = self.members.get_mut(&id.address) {
            member.alive = false;
        }
    }

    /// Pauses a member (as SIGSTOP does): its timers do not run and packets sent to it wait,
    /// as in its socket's buffer, until [`resume`](Self::resume).
    pub fn pause(&mut self, id: &MemberId) {
        if let Some(member) = self.members.get_mut(&id.address) {
            member.paused.get_or_insert_with(Vec::new);
        }
    }

    /// Resumes a paused member: it takes in the packets that waited, then runs its overdue
    /// timers.
    pub fn resume(&mut self, id: &MemberId) {
        let now = self.now;
        if let Some(member) = self.members.get_mut(&id.address) {
            for payload in member.paused.take().unwrap_or_default() {
                let _ = member.core.handle_packet(&payload, now);
            }
        }
        self.collect();
    }

    /// Hands `observer` its transport's verdict on `subject`, as the gossip provider does with
    /// the remoting heartbeats' failure detector: `false` suspects it, `true` hears it again.
    pub fn transport_verdict(&mut self, observer: &MemberId, subject: &MemberId, reachable: bool) {
        let now = self.now;
        let peer = rally_remote::UniqueAddress {
            address: subject.address.clone(),
            incarnation: subject.incarnation,
        };
        if let Some(member) = self.members.get_mut(&observer.address) {
            member
                .core
                .handle_transport_reachability(&peer, reachable, now);
        }
        self.collect();
    }

    /// The member at `id`'s address leaves gracefully.
    pub fn leave(&mut self, id: &MemberId) {
        if let Some(member) = self.members.get_mut(&id.address) {
            member.core.leave(self.now);
        }
        self.collect();
    }

    /// The core of the member at `id`'s address.
    pub fn core(&self, id: &MemberId) -> Option<&Membership> {
        self.members.get(&id.address).map(|m| &m.core)
    }

    /// The status of `subject` as `observer` sees it (`None`: unknown to it).
    pub fn status_seen_by(&self, observer: &MemberId, subject: &MemberId) -> Option<MemberStatus> {
        let core = self.core(observer)?;
        core.members()
            .into_iter()
            .find(|m| m.id == *subject)
            .map(|m| m.status)
    }

    /// Whether every live, running member sees every other live, running member as up and
    /// reachable, and nobody else as serving.
    pub fn converged(&self) -> bool {
        let running: BTreeSet<&MemberId> = self
            .members
            .values()
            .filter(|m| m.alive && !m.core.is_stopped())
            .map(|m| &m.core.local().id)
            .collect();
        self.members
            .values()
            .filter(|m| m.alive && !m.core.is_stopped())
            .all(|m| {
                let seen = m.core.members();
                let serving: BTreeSet<&MemberId> = seen
                    .iter()
                    .filter(|x| x.is_serving())
                    .map(|x| &x.id)
                    .collect();
                serving == running
                    && seen
                        .iter()
                        .filter(|x| x.is_serving())
                        .all(|x| x.status == MemberStatus::Up && x.reachable)
            })
    }

    /// Every event every member saw, in order.
    pub fn log(&self) -> &[LoggedEvent] {
        &self.log
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Runs until `done` holds (checked after every step) or `limit` of simulated time has
    /// passed, as `rally::sim::HostSimulation::run_until` does: the simulated time it took.
    ///
    /// # Errors
    ///
    /// [`SimTimeout`] if `done` is still false after `limit`.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<Duration, SimTimeout> {
        let start = self.now;
        let deadline = start + limit;
        loop {
            if done(self) {
                return Ok(self.now - start);
            }
            if !self.step(deadline) {
                return if done(self) {
                    Ok(self.now - start)
                } else {
                    Err(SimTimeout(limit))
                };
            }
        }
    }

    /// Runs for `duration` of simulated time.
    pub fn run_for(&mut self, duration: Duration) {
        let deadline = self.now + duration;
        while self.step(deadline) {}
        self.now = deadline;
    }

    /// Advances to the next due instant (not past `deadline`) and runs what is due there;
    /// `false` when nothing is due before the deadline.
    fn step(&mut self, deadline: Instant) -> bool {
        let next_packet = self.in_flight.keys().next().map(|(at, _)| *at);
        let next_timer = self
            .members
            .values()
            .filter(|m| m.runs())
            .filter_map(|m| m.core.poll_timeout())
            .min();
        let Some(next) = [next_packet, next_timer].into_iter().flatten().min() else {
            return false;
        };
        if next > deadline {
            return false;
        }
        if next <= self.now {
            // A core that keeps asking to be woken at an instant it has already handled
            // would spin a real driver: fail loudly here instead.
            self.steps_without_progress += 1;
            assert!(
                self.steps_without_progress < 10_000,
                "a member asks to be woken at {:?} again and again: busy loop",
                self.elapsed()
            );
        } else {
            self.steps_without_progress = 0;
        }
        self.now = self.now.max(next);
        let now = self.now;
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (from, to, payload) = entry.remove();
            let crosses = self.side_of.get(&from) != self.side_of.get(&to);
            if let Some(member) = self.members.get_mut(&to) {
                if member.alive && !crosses {
                    match &mut member.paused {
                        Some(held) => held.push(payload),
                        None => {
                            let _ = member.core.handle_packet(&payload, now);
                        }
                    }
                }
            }
        }
        for member in self.members.values_mut().filter(|m| m.runs()) {
            if member.core.poll_timeout().is_some_and(|at| at <= now) {
                member.core.handle_timeout(now);
            }
        }
        self.collect();
        true
    }

    /// Moves every core's packets onto the network and its events into the log.
    fn collect(&mut self) {
        let at = self.elapsed();
        for (address, member) in &mut self.members {
            while let Some(event) = member.core.poll_event() {
                self.log.push(LoggedEvent {
                    at,
                    observer: member.core.local().id.clone(),
                    event,
                });
            }
            while let Some(transmit) = member.core.poll_transmit() {
                if !member.alive || self.rng.random_bool(self.drop_rate) {
                    continue;
                }
                let (min, max) = self.latency;
                let link = (address.clone(), transmit.to.clone());
                let latency = min
                    + (max - min).mul_f64(self.rng.random::<f64>())
                    + self.link_delay.get(&link).copied().unwrap_or_default();
                let last = self.last_delivery.entry(link).or_insert(self.now);
                *last = (*last).max(self.now + latency);
                self.seq += 1;
                self.in_flight.insert(
                    (*last, self.seq),
                    (address.clone(), transmit.to, transmit.payload),
                );
            }
        }
    }
}

impl std::fmt::Debug for MembershipSimulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipSimulation")
            .finish_non_exhaustive()
    }
}
