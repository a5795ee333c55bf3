//! A deterministic cluster around the core, in quinn's `Pair` shape: members that are only
//! [`KindCore`]s, driven on a simulated clock by one event queue, with simulated lives (a
//! bank-account grain whose every deposit is saved before it replies), a simulated network
//! that keeps order per pair of members, and a synchronous state store that can fail and
//! be slow. Everything random comes from one seed, so a failing schedule replays exactly.
//!
//! What happened is logged ([`History`]) and checked against the promises
//! ([`History::check`]): no deposit applied twice by Rally's own re-sending, every
//! acknowledged deposit in the final state, no save accepted from a life older than one that
//! has loaded, and every answer a caller got true about whether the deposit was handled.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rally_remote::Incarnation;
use rally_state::{Claim, Epoch, StoreError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{CallMeta, Effect, KindCore, LifeId, OpId, StoreAnswer, StoreRequest, Types};
use crate::config::ClusterConfig;
use crate::member::{MemberEvent, MemberId};
use crate::virtual_actors::config::VirtualActorsConfig;
use crate::virtual_actors::outcome::Refusal;
use crate::virtual_actors::ownership::Ownership;
use crate::virtual_actors::placement::Placements;

/// The kind every simulated member hosts.
pub(super) const KIND: &str = "account";

/// The harness's calls and lives.
pub(super) struct Sim;

impl Types for Sim {
    type Call = TestCall;
    type Actor = LifeRef;
}

/// A deposit (ask or tell) on its way.
#[derive(Debug, Clone)]
pub(super) struct TestCall {
    pub(super) id: u64,
    pub(super) deadline: Option<Instant>,
    pub(super) hops: u8,
    pub(super) handed_over: bool,
    /// Its reply cannot travel back (too large for a frame, say): the owner answers
    /// "handled, reply lost".
    pub(super) big_reply: bool,
    /// The members it passed through before the one holding it, the caller's first.
    pub(super) path: Vec<usize>,
    /// Whether the caller's member still holds it (as the driver's calls say): an ask whose
    /// deadline passes while it is still held there was not handled, and is dropped.
    pub(super) held: Rc<Cell<Held>>,
}

/// Where a call is, as its caller's member knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// Still in the caller's member (waiting for a host, a life, a retry).
    Here,
    /// Handed to a life or sent to another member.
    Left,
    /// Its caller gave up while it was held: dropped wherever it turns up.
    Abandoned,
}

impl CallMeta for TestCall {
    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
    fn hops(&self) -> u8 {
        self.hops
    }
    fn set_hops(&mut self, hops: u8) {
        self.hops = hops;
    }
    fn handed_over(&self) -> bool {
        self.handed_over
    }
}

/// A simulated life's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LifeRef {
    member: usize,
    life: LifeId,
}

/// The fence of a life: (epoch, life), as the store orders them.
pub(super) type Fence = (Epoch, u64);

/// An identity's floor: the scope it was raised in, and the fence.
type Floor = (Arc<str>, Fence);

/// What a caller heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Heard {
    /// Handled: applied and saved.
    Ok,
    /// Handled, but the handler failed (its save was refused) or the reply was lost.
    HandledError(String),
    /// Refused before any life saw it.
    NotHandled(Refusal),
    /// The link broke after the call left, or no answer before the deadline.
    Unknown(String),
}

/// One thing that happened, with its simulated time. Some fields are only read through `Debug`,
/// in the history a failing schedule prints.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub(super) enum Logged {
    Sent {
        id: u64,
        identity: Arc<str>,
        from: usize,
        ask: bool,
    },
    Heard {
        id: u64,
        heard: Heard,
    },
    /// A life's handler ran for deposit `id`.
    Applied {
        id: u64,
        member: usize,
        fence: Fence,
    },
    Loaded {
        identity: Arc<str>,
        member: usize,
        /// The lease's scope: fences are ordered within one scope only.
        scope: Arc<str>,
        fence: Fence,
    },
    Saved {
        identity: Arc<str>,
        member: usize,
        fence: Fence,
        accepted: bool,
        state: Vec<u64>,
    },
    LifeStarted {
        identity: Arc<str>,
        member: usize,
        fence: Fence,
    },
    LifeEnded {
        identity: Arc<str>,
        member: usize,
        fence: Fence,
    },
    /// Deposit `id` reached `member` after that member had handed its identity over (the new
    /// owner acknowledged the handover) and before it started a life for it again: passed on
    /// late, it may be applied after deposits sent later (the documented exception to the
    /// order per sender).
    PassedOnLate {
        id: u64,
        member: usize,
    },
    /// Something the schedule did (a kill, a pause, a leave, a join, an outage).
    Did(String),
}

/// Everything logged, in order.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) log: Vec<(Duration, Logged)>,
}

/// The knobs of a schedule.
#[derive(Debug, Clone)]
pub(super) struct Knobs {
    /// Probability a life's `stopped` hook overruns the deactivation timeout.
    pub(super) hook_overrun: f64,
    /// Probability a deposit's reply cannot travel back.
    pub(super) big_reply: f64,
    /// Probability an activation hook fails.
    pub(super) hook_fails: f64,
    /// Probability a handler is slow (50–800 ms instead of under 3 ms).
    pub(super) slow_calls: f64,
    /// Store latency, at most.
    pub(super) store_latency: Duration,
    /// Network latency, at most.
    pub(super) net_latency: Duration,
    pub(super) config: VirtualActorsConfig,
}

impl Default for Knobs {
    fn default() -> Self {
        let config = VirtualActorsConfig {
            idle_timeout: Duration::from_millis(400),
            deactivation_timeout: Duration::from_millis(300),
            max_active: 6,
            max_concurrent_moves: 2,
            ..VirtualActorsConfig::default()
        };
        Self {
            hook_overrun: 0.1,
            big_reply: 0.03,
            hook_fails: 0.02,
            slow_calls: 0.05,
            store_latency: Duration::from_millis(4),
            net_latency: Duration::from_millis(3),
            config,
        }
    }
}

#[derive(Debug)]
enum Event {
    /// Time for member `m`'s timers.
    Timeout(usize),
    /// A member event reaches `m`.
    View(usize, MemberEvent),
    /// A call reaches `to` from `from`.
    Request {
        to: usize,
        from: usize,
        identity: Arc<str>,
        call: TestCall,
    },
    /// A refusal reaches `to` (the member that sent the call to `from`).
    Refused {
        to: usize,
        from: usize,
        identity: Arc<str>,
        call: TestCall,
        refusal: Refusal,
    },
    /// An answer travels back along the call's path.
    Answer {
        to: usize,
        call: TestCall,
        heard: Heard,
    },
    HandoverDone {
        to: usize,
        from: usize,
        identity: Arc<str>,
        round: u64,
    },
    HandoverAck {
        to: usize,
        identity: Arc<str>,
        round: u64,
    },
    StoreAnswer {
        to: usize,
        op: OpId,
        answer: StoreAnswer,
    },
    Activated {
        member: usize,
        identity: Arc<str>,
        life: LifeId,
    },
    Handled {
        member: usize,
        life: LifeId,
        call: TestCall,
    },
    HookDone {
        member: usize,
        life: LifeId,
    },
    /// A caller's deadline: unknown if nothing was heard by then.
    Deadline {
        id: u64,
    },
}

impl Event {
    /// The member that processes the event (deferred while it is paused), if any.
    fn member(&self) -> Option<usize> {
        match self {
            Self::Timeout(m) | Self::View(m, _) => Some(*m),
            Self::Request { to, .. }
            | Self::Refused { to, .. }
            | Self::Answer { to, .. }
            | Self::HandoverDone { to, .. }
            | Self::HandoverAck { to, .. }
            | Self::StoreAnswer { to, .. } => Some(*to),
            Self::Activated { member, .. }
            | Self::Handled { member, .. }
            | Self::HookDone { member, .. } => Some(*member),
            Self::Deadline { .. } => None,
        }
    }
}

/// A simulated life.
struct LifeSim {
    identity: Arc<str>,
    scope: Arc<str>,
    fence: Fence,
    state: Vec<u64>,
    busy: bool,
    stopping: bool,
    hook_started: bool,
    ended: bool,
}

/// What a member is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Running,
    /// Frozen until the instant (SIGSTOP).
    Paused(Instant),
    /// Killed (SIGKILL), or left and drained.
    Gone,
}

struct Member {
    id: MemberId,
    core: KindCore<Sim>,
    status: Status,
    /// When it was killed or left (its in-flight calls are lost from then on).
    gone_at: Option<Instant>,
    lives: HashMap<LifeId, LifeSim>,
    /// Its timer as the event queue holds it.
    timer: Option<Instant>,
    /// Leaving: gone once drained and no answer of a call it passed on for another member
    /// has still to come back through it (as the driver counts them).
    leaving: bool,
    relays: usize,
    /// Announced down to the others (killed, or paused past the downing time).
    downed: bool,
}

/// The synchronous store: leases and state with fences, as `StateStore` specifies them (the
/// floor belongs to the scope it was raised in: a save under another scope is not compared with
/// it, and a fence under another scope replaces it).
#[derive(Debug, Default)]
struct Store {
    leases: HashMap<Arc<str>, (String, Epoch, bool)>,
    state: HashMap<Arc<str>, (Vec<u64>, Floor)>,
    /// Every operation fails (and does nothing) within these windows.
    outages: Vec<(Instant, Instant)>,
}

impl Store {
    fn down(&self, now: Instant) -> bool {
        self.outages
            .iter()
            .any(|(from, to)| (*from..*to).contains(&now))
    }

    fn run(&mut self, owner: &str, request: &StoreRequest, now: Instant) -> StoreAnswer {
        let backend = || StoreError::Backend("the store is down".into());
        match request {
            StoreRequest::Claim { scope } => StoreAnswer::Claim(if self.down(now) {
                Err(backend())
            } else {
                Ok(self.claim(scope, owner, None))
            }),
            StoreRequest::TakeOver { scope, from } => StoreAnswer::Claim(if self.down(now) {
                Err(backend())
            } else {
                Ok(self.claim(scope, owner, Some(*from)))
            }),
            StoreRequest::Release { scope, epoch } => StoreAnswer::Done(if self.down(now) {
                Err(backend())
            } else {
                match self.leases.get_mut(scope) {
                    Some((_, held, active)) if *held == *epoch && *active => {
                        *active = false;
                        Ok(())
                    }
                    _ => Err(StoreError::StaleEpoch {
                        fence: rally_state::Fence {
                            epoch: *epoch,
                            life: 0,
                        },
                    }),
                }
            }),
            StoreRequest::Fence {
                scope,
                epoch,
                life,
                identity,
            } => StoreAnswer::Done(if self.down(now) {
                Err(backend())
            } else if self.held(scope, *epoch) {
                let entry = self
                    .state
                    .entry(Arc::clone(identity))
                    .or_insert_with(|| (Vec::new(), (Arc::clone(scope), (0, 0))));
                let fence = (*epoch, life.0);
                if entry.1.0 != *scope || entry.1.1 < fence {
                    entry.1 = (Arc::clone(scope), fence);
                }
                Ok(())
            } else {
                Err(StoreError::StaleEpoch {
                    fence: rally_state::Fence {
                        epoch: *epoch,
                        life: life.0,
                    },
                })
            }),
        }
    }

    fn claim(&mut self, scope: &Arc<str>, owner: &str, from: Option<Epoch>) -> Claim {
        let entry = self
            .leases
            .entry(Arc::clone(scope))
            .or_insert_with(|| (String::new(), 0, false));
        let free = !entry.2 || entry.0 == owner || from == Some(entry.1);
        if free {
            *entry = (owner.to_owned(), entry.1 + 1, true);
            Claim::Granted(entry.1)
        } else {
            Claim::Held {
                owner: entry.0.clone(),
                epoch: entry.1,
            }
        }
    }

    fn held(&self, scope: &str, epoch: Epoch) -> bool {
        matches!(self.leases.get(scope), Some((_, held, true)) if *held == epoch)
    }

    /// A save under `fence`: refused unless its epoch is held and it is not below the floor.
    fn save(
        &mut self,
        scope: &str,
        fence: Fence,
        identity: &Arc<str>,
        state: &[u64],
        now: Instant,
    ) -> bool {
        if self.down(now) || !self.held(scope, fence.0) {
            return false;
        }
        let entry = self
            .state
            .entry(Arc::clone(identity))
            .or_insert_with(|| (Vec::new(), (Arc::from(scope), (0, 0))));
        if &*entry.1.0 == scope && fence < entry.1.1 {
            return false;
        }
        entry.0 = state.to_vec();
        true
    }

    fn load(&self, identity: &str) -> Vec<u64> {
        self.state
            .get(identity)
            .map(|s| s.0.clone())
            .unwrap_or_default()
    }
}

/// Members, network, store and clock.
pub(super) struct Cluster {
    pub(super) start: Instant,
    pub(super) now: Instant,
    rng: StdRng,
    pub(super) knobs: Knobs,
    membership: ClusterConfig,
    members: Vec<Member>,
    queue: BTreeMap<(Instant, u64), Event>,
    sequence: u64,
    /// The last delivery instant per (from, to): the network keeps order per pair.
    links: HashMap<(usize, usize), Instant>,
    store: Store,
    pub(super) history: History,
    /// Deposits sent, by id: whether an answer was heard yet.
    answered: HashMap<u64, bool>,
    /// Asks by id: their caller's member and where the call is.
    holds: HashMap<u64, (usize, Rc<Cell<Held>>)>,
    /// (member, identity) handed over by that member (its new owner acknowledged the
    /// handover), until the member starts a life for the identity again.
    handed_off: HashSet<(usize, Arc<str>)>,
    /// Calls passed on as handed over (by a previous owner, or a member that stopped hosting).
    pub(super) handed_over: usize,
    next_id: u64,
    placements: Arc<Placements>,
}

impl Cluster {
    /// `hosts` members hosting the kind and `clients` client-only ones, all up and seeing each
    /// other.
    pub(super) fn new(seed: u64, hosts: usize, clients: usize, knobs: Knobs) -> Self {
        let start = Instant::now();
        let mut cluster = Self {
            start,
            now: start,
            rng: StdRng::seed_from_u64(seed),
            knobs,
            membership: ClusterConfig::default(),
            members: Vec::new(),
            queue: BTreeMap::new(),
            sequence: 0,
            links: HashMap::new(),
            store: Store::default(),
            history: History::default(),
            answered: HashMap::new(),
            holds: HashMap::new(),
            handed_off: HashSet::new(),
            handed_over: 0,
            next_id: 0,
            placements: Arc::new(Placements::default()),
        };
        for i in 0..hosts + clients {
            let id = cluster.member_id(i, i < hosts);
            cluster.add_member(id);
        }
        let ids: Vec<MemberId> = cluster.members.iter().map(|m| m.id.clone()).collect();
        for m in 0..cluster.members.len() {
            for id in &ids {
                let event = MemberEvent::Up(id.clone());
                cluster.members[m].core.member_event(&event, start);
            }
            cluster.flush(m);
        }
        cluster
    }

    fn member_id(&self, i: usize, hosts: bool) -> MemberId {
        let address = format!("rally://sim@10.0.0.{}:2552", i + 1)
            .parse()
            .unwrap();
        let id = MemberId::new(address, Incarnation(1000 + i as u64), i as u64);
        if hosts { id.with_kinds([KIND]) } else { id }
    }

    fn add_member(&mut self, id: MemberId) -> usize {
        let hosting = id.hosts_kind(KIND);
        let ownership = Ownership::new(
            id.clone(),
            &self.membership,
            self.knobs.config.deactivation_timeout,
        );
        let core = KindCore::new(
            KIND,
            hosting,
            self.knobs.config.clone(),
            Arc::clone(&self.placements),
            ownership,
            self.now,
        );
        self.members.push(Member {
            id,
            core,
            status: Status::Running,
            gone_at: None,
            lives: HashMap::new(),
            timer: None,
            leaving: false,
            relays: 0,
            downed: false,
        });
        let m = self.members.len() - 1;
        self.flush(m);
        m
    }

    /// Simulated time since the start.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn log(&mut self, entry: Logged) {
        self.history.log.push((self.elapsed(), entry));
    }

    fn at(&mut self, at: Instant, event: Event) {
        self.sequence += 1;
        self.queue.insert((at, self.sequence), event);
    }

    /// A message from `from` to `to`, in order after the pair's previous one.
    fn send(&mut self, from: usize, to: usize, event: Event) {
        let latency = self
            .rng
            .random_range(Duration::ZERO..=self.knobs.net_latency);
        let last = self.links.get(&(from, to)).copied().unwrap_or(self.now);
        let at = (self.now + latency).max(last);
        self.links.insert((from, to), at);
        self.at(at, event);
    }

    fn running(&self, m: usize) -> bool {
        self.members[m].status != Status::Gone
    }

    /// Sends a deposit from member `from` to `identity`; an ask waits at most `wait`.
    pub(super) fn deposit(&mut self, from: usize, identity: &str, wait: Option<Duration>) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let big_reply = self.rng.random_bool(self.knobs.big_reply);
        let call = TestCall {
            id,
            deadline: wait.map(|wait| self.now + wait),
            hops: 0,
            handed_over: false,
            big_reply,
            path: Vec::new(),
            held: Rc::new(Cell::new(Held::Here)),
        };
        self.holds.insert(id, (from, Rc::clone(&call.held)));
        let identity: Arc<str> = Arc::from(identity);
        self.log(Logged::Sent {
            id,
            identity: Arc::clone(&identity),
            from,
            ask: wait.is_some(),
        });
        if let Some(wait) = wait {
            self.answered.insert(id, false);
            let at = self.now + wait;
            self.at(at, Event::Deadline { id });
        }
        if self.running(from) {
            let now = self.now;
            self.members[from].core.request(identity, call, now);
            self.flush(from);
        }
        id
    }

    /// Kills member `m` (SIGKILL): it does nothing more; the others see it down after a while.
    pub(super) fn kill(&mut self, m: usize) {
        self.log(Logged::Did(format!("kill {m}")));
        self.members[m].status = Status::Gone;
        self.members[m].gone_at = Some(self.now);
        self.announce_down(m);
    }

    fn announce_down(&mut self, m: usize) {
        self.members[m].downed = true;
        let id = self.members[m].id.clone();
        for o in 0..self.members.len() {
            if o == m || !self.running(o) {
                continue;
            }
            let seen = self.now
                + self
                    .rng
                    .random_range(Duration::from_millis(1500)..Duration::from_millis(3000));
            self.at(seen, Event::View(o, MemberEvent::Unreachable(id.clone())));
            self.at(seen, Event::View(o, MemberEvent::Down(id.clone())));
            self.at(
                seen + Duration::from_secs(5),
                Event::View(o, MemberEvent::Removed(id.clone())),
            );
        }
    }

    /// Pauses member `m` (SIGSTOP) for `pause`: what reaches it waits. Past two seconds the
    /// others down it, and it learns so when it resumes.
    pub(super) fn pause(&mut self, m: usize, pause: Duration) {
        self.log(Logged::Did(format!("pause {m} for {pause:?}")));
        if !self.running(m) {
            return;
        }
        let until = self.now + pause;
        self.members[m].status = Status::Paused(until);
        if pause > Duration::from_secs(2) {
            self.announce_down(m);
            let id = self.members[m].id.clone();
            self.at(
                until + Duration::from_millis(5),
                Event::View(m, MemberEvent::Down(id)),
            );
        }
    }

    /// Member `m` leaves gracefully: every member sees it leaving, then removed; it is gone
    /// once its core is drained.
    pub(super) fn leave(&mut self, m: usize) {
        self.log(Logged::Did(format!("leave {m}")));
        if !self.running(m) {
            return;
        }
        self.members[m].leaving = true;
        let id = self.members[m].id.clone();
        let removed_after = self
            .rng
            .random_range(Duration::from_millis(300)..Duration::from_millis(1200));
        for o in 0..self.members.len() {
            if !self.running(o) {
                continue;
            }
            let seen = self.now
                + self
                    .rng
                    .random_range(Duration::ZERO..Duration::from_millis(200));
            self.at(seen, Event::View(o, MemberEvent::Leaving(id.clone())));
            self.at(
                seen + removed_after,
                Event::View(o, MemberEvent::Removed(id.clone())),
            );
        }
    }

    /// A new member hosting the kind joins; every member sees it up after a while.
    pub(super) fn join(&mut self) -> usize {
        let id = self.member_id(self.members.len(), true);
        self.join_as(id)
    }

    /// A new member joins that hosts the kind with other placement settings (as in a rolling
    /// configuration change): it must never host the kind beside the others.
    pub(super) fn join_dissenting(&mut self) -> usize {
        let id = self
            .member_id(self.members.len(), false)
            .with_kind(KIND, "prefer-local");
        self.join_as(id)
    }

    fn join_as(&mut self, id: MemberId) -> usize {
        let m = self.add_member(id.clone());
        self.log(Logged::Did(format!(
            "join {m} ({})",
            id.declaration(KIND)
                .map_or("client", |d| d.placement.as_str())
        )));
        let now = self.now;
        // What the others are now, as gossip tells a joiner.
        let others: Vec<(MemberId, bool, bool)> = self
            .members
            .iter()
            .filter(|o| o.status != Status::Gone && !o.downed)
            .map(|o| (o.id.clone(), o.leaving, o.downed))
            .collect();
        for (other, leaving, _) in others {
            self.members[m]
                .core
                .member_event(&MemberEvent::Up(other.clone()), now);
            if leaving {
                self.members[m]
                    .core
                    .member_event(&MemberEvent::Leaving(other.clone()), now);
                self.at(
                    now + Duration::from_millis(500),
                    Event::View(m, MemberEvent::Removed(other)),
                );
            }
        }
        self.flush(m);
        for o in 0..self.members.len() {
            if o == m || !self.running(o) {
                continue;
            }
            let seen = now
                + self
                    .rng
                    .random_range(Duration::ZERO..Duration::from_millis(300));
            self.at(seen, Event::View(o, MemberEvent::Up(id.clone())));
        }
        m
    }

    /// Whether member `m` is gone (killed, or left and drained).
    pub(super) fn is_gone(&self, m: usize) -> bool {
        !self.running(m)
    }

    /// Members that run now and serve (not paused, not gone, not stopped after being downed,
    /// not refused for the kind because their placement settings differ).
    pub(super) fn running_members(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|m| {
                let member = &self.members[*m];
                member.status == Status::Running
                    && !member.core.is_stopped()
                    && member.core.mismatch().is_none()
            })
            .collect()
    }

    /// A life of member `m` that has no call ends by itself (a supervisor stopped it after
    /// its failures, say), without being told to: its identity must be free at once.
    pub(super) fn end_a_life(&mut self, m: usize) {
        if self.members[m].status != Status::Running {
            return;
        }
        let idle = self.members[m]
            .lives
            .iter()
            .filter(|(_, l)| !l.busy && !l.stopping && !l.ended)
            .map(|(life, _)| *life)
            .min();
        let Some(life) = idle else {
            return;
        };
        let l = self.members[m].lives.get_mut(&life).expect("found");
        l.ended = true;
        l.hook_started = true;
        let (identity, fence) = (Arc::clone(&l.identity), l.fence);
        self.log(Logged::Did(format!(
            "life {fence:?} of {identity} on {m} ends by itself"
        )));
        self.log(Logged::LifeEnded {
            identity: Arc::clone(&identity),
            member: m,
            fence,
        });
        let now = self.now;
        self.members[m].core.ended(&identity, life, now);
        self.flush(m);
    }

    /// The store fails every operation for `outage` from now.
    pub(super) fn store_outage(&mut self, outage: Duration) {
        self.log(Logged::Did(format!("store down for {outage:?}")));
        self.store.outages.push((self.now, self.now + outage));
    }

    /// Runs events until `until` (simulated).
    pub(super) fn run_for(&mut self, span: Duration) {
        let until = self.now + span;
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > until {
                break;
            }
            let ((at, _), event) = entry.remove_entry();
            self.now = self.now.max(at);
            self.process(event);
        }
        self.now = until;
    }

    fn process(&mut self, event: Event) {
        if std::env::var_os("RALLY_HARNESS_TRACE").is_some() {
            eprintln!("{:>12.3?} event {event:?}", self.elapsed());
        }
        if let Some(m) = event.member() {
            match self.members[m].status {
                Status::Gone => return self.lost(m, event),
                Status::Paused(until) if until > self.now => {
                    // Waits for the member to resume, in order.
                    self.sequence += 1;
                    self.queue.insert((until, self.sequence), event);
                    return;
                }
                Status::Paused(_) => self.members[m].status = Status::Running,
                Status::Running => {}
            }
        }
        let now = self.now;
        match event {
            Event::Timeout(m) => {
                if self.members[m].timer.is_some_and(|at| at <= now) {
                    self.members[m].timer = None;
                    self.members[m].core.handle_timeout(now);
                }
            }
            Event::View(m, event) => self.members[m].core.member_event(&event, now),
            Event::Request {
                to,
                from,
                identity,
                mut call,
            } => {
                call.path.push(from);
                if self.handed_off.contains(&(to, Arc::clone(&identity))) {
                    self.log(Logged::PassedOnLate {
                        id: call.id,
                        member: to,
                    });
                }
                self.members[to].core.request(identity, call, now);
            }
            Event::Refused {
                to,
                from,
                identity,
                call,
                refusal,
            } => {
                self.relayed(to, &call);
                if call.path.is_empty() && call.held.get() == Held::Left {
                    call.held.set(Held::Here);
                }
                let from = self.members[from].id.clone();
                self.members[to]
                    .core
                    .refused(identity, call, &from, refusal, now);
            }
            Event::Answer { to, call, heard } => {
                self.relayed(to, &call);
                return self.answer(to, call, heard);
            }
            Event::HandoverDone {
                to,
                from,
                identity,
                round,
            } => {
                self.send(
                    to,
                    from,
                    Event::HandoverAck {
                        to: from,
                        identity,
                        round,
                    },
                );
            }
            Event::HandoverAck {
                to,
                identity,
                round,
            } => {
                self.handed_off.insert((to, Arc::clone(&identity)));
                self.members[to].core.handover_acked(&identity, round, now);
            }
            Event::StoreAnswer { to, op, answer } => self.members[to].core.stored(op, answer, now),
            Event::Activated {
                member,
                identity,
                life,
            } => self.activated(member, identity, life),
            Event::Handled { member, life, call } => self.handled(member, life, call),
            Event::HookDone { member, life } => self.hook_done(member, life),
            Event::Deadline { id } => {
                if self.answered.get(&id) == Some(&false) {
                    let (origin, held) = self.holds[&id].clone();
                    let heard = if held.get() == Held::Here {
                        // Still in its caller's member: not handled.
                        held.set(Held::Abandoned);
                        let identity = self.identity_of(id);
                        let no_host = self.members[origin].core.route(&identity)
                            == crate::virtual_actors::ownership::Route::NoHost;
                        Heard::NotHandled(if no_host {
                            Refusal::NoHost
                        } else {
                            Refusal::Expired
                        })
                    } else {
                        Heard::Unknown("no answer by the deadline".into())
                    };
                    self.heard(id, heard);
                }
                return;
            }
        }
        for m in 0..self.members.len() {
            if self.running(m) {
                self.flush(m);
            }
        }
    }

    /// An event for a member that is gone: a call on its way there was lost after it left its
    /// sender (an asker hears "unknown"; calls to a member already gone are refused at the
    /// sender); anything else for it is lost.
    fn lost(&mut self, _m: usize, event: Event) {
        if let Event::Request { from, call, .. } = event
            && call.deadline.is_some()
            && self.running(from)
        {
            self.relayed(from, &call);
            self.answer(
                from,
                call,
                Heard::Unknown("the connection broke after the call left".into()),
            );
        }
    }

    /// An answer to an ask `m` passed on came back through `m`: one relay fewer there.
    fn relayed(&mut self, m: usize, call: &TestCall) {
        if !call.path.is_empty() {
            self.members[m].relays = self.members[m].relays.saturating_sub(1);
        }
    }

    /// An answer reached member `m` on its way back to the caller.
    fn answer(&mut self, m: usize, mut call: TestCall, heard: Heard) {
        match call.path.pop() {
            Some(next) => self.send(
                m,
                next,
                Event::Answer {
                    to: next,
                    call,
                    heard,
                },
            ),
            None => self.heard(call.id, heard),
        }
    }

    fn heard(&mut self, id: u64, heard: Heard) {
        if self.answered.get(&id) == Some(&false) {
            self.answered.insert(id, true);
            self.log(Logged::Heard { id, heard });
        }
    }

    /// Runs the effects member `m`'s core produced, and keeps its timer in the queue.
    fn flush(&mut self, m: usize) {
        loop {
            let mut effects = Vec::new();
            self.members[m].core.take_effects(&mut effects);
            if effects.is_empty() {
                break;
            }
            for effect in effects {
                self.effect(m, effect);
            }
        }
        let next = self.members[m].core.poll_timeout();
        let _ = self.members[m].core.timer_moved();
        if let Some(at) = next
            && self.members[m].timer.is_none_or(|armed| at < armed)
        {
            self.members[m].timer = Some(at);
            self.at(at, Event::Timeout(m));
        }
        if self.members[m].leaving
            && self.members[m].relays == 0
            && self.members[m].core.is_drained(self.now)
        {
            self.members[m].status = Status::Gone;
            self.members[m].gone_at = Some(self.now);
        }
    }

    fn effect(&mut self, m: usize, effect: Effect<Sim>) {
        let now = self.now;
        if std::env::var_os("RALLY_HARNESS_TRACE").is_some() {
            eprintln!("{:>12.3?} m{m} {effect:?}", self.elapsed());
        }
        match effect {
            Effect::Activate {
                identity,
                life,
                scope,
                epoch,
            } => {
                self.members[m].lives.insert(
                    life,
                    LifeSim {
                        identity: Arc::clone(&identity),
                        scope,
                        fence: (epoch, life.0),
                        state: Vec::new(),
                        busy: false,
                        stopping: false,
                        hook_started: false,
                        ended: false,
                    },
                );
                let at = now
                    + self
                        .rng
                        .random_range(Duration::ZERO..Duration::from_millis(3));
                self.at(
                    at,
                    Event::Activated {
                        member: m,
                        identity,
                        life,
                    },
                );
            }
            Effect::Deliver {
                identity,
                life,
                actor,
                call,
            } => {
                if !self.leaves_caller(&call) {
                    // Its caller gave up while it waited here: dropped, the life is free.
                    self.members[m].core.completed(&identity, life, now);
                    return;
                }
                let alive = self.members[m]
                    .lives
                    .get(&actor.life)
                    .is_some_and(|l| !l.ended && !l.hook_started);
                if !alive {
                    self.members[m].core.undelivered(&identity, life, call, now);
                    return;
                }
                let l = self.members[m].lives.get_mut(&life).expect("alive");
                l.busy = true;
                let slow = self.rng.random_bool(self.knobs.slow_calls);
                let took = if slow {
                    self.rng
                        .random_range(Duration::from_millis(50)..Duration::from_millis(800))
                } else {
                    self.rng
                        .random_range(Duration::ZERO..Duration::from_millis(3))
                };
                self.at(
                    now + took,
                    Event::Handled {
                        member: m,
                        life,
                        call,
                    },
                );
            }
            Effect::Stop { life, .. } => {
                if let Some(l) = self.members[m].lives.get_mut(&life) {
                    l.stopping = true;
                    if !l.busy {
                        self.start_hook(m, life);
                    }
                }
            }
            Effect::Forward {
                identity,
                to,
                mut call,
                handover,
            } => {
                if !self.leaves_caller(&call) {
                    return;
                }
                let to = self.index_of(&to);
                call.handed_over = handover;
                self.handed_over += usize::from(handover);
                if call.deadline.is_some() && !call.path.is_empty() && self.running(to) {
                    self.members[m].relays += 1;
                }
                if !self.running(to) {
                    // The connection refuses it before it leaves.
                    if call.deadline.is_some() {
                        let from_id = self.members[to].id.clone();
                        self.members[m].core.refused(
                            identity,
                            call,
                            &from_id,
                            Refusal::Unreachable("gone".into()),
                            now,
                        );
                    }
                    return;
                }
                self.send(
                    m,
                    to,
                    Event::Request {
                        to,
                        from: m,
                        identity,
                        call,
                    },
                );
            }
            Effect::HandoverDone {
                identity,
                to,
                round,
            } => {
                let to = self.index_of(&to);
                self.send(
                    m,
                    to,
                    Event::HandoverDone {
                        to,
                        from: m,
                        identity,
                        round,
                    },
                );
            }
            Effect::Refuse { mut call, refusal } => {
                if call.deadline.is_none() {
                    return; // a tell: dropped (logged and counted by the real driver)
                }
                match call.path.pop() {
                    Some(back) => {
                        let identity: Arc<str> = self.identity_of(call.id);
                        self.send(
                            m,
                            back,
                            Event::Refused {
                                to: back,
                                from: m,
                                identity,
                                call,
                                refusal,
                            },
                        );
                    }
                    None => self.heard(call.id, Heard::NotHandled(refusal)),
                }
            }
            Effect::Store { op, request } => {
                let latency = self
                    .rng
                    .random_range(Duration::ZERO..=self.knobs.store_latency);
                // Applied half way, answered at the end.
                let owner = Ownership::owner_key(&self.members[m].id);
                let answer = self.store.run(&owner, &request, now + latency / 2);
                if std::env::var_os("RALLY_HARNESS_TRACE").is_some() {
                    eprintln!(
                        "{:>12.3?} m{m} store {request:?} -> {answer:?}",
                        self.elapsed()
                    );
                }
                self.at(now + latency, Event::StoreAnswer { to: m, op, answer });
            }
        }
    }

    /// A call leaves its caller's member (to a life, or to another member): `false` if its
    /// caller gave up on it while it was held there (it is dropped).
    fn leaves_caller(&self, call: &TestCall) -> bool {
        if !call.path.is_empty() || call.deadline.is_none() {
            return true;
        }
        match call.held.get() {
            Held::Abandoned => false,
            _ => {
                call.held.set(Held::Left);
                true
            }
        }
    }

    fn identity_of(&self, id: u64) -> Arc<str> {
        self.history
            .log
            .iter()
            .find_map(|(_, entry)| match entry {
                Logged::Sent {
                    id: sent, identity, ..
                } if *sent == id => Some(Arc::clone(identity)),
                _ => None,
            })
            .expect("every call was sent")
    }

    fn index_of(&self, id: &MemberId) -> usize {
        self.members
            .iter()
            .position(|m| m.id == *id)
            .expect("a known member")
    }

    fn activated(&mut self, m: usize, identity: Arc<str>, life: LifeId) {
        let now = self.now;
        let fails = self.rng.random_bool(self.knobs.hook_fails);
        let Some(l) = self.members[m].lives.get_mut(&life) else {
            return;
        };
        if fails {
            l.ended = true;
            self.members[m]
                .core
                .activated(&identity, life, Err("the hook failed".into()), now);
            return;
        }
        l.state = self.store.load(&identity);
        let fence = l.fence;
        let scope = Arc::clone(&l.scope);
        self.log(Logged::Loaded {
            identity: Arc::clone(&identity),
            member: m,
            scope,
            fence,
        });
        self.log(Logged::LifeStarted {
            identity: Arc::clone(&identity),
            member: m,
            fence,
        });
        self.handed_off.remove(&(m, Arc::clone(&identity)));
        self.members[m]
            .core
            .activated(&identity, life, Ok(LifeRef { member: m, life }), now);
    }

    /// A life handled a deposit: applied, saved, answered; then it is free again.
    fn handled(&mut self, m: usize, life: LifeId, call: TestCall) {
        let now = self.now;
        let Some(l) = self.members[m].lives.get_mut(&life) else {
            return;
        };
        l.busy = false;
        l.state.push(call.id);
        let (identity, scope, fence, state) = (
            Arc::clone(&l.identity),
            Arc::clone(&l.scope),
            l.fence,
            l.state.clone(),
        );
        self.log(Logged::Applied {
            id: call.id,
            member: m,
            fence,
        });
        let accepted = self.store.save(&scope, fence, &identity, &state, now);
        self.log(Logged::Saved {
            identity: Arc::clone(&identity),
            member: m,
            fence,
            accepted,
            state,
        });
        let heard = if !accepted {
            Heard::HandledError("the save was refused".into())
        } else if call.big_reply {
            Heard::HandledError("the reply was lost".into())
        } else {
            Heard::Ok
        };
        if call.deadline.is_some() {
            self.answer(m, call, heard);
        }
        let stopping = self.members[m].lives.get(&life).is_some_and(|l| l.stopping);
        self.members[m].core.completed(&identity, life, now);
        if stopping {
            self.start_hook(m, life);
        }
    }

    /// The `stopped` hook: sometimes it overruns the deactivation timeout; it saves at its end.
    fn start_hook(&mut self, m: usize, life: LifeId) {
        let overrun = self.rng.random_bool(self.knobs.hook_overrun);
        let limit = self.knobs.config.deactivation_timeout;
        let took = if overrun {
            limit
                + self
                    .rng
                    .random_range(Duration::from_millis(1)..Duration::from_millis(700))
        } else {
            self.rng.random_range(Duration::ZERO..limit / 4)
        };
        let Some(l) = self.members[m].lives.get_mut(&life) else {
            return;
        };
        if l.hook_started {
            return;
        }
        l.hook_started = true;
        let at = self.now + took;
        self.at(at, Event::HookDone { member: m, life });
    }

    fn hook_done(&mut self, m: usize, life: LifeId) {
        let now = self.now;
        let Some(l) = self.members[m].lives.get_mut(&life) else {
            return;
        };
        l.ended = true;
        let (identity, scope, fence, state) = (
            Arc::clone(&l.identity),
            Arc::clone(&l.scope),
            l.fence,
            l.state.clone(),
        );
        let accepted = self.store.save(&scope, fence, &identity, &state, now);
        self.log(Logged::Saved {
            identity: Arc::clone(&identity),
            member: m,
            fence,
            accepted,
            state,
        });
        self.log(Logged::LifeEnded {
            identity: Arc::clone(&identity),
            member: m,
            fence,
        });
        self.members[m].core.ended(&identity, life, now);
    }

    /// The state the store holds for `identity` now.
    pub(super) fn stored(&self, identity: &str) -> Vec<u64> {
        self.store.load(identity)
    }

    /// The core of member `m`.
    pub(super) fn core(&self, m: usize) -> &KindCore<Sim> {
        &self.members[m].core
    }

    /// Identities that a deposit was sent to.
    pub(super) fn identities(&self) -> std::collections::BTreeSet<Arc<str>> {
        self.history
            .log
            .iter()
            .filter_map(|(_, entry)| match entry {
                Logged::Sent { identity, .. } => Some(Arc::clone(identity)),
                _ => None,
            })
            .collect()
    }

    /// Checks the promises over the history and the store's final state.
    pub(super) fn check(&self) -> Result<(), String> {
        let finals: HashMap<Arc<str>, Vec<u64>> = self
            .identities()
            .into_iter()
            .map(|identity| {
                let state = self.stored(&identity);
                (identity, state)
            })
            .collect();
        self.history.check(&finals)
    }
}

impl History {
    /// The log, an entry a line.
    pub(super) fn lines(&self) -> String {
        self.log
            .iter()
            .map(|(at, entry)| format!("{at:>12.3?} {entry:?}\n"))
            .collect()
    }

    /// The promises, over the log and the final states:
    ///
    /// 1. no deposit applied more than once (only Rally re-sends here: callers never retry);
    /// 2. every answer true: `NotHandled` never applied, `Ok` applied and in the final state;
    /// 3. every acknowledged deposit in the final state of its identity, once;
    /// 4. every save accepted for an identity comes from the life that loaded it last (a save
    ///    from an earlier life, after a later one loaded, would be lost to it, or overwrite it),
    ///    but when two lives overlap (one loads before the other has ended): a member paused
    ///    past the takeover wait acting on its old lease (the documented exception), or a life
    ///    whose hook overran and that the store has fenced. The earlier of the two is then the
    ///    fenced one (under one scope: the one under the lower fence), and every save it
    ///    attempts must be refused.
    pub(super) fn check(&self, finals: &HashMap<Arc<str>, Vec<u64>>) -> Result<(), String> {
        let mut applied: HashMap<u64, usize> = HashMap::new();
        let mut identity_of: HashMap<u64, Arc<str>> = HashMap::new();
        let mut heard: HashMap<u64, Heard> = HashMap::new();
        // identity -> the life (member, fence, scope) whose saves may be accepted: the last to
        // load, or, of two that overlap under one scope, the one under the higher fence
        let mut current: HashMap<Arc<str>, (usize, Fence, Arc<str>)> = HashMap::new();
        // lives loaded and not ended
        let mut live: HashSet<(Arc<str>, usize, Fence)> = HashSet::new();
        // lives that overlapped one under a higher fence: none of their saves may be accepted
        let mut stale: HashSet<(Arc<str>, usize, Fence)> = HashSet::new();
        for (at, entry) in &self.log {
            match entry {
                Logged::Sent { id, identity, .. } => {
                    identity_of.insert(*id, Arc::clone(identity));
                }
                Logged::Applied { id, .. } => *applied.entry(*id).or_default() += 1,
                Logged::Heard { id, heard: h } => {
                    heard.insert(*id, h.clone());
                }
                Logged::Loaded {
                    identity,
                    member,
                    scope,
                    fence,
                } => {
                    let life = (Arc::clone(identity), *member, *fence);
                    let newest = (*member, *fence, Arc::clone(scope));
                    match current.get(identity) {
                        Some((other, other_fence, other_scope))
                            if live.contains(&(Arc::clone(identity), *other, *other_fence)) =>
                        {
                            if other_scope == scope && fence < other_fence {
                                stale.insert(life.clone());
                            } else {
                                stale.insert((Arc::clone(identity), *other, *other_fence));
                                current.insert(Arc::clone(identity), newest);
                            }
                        }
                        _ => {
                            current.insert(Arc::clone(identity), newest);
                        }
                    }
                    live.insert(life);
                }
                Logged::LifeEnded {
                    identity,
                    member,
                    fence,
                } => {
                    live.remove(&(Arc::clone(identity), *member, *fence));
                }
                Logged::Saved {
                    identity,
                    fence,
                    accepted: true,
                    member,
                    ..
                } => {
                    if stale.contains(&(Arc::clone(identity), *member, *fence)) {
                        return Err(format!(
                            "at {at:?}: {identity}: a save of the life {fence:?} on member \
                             {member} was accepted, though it overlapped a life under a \
                             later fence"
                        ));
                    }
                    if let Some(last) = current.get(identity)
                        && (last.0, last.1) != (*member, *fence)
                    {
                        return Err(format!(
                            "at {at:?}: {identity}: a save of the life {fence:?} on member \
                             {member} was accepted after the life {:?} on member {} had loaded",
                            last.1, last.0
                        ));
                    }
                }
                _ => {}
            }
        }
        for (id, count) in &applied {
            if *count > 1 {
                return Err(format!("deposit {id} was applied {count} times"));
            }
        }
        for (id, h) in &heard {
            let identity = &identity_of[id];
            let fin = finals.get(identity).cloned().unwrap_or_default();
            match h {
                Heard::NotHandled(refusal) if applied.contains_key(id) => {
                    return Err(format!(
                        "deposit {id} was answered not handled ({refusal}) but was applied"
                    ));
                }
                Heard::Ok if !applied.contains_key(id) => {
                    return Err(format!("deposit {id} was acknowledged but never applied"));
                }
                Heard::Ok if !fin.contains(id) => {
                    return Err(format!(
                        "deposit {id} to {identity} was acknowledged but is not in the final state \
                         {fin:?}"
                    ));
                }
                _ => {}
            }
        }
        for (identity, state) in finals {
            let mut seen = HashSet::new();
            for id in state {
                if !seen.insert(id) {
                    return Err(format!("{identity}: deposit {id} is in the state twice"));
                }
            }
        }
        Ok(())
    }

    /// The order per sender (docs/cluster.md, "Order per sender across a move"): the deposits
    /// one member sent to one identity are applied in the order they were sent (ids grow with
    /// time). Promised across joins and graceful leaves, so checked on schedules of those only,
    /// with the documented exceptions left out: a deposit passed on late
    /// ([`Logged::PassedOnLate`]) may come after later ones, and an application whose save the
    /// store refused (a life that overran its deactivation timeout, fenced while a later life
    /// of the identity runs) did not take effect. Returns how many applications were compared
    /// with an earlier one of their sender, and how many deposits were passed on late.
    pub(super) fn check_order(&self) -> Result<(usize, usize), String> {
        let mut sender: HashMap<u64, (usize, Arc<str>)> = HashMap::new();
        let mut late: HashSet<u64> = HashSet::new();
        let mut applied: HashSet<u64> = HashSet::new();
        let mut last: HashMap<(usize, Arc<str>), u64> = HashMap::new();
        let mut compared = 0;
        for (i, (at, entry)) in self.log.iter().enumerate() {
            match entry {
                Logged::Sent {
                    id, identity, from, ..
                } => {
                    sender.insert(*id, (*from, Arc::clone(identity)));
                }
                Logged::PassedOnLate { id, .. } => {
                    late.insert(*id);
                }
                Logged::Applied { id, member, fence } => {
                    // The harness logs the life's save right after its application.
                    let took_effect = matches!(
                        self.log.get(i + 1),
                        Some((_, Logged::Saved { member: m, fence: f, accepted: true, .. }))
                            if m == member && f == fence
                    );
                    if !took_effect || late.contains(id) || !applied.insert(*id) {
                        continue;
                    }
                    let key = sender[id].clone();
                    if let Some(&before) = last.get(&key) {
                        compared += 1;
                        if before > *id {
                            return Err(format!(
                                "at {at:?}: deposit {id} from member {} to {} applied on member \
                                 {member} after deposit {before}, which it sent later",
                                key.0, key.1
                            ));
                        }
                    }
                    last.insert(key, *id);
                }
                _ => {}
            }
        }
        Ok((compared, late.len()))
    }

    /// How many of the deposits sent were answered each way: (ok, handled error, not handled,
    /// unknown).
    pub(super) fn tally(&self) -> (usize, usize, usize, usize) {
        let mut tally = (0, 0, 0, 0);
        for (_, entry) in &self.log {
            if let Logged::Heard { heard, .. } = entry {
                match heard {
                    Heard::Ok => tally.0 += 1,
                    Heard::HandledError(_) => tally.1 += 1,
                    Heard::NotHandled(_) => tally.2 += 1,
                    Heard::Unknown(_) => tally.3 += 1,
                }
            }
        }
        tally
    }

    /// What deposit `id`'s caller heard, if anything.
    pub(super) fn heard(&self, id: u64) -> Option<&Heard> {
        self.log.iter().find_map(|(_, entry)| match entry {
            Logged::Heard {
                id: heard_id,
                heard,
            } if *heard_id == id => Some(heard),
            _ => None,
        })
    }

    /// How many times deposit `id` was applied.
    pub(super) fn applications(&self, id: u64) -> usize {
        self.log
            .iter()
            .filter(|(_, entry)| matches!(entry, Logged::Applied { id: a, .. } if *a == id))
            .count()
    }
}

#[cfg(test)]
mod checker_tests {
    //! The history checker itself: what it must refuse, and the overlaps it must allow.

    use super::*;

    fn at(ms: u64, entry: Logged) -> (Duration, Logged) {
        (Duration::from_millis(ms), entry)
    }

    fn loaded(member: usize, scope: &str, fence: Fence) -> Logged {
        Logged::Loaded {
            identity: Arc::from("a"),
            member,
            scope: Arc::from(scope),
            fence,
        }
    }

    fn saved(member: usize, fence: Fence, accepted: bool) -> Logged {
        Logged::Saved {
            identity: Arc::from("a"),
            member,
            fence,
            accepted,
            state: Vec::new(),
        }
    }

    fn ended(member: usize, fence: Fence) -> Logged {
        Logged::LifeEnded {
            identity: Arc::from("a"),
            member,
            fence,
        }
    }

    fn check(log: Vec<(Duration, Logged)>) -> Result<(), String> {
        History { log }.check(&HashMap::new())
    }

    #[test]
    fn a_save_of_an_earlier_life_accepted_after_a_later_one_loaded_is_refused() {
        let broken = check(vec![
            at(0, loaded(0, "s", (1, 1))),
            at(1, loaded(1, "s", (2, 1))),
            at(2, saved(0, (1, 1), true)),
        ]);
        assert!(broken.is_err(), "{broken:?}");
        let after_its_end = check(vec![
            at(0, loaded(0, "s", (1, 1))),
            at(1, saved(0, (1, 1), true)),
            at(2, ended(0, (1, 1))),
            at(3, loaded(1, "s", (2, 1))),
            at(4, saved(1, (2, 1), true)),
        ]);
        assert_eq!(after_its_end, Ok(()));
    }

    #[test]
    fn a_paused_member_may_load_on_its_old_lease_but_none_of_its_saves_may_be_accepted() {
        let fenced = vec![
            at(0, loaded(1, "s", (4, 3))),
            at(1, loaded(0, "s", (2, 5))),
            at(2, saved(0, (2, 5), false)),
            at(3, saved(1, (4, 3), true)),
        ];
        assert_eq!(check(fenced), Ok(()));
        let accepted = check(vec![
            at(0, loaded(1, "s", (4, 3))),
            at(1, loaded(0, "s", (2, 5))),
            at(2, saved(0, (2, 5), true)),
        ]);
        assert!(accepted.is_err(), "{accepted:?}");
    }

    #[test]
    fn under_a_new_scope_the_later_life_is_the_current_one_whatever_its_fence() {
        let moved = vec![
            at(0, loaded(1, "shard-7", (1, 7))),
            at(1, loaded(3, "a", (1, 3))),
            at(2, saved(3, (1, 3), true)),
        ];
        assert_eq!(check(moved), Ok(()));
        let old_scope_wrote = check(vec![
            at(0, loaded(1, "shard-7", (1, 7))),
            at(1, loaded(3, "a", (1, 3))),
            at(2, saved(1, (1, 7), true)),
        ]);
        assert!(old_scope_wrote.is_err(), "{old_scope_wrote:?}");
    }
}
