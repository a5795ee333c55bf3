//! The cluster singleton: one instance of an actor in the whole cluster, on the oldest member
//! (optionally the oldest of a role), handed over when that member leaves or is downed.
//!
//! The decision is sans-I/O ([`SingletonGate`]): member events and the time in, `Start` /
//! `Stop` and the singleton's location out. A member hosts when it is the oldest member that
//! may host; an older member that is leaving blocks it until it is removed, and an older member
//! that was downed blocks it for the takeover margin
//! ([`ClusterConfig::takeover_margin`](crate::ClusterConfig::takeover_margin)), by which time a
//! downed member that was still running (the losing side of a partition) has stopped. So no
//! two members ever host at once. [`ClusterSingleton`] runs the gate over a member's event
//! stream, spawns and stops the actor, and [`SingletonProxy`] sends to wherever it is,
//! buffering while it moves.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rally_actor::{ActorRef, ActorSystem, Handler};
use rally_remote::{NodeAddress, RemoteActor, RemoteMessage, RemoteNode};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::config::ClusterConfig;
use crate::member::{MemberEvent, MemberId};
use rally_actor::sync::Mutex;

/// What the gate tells its member to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SingletonChange {
    /// Start the singleton here.
    Start,
    /// Stop the singleton here.
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Joining,
    Up,
    Leaving,
    /// Downed, seen at this instant: blocks younger members until the takeover margin passed.
    Down(Instant),
}

/// Decides, from one member's events, whether that member hosts the singleton and where the
/// singleton is.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use rally::cluster::{ClusterConfig, MemberEvent, MemberId, SingletonChange, SingletonGate};
/// use rally::remote::Incarnation;
///
/// let id = |port: u16| MemberId::new(format!("rally://c@h:{port}").parse().unwrap(), Incarnation(1), port.into());
/// let now = Instant::now();
/// let mut gate = SingletonGate::new(id(2), None, ClusterConfig::default());
/// assert_eq!(gate.on_event(&MemberEvent::Up(id(1)), now), None);
/// assert_eq!(gate.on_event(&MemberEvent::Up(id(2)), now), None, "1 is older: it hosts");
/// assert_eq!(gate.location(), Some(&id(1)));
/// // 1 is downed: 2 takes over only after the takeover margin (and only once it has been up
/// // for stable-after, which is shorter).
/// assert_eq!(gate.on_event(&MemberEvent::Down(id(1)), now), None);
/// assert_eq!(gate.location(), None, "moving: proxies buffer");
/// let at = now + ClusterConfig::default().takeover_margin(2);
/// assert_eq!(gate.on_timeout(at - Duration::from_millis(1)), None);
/// assert_eq!(gate.on_timeout(at), Some(SingletonChange::Start));
/// assert_eq!(gate.location(), Some(&id(2)));
/// ```
#[derive(Debug)]
pub struct SingletonGate {
    local: MemberId,
    role: Option<String>,
    config: ClusterConfig,
    members: BTreeMap<MemberId, State>,
    hosting: bool,
    /// This member left or was downed: it never hosts again (a restart is a new member).
    retired: bool,
    /// When this member came up: it hosts only from `stable-after` later, so that an older
    /// member it has not heard of yet (members started at once, each joining through another;
    /// an older member admitted after a younger one) and a younger host it displaces are
    /// known and stopped first.
    up_at: Option<Instant>,
    /// Up for `stable-after` already.
    settled: bool,
}

impl SingletonGate {
    /// The gate of member `local`, for a singleton on the oldest member (of `role`, if given).
    pub fn new(local: MemberId, role: Option<String>, config: ClusterConfig) -> Self {
        Self {
            local,
            role,
            config,
            members: BTreeMap::new(),
            hosting: false,
            retired: false,
            up_at: None,
            settled: false,
        }
    }

    /// Whether this member hosts the singleton now.
    pub fn is_hosting(&self) -> bool {
        self.hosting
    }

    /// The member hosting (or about to host) the singleton, if no older member blocks it: the
    /// oldest eligible member, when it is up. `None` while the singleton moves.
    pub fn location(&self) -> Option<&MemberId> {
        let (oldest, state) = self.oldest()?;
        (*state == State::Up).then_some(oldest)
    }

    /// Applies a member event seen at `now`; says whether to start or stop here. Events that
    /// arrive together (one packet's worth) should go through [`apply`](Self::apply) and
    /// then one [`decide`](Self::decide): a member that just joined learns of the older
    /// members in the same batch as its own `Up`, and must not start in between.
    pub fn on_event(&mut self, event: &MemberEvent, now: Instant) -> Option<SingletonChange> {
        self.apply(event, now);
        self.decide(now)
    }

    /// Whether to start or stop here, after the events applied so far.
    pub fn decide(&mut self, now: Instant) -> Option<SingletonChange> {
        self.expire(now);
        self.settle(now)
    }

    /// Applies a member event seen at `now`, without deciding.
    pub fn apply(&mut self, event: &MemberEvent, now: Instant) {
        let member = event.member();
        if *member == self.local && matches!(event, MemberEvent::Up(_)) {
            self.up_at.get_or_insert(now);
        }
        let eligible = self.role.as_deref().is_none_or(|r| member.has_role(r));
        if *member == self.local
            && matches!(
                event,
                MemberEvent::Leaving(_) | MemberEvent::Down(_) | MemberEvent::Removed(_)
            )
        {
            self.retired = true;
        }
        if eligible {
            match event {
                MemberEvent::Joined(m) => {
                    self.members.entry(m.clone()).or_insert(State::Joining);
                }
                MemberEvent::Up(m) => {
                    if let Some(s @ State::Joining) = self.members.get_mut(m) {
                        *s = State::Up;
                    } else {
                        self.members.entry(m.clone()).or_insert(State::Up);
                    }
                }
                MemberEvent::Leaving(m) => {
                    if let Some(s @ (State::Joining | State::Up)) = self.members.get_mut(m) {
                        *s = State::Leaving;
                    }
                }
                // A downed member stays a blocker until its margin passed (the first Down
                // seen starts it); any other removal (left, replaced by a restart) means its
                // process is gone.
                MemberEvent::Down(m) if !matches!(self.members.get(m), Some(State::Down(_))) => {
                    self.members.insert(m.clone(), State::Down(now));
                }
                MemberEvent::Removed(m) if !matches!(self.members.get(m), Some(State::Down(_))) => {
                    self.members.remove(m);
                }
                _ => {}
            }
        }
    }

    /// When [`on_timeout`](Self::on_timeout) must next run: the end of a downed member's
    /// takeover margin, or `stable-after` after this member came up.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let margin = self.margin();
        let settles = self
            .up_at
            .filter(|_| !self.settled && !self.retired)
            .map(|at| at + self.config.stable_after);
        self.members
            .values()
            .filter_map(|s| match s {
                State::Down(at) => Some(*at + margin),
                _ => None,
            })
            .chain(settles)
            .min()
    }

    /// Runs what is due at `now`.
    pub fn on_timeout(&mut self, now: Instant) -> Option<SingletonChange> {
        self.expire(now);
        self.settle(now)
    }

    fn margin(&self) -> Duration {
        self.config.takeover_margin(self.members.len().max(1))
    }

    fn expire(&mut self, now: Instant) {
        let margin = self.margin();
        self.members
            .retain(|_, s| !matches!(s, State::Down(at) if now >= *at + margin));
    }

    fn oldest(&self) -> Option<(&MemberId, &State)> {
        self.members.iter().next()
    }

    fn settle(&mut self, now: Instant) -> Option<SingletonChange> {
        if !self.settled
            && self
                .up_at
                .is_some_and(|at| now >= at + self.config.stable_after)
        {
            self.settled = true;
        }
        let should = self.settled
            && !self.retired
            && self
                .oldest()
                .is_some_and(|(m, s)| *m == self.local && *s == State::Up);
        match (self.hosting, should) {
            (false, true) => {
                self.hosting = true;
                Some(SingletonChange::Start)
            }
            (true, false) => {
                self.hosting = false;
                Some(SingletonChange::Stop)
            }
            _ => None,
        }
    }
}

/// "Do you run the singleton now?", asked by proxies of the member they see as its host
/// before they send to it, so nothing is sent to a member that has not started it yet.
#[derive(serde::Serialize, serde::Deserialize)]
struct IsHosting;

impl rally_actor::Message for IsHosting {
    type Reply = bool;
}

impl RemoteMessage for IsHosting {
    const MANIFEST: &'static str = "rally.cluster.singleton.IsHosting";
}

/// Answers [`IsHosting`] for one singleton on one member (exposed on every member).
struct Status {
    hosting: Arc<std::sync::atomic::AtomicBool>,
}

impl rally_actor::Actor for Status {}

impl Handler<IsHosting> for Status {
    async fn handle(
        &mut self,
        _: IsHosting,
        _: &mut rally_actor::Context<Self>,
    ) -> rally_actor::ActorResult<bool> {
        Ok(self.hosting.load(std::sync::atomic::Ordering::SeqCst))
    }
}

impl RemoteActor for Status {
    fn messages(table: &mut rally_remote::MessageTable<Self>) {
        table.add::<IsHosting>();
    }
}

/// How often a proxy asks the member it sees as host whether it runs the singleton yet.
const CONFIRM_PERIOD: Duration = Duration::from_millis(50);

/// How long [`Cluster::leave`] waits for the instance here to stop before it leaves anyway.
const LEAVE_STOP_WAIT: Duration = Duration::from_secs(10);

/// Messages kept by a proxy while the singleton moves; beyond it a send is refused.
const PROXY_BUFFER: usize = 10_000;

/// One actor in the whole cluster, on the oldest member (of a role), run by every member that
/// may host it.
///
/// Every member that may host it starts a `ClusterSingleton` with the same `name` and factory;
/// the one its [`SingletonGate`] elects spawns the actor and exposes it under
/// `rally.singleton.<name>`, the others wait. [`proxy`](Self::proxy) sends to it from any
/// member.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
/// use rally::cluster::{Cluster, ClusterConfig, ClusterSingleton};
/// use rally::remote::{MessageTable, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Tick;
/// impl Message for Tick { type Reply = (); }
/// impl RemoteMessage for Tick { const MANIFEST: &'static str = "example.Tick"; }
///
/// struct Scheduler;
/// impl Actor for Scheduler {}
/// impl Handler<Tick> for Scheduler {
///     async fn handle(&mut self, _: Tick, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
/// }
/// impl RemoteActor for Scheduler {
///     fn messages(table: &mut MessageTable<Self>) { table.add::<Tick>(); }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("shop");
/// let node = RemoteNode::start(&system, RemoteConfig::builder().listen("127.0.0.1", 2552).secret(b"s".to_vec()).build().unwrap())
///     .await
///     .unwrap();
/// let config = ClusterConfig::default();
/// let cluster = Cluster::join(&system, &node, config.clone()).unwrap();
/// let singleton = ClusterSingleton::start(&system, &node, &cluster, config, "scheduler", None, || Scheduler);
/// singleton.proxy().tell(Tick).unwrap();
/// // A graceful exit: stop the instance here, then leave; the next oldest takes over.
/// singleton.leave(Duration::from_secs(5)).await;
/// # }
/// ```
pub struct ClusterSingleton<A: RemoteActor> {
    proxy: SingletonProxy<A>,
    cluster: Cluster,
    task: tokio::task::JoinHandle<()>,
    confirmer: tokio::task::JoinHandle<()>,
    local: Arc<Mutex<Option<ActorRef<A>>>>,
}

impl<A: RemoteActor> ClusterSingleton<A> {
    /// Runs the singleton `name` on this member: hosts it when elected, with `factory`
    /// making each instance. `role` limits hosting to members of that role (a member without
    /// it only proxies).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        system: &ActorSystem,
        node: &RemoteNode,
        cluster: &Cluster,
        config: ClusterConfig,
        name: &str,
        role: Option<String>,
        factory: impl Fn() -> A + Send + Sync + 'static,
    ) -> Self {
        let exposed = format!("rally.singleton.{name}");
        let status_name = format!("{exposed}.status");
        let hosting_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        match system.spawn(Status {
            hosting: hosting_flag.clone(),
        }) {
            Ok(status) => {
                if let Err(e) = node.expose(&status_name, &status) {
                    tracing::warn!(error = %e, "exposing the singleton's status");
                }
            }
            Err(e) => tracing::warn!(error = %e, "spawning the singleton's status"),
        }
        // Where the gate says the singleton is, and where it is confirmed running.
        let (location_tx, location) = watch::channel(None);
        let (confirmed_tx, confirmed) = watch::channel(None);
        let local_ref: Arc<Mutex<Option<ActorRef<A>>>> = Arc::default();
        let proxy = SingletonProxy {
            inner: Arc::new(ProxyInner {
                node: node.clone(),
                name: exposed.clone(),
                confirmed,
                local: local_ref.clone(),
                buffer: Mutex::new(VecDeque::new()),
            }),
        };
        let confirmer = tokio::spawn(confirm(proxy.clone(), status_name, location, confirmed_tx));
        // A leave hands the instance here over before it is announced (it finishes what it
        // holds and stops): the next oldest starts it once it sees this member removed, by
        // which time it has stopped.
        let (leaving, leaving_node, leaving_name, leaving_flag) = (
            Arc::downgrade(&local_ref),
            node.clone(),
            exposed.clone(),
            hosting_flag.clone(),
        );
        cluster.on_leave(Box::new(move || {
            let (hosted, node, exposed) = (
                leaving.upgrade(),
                leaving_node.clone(),
                leaving_name.clone(),
            );
            leaving_flag.store(false, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                let actor = hosted.and_then(|hosted| hosted.lock().take());
                if let Some(actor) = actor {
                    hand_over(&node, &exposed, &actor, LEAVE_STOP_WAIT).await;
                }
            })
        }));
        let mut gate = SingletonGate::new(cluster.self_member().id, role, config);
        let mut events = cluster.events();
        let (system, node, flush) = (system.clone(), node.clone(), proxy.clone());
        let hosted = local_ref.clone();
        let task = tokio::spawn(async move {
            let mut ended = false;
            while !ended {
                let deadline = gate.poll_timeout().map(tokio::time::Instant::from_std);
                let change = tokio::select! {
                    event = events.next() => match event {
                        Some(event) => {
                            // One publish's events together: a member that just joined
                            // learns of the older members with its own Up.
                            // The runtime's clock (simulated time under a simulation).
                            let now = tokio::time::Instant::now().into_std();
                            gate.apply(&event, now);
                            tokio::task::yield_now().await;
                            while let Ok(next) = tokio::time::timeout(Duration::ZERO, events.next()).await {
                                match next {
                                    Some(event) => gate.apply(&event, now),
                                    None => {
                                        ended = true;
                                        break;
                                    }
                                }
                            }
                            gate.decide(now)
                        }
                        // This member stopped: stop hosting.
                        None => {
                            ended = true;
                            None
                        }
                    },
                    () = sleep_until(deadline) => gate.on_timeout(tokio::time::Instant::now().into_std()),
                };
                match change {
                    Some(SingletonChange::Start) => match system.spawn(factory()) {
                        Ok(actor) => {
                            if let Err(e) = node.expose(&exposed, &actor) {
                                tracing::warn!(error = %e, "exposing the singleton");
                            }
                            tracing::info!(singleton = %exposed, "singleton started here");
                            *hosted.lock() = Some(actor);
                            hosting_flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(e) => tracing::warn!(error = %e, "spawning the singleton"),
                    },
                    Some(SingletonChange::Stop) => {
                        hosting_flag.store(false, std::sync::atomic::Ordering::SeqCst);
                        stop_local(&node, &exposed, &hosted).await;
                    }
                    None => {}
                }
                location_tx.send_replace(gate.location().map(|m| m.address.clone()));
                flush.flush();
            }
            // This member stopped (left, downed, dropped): stop hosting.
            hosting_flag.store(false, std::sync::atomic::Ordering::SeqCst);
            stop_local(&node, &exposed, &hosted).await;
            location_tx.send_replace(None);
        });
        Self {
            proxy,
            cluster: cluster.clone(),
            task,
            confirmer,
            local: local_ref,
        }
    }

    /// A proxy that sends to the singleton wherever it is.
    pub fn proxy(&self) -> SingletonProxy<A> {
        self.proxy.clone()
    }

    /// Whether the singleton runs on this member now.
    pub fn is_hosting(&self) -> bool {
        self.local.lock().is_some()
    }

    /// Hands over and leaves the cluster: the instance here takes no more messages, handles
    /// those its mailbox already holds and stops (all within `timeout`), then this member
    /// leaves; the next oldest member starts it once it sees this member removed, so the two
    /// never run at once.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: dropped after the first poll, the instance here has stopped taking
    /// messages (its host task is ended) but may not have handed over, and the member may not
    /// have left; the singleton is then restarted elsewhere only once this member is downed.
    /// Let it finish; `timeout` bounds it.
    pub async fn leave(self, timeout: Duration) {
        self.task.abort();
        self.confirmer.abort();
        let actor = self.local.lock().take();
        if let Some(actor) = actor {
            hand_over(
                &self.proxy.inner.node,
                &self.proxy.inner.name,
                &actor,
                timeout,
            )
            .await;
        }
        let _ = self.cluster.leave().await;
    }
}

/// Confirms where the singleton runs: a remote host once it answers that it runs it (asked
/// every [`CONFIRM_PERIOD`]), this member at once (the proxy then waits for the local
/// instance); then flushes what the proxy kept.
async fn confirm<A: RemoteActor>(
    proxy: SingletonProxy<A>,
    status_name: String,
    mut location: watch::Receiver<Option<NodeAddress>>,
    confirmed: watch::Sender<Option<NodeAddress>>,
) {
    loop {
        let current = location.borrow_and_update().clone();
        confirmed.send_replace(None);
        if let Some(host) = current {
            if host == *proxy.inner.node.address() {
                confirmed.send_replace(Some(host));
                proxy.flush();
            } else {
                let status = proxy.inner.node.lookup::<Status>(&host, &status_name);
                loop {
                    if let Ok(true) = status.ask(IsHosting, CONFIRM_PERIOD * 4).await {
                        confirmed.send_replace(Some(host));
                        proxy.flush();
                        break;
                    }
                    if location.has_changed().unwrap_or(true) {
                        break;
                    }
                    tokio::time::sleep(CONFIRM_PERIOD).await;
                }
            }
        }
        if location.changed().await.is_err() {
            return;
        }
    }
}

async fn stop_local<A: RemoteActor>(
    node: &RemoteNode,
    exposed: &str,
    hosted: &Mutex<Option<ActorRef<A>>>,
) {
    let actor = hosted.lock().take();
    if let Some(actor) = actor {
        node.unexpose(exposed);
        actor.stop();
        wait_stopped(&actor).await;
        tracing::info!(singleton = %exposed, "singleton stopped here");
    }
}

/// A graceful handover of the instance here (this member leaves): it takes no more messages,
/// handles what its mailbox holds (the proxies sent those before they knew of the move), then
/// stops; all within `within`, after which it is stopped with whatever is left. (A member
/// that must stop hosting because it is downed or an older member appeared stops at once,
/// through [`stop_local`]: the takeover margin does not wait for a queue.)
async fn hand_over<A: RemoteActor>(
    node: &RemoteNode,
    exposed: &str,
    actor: &ActorRef<A>,
    within: Duration,
) {
    node.unexpose(exposed);
    let deadline = tokio::time::Instant::now() + within;
    let drained = tokio::time::timeout_at(deadline, async {
        while actor.load().is_some_and(|load| load > 0) && !actor.is_stopped() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    actor.stop();
    let stopped = tokio::time::timeout_at(deadline, wait_stopped(actor)).await;
    if drained.is_err() || stopped.is_err() {
        tracing::warn!(
            singleton = %exposed,
            "the singleton did not finish its messages and stop within {within:?} of the handover"
        );
    } else {
        tracing::info!(singleton = %exposed, "singleton handed over from here");
    }
}

/// Waits until `actor` has stopped (it was told to).
async fn wait_stopped<A: rally_actor::Actor>(actor: &ActorRef<A>) {
    while !actor.is_stopped() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

type Pending<A> = Box<dyn FnOnce(&ActorRef<A>) + Send>;

struct ProxyInner<A: RemoteActor> {
    node: RemoteNode,
    name: String,
    confirmed: watch::Receiver<Option<NodeAddress>>,
    local: Arc<Mutex<Option<ActorRef<A>>>>,
    buffer: Mutex<VecDeque<Pending<A>>>,
}

/// Sends to a cluster singleton wherever it runs; while it moves (no member may host it yet),
/// messages wait in the proxy, in order, and go out as soon as it has a place.
///
/// See [`ClusterSingleton`] for an example.
pub struct SingletonProxy<A: RemoteActor> {
    inner: Arc<ProxyInner<A>>,
}

impl<A: RemoteActor> Clone for SingletonProxy<A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<A: RemoteActor> std::fmt::Debug for SingletonProxy<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingletonProxy")
            .field("name", &self.inner.name)
            .field("location", &self.location())
            .finish_non_exhaustive()
    }
}

impl<A: RemoteActor> std::fmt::Debug for ClusterSingleton<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSingleton")
            .field("proxy", &self.proxy)
            .field("hosting", &self.is_hosting())
            .finish_non_exhaustive()
    }
}

/// Why a proxy refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The singleton has been moving for so long that the proxy's buffer is full.
    #[error("the singleton proxy's buffer is full ({PROXY_BUFFER} messages) while it moves")]
    BufferFull,
}

impl<A: RemoteActor> SingletonProxy<A> {
    /// Sends `msg` to the singleton, or keeps it until the singleton has a place.
    ///
    /// # Errors
    ///
    /// [`ProxyError::BufferFull`] if the singleton has no place and the buffer is full.
    pub fn tell<M>(&self, msg: M) -> Result<(), ProxyError>
    where
        M: RemoteMessage,
        A: Handler<M>,
    {
        let mut buffer = self.inner.buffer.lock();
        if buffer.is_empty()
            && let Some(target) = self.target()
        {
            let _ = target.tell(msg);
            return Ok(());
        }
        if buffer.len() >= PROXY_BUFFER {
            return Err(ProxyError::BufferFull);
        }
        buffer.push_back(Box::new(move |target: &ActorRef<A>| {
            let _ = target.tell(msg);
        }));
        drop(buffer);
        self.flush();
        Ok(())
    }

    /// Messages waiting for the singleton to have a place.
    pub fn buffered(&self) -> usize {
        self.inner.buffer.lock().len()
    }

    /// Where the singleton runs, as this member sees it: the host its gate elected, once that
    /// host answered that it runs it (`None` while it moves).
    pub fn location(&self) -> Option<NodeAddress> {
        self.inner.confirmed.borrow().clone()
    }

    fn target(&self) -> Option<ActorRef<A>> {
        let location = self.location()?;
        if location == *self.inner.node.address() {
            // Here: only once the instance runs (it starts right after the gate opens).
            return self.inner.local.lock().clone();
        }
        Some(self.inner.node.lookup::<A>(&location, &self.inner.name))
    }

    fn flush(&self) {
        let mut buffer = self.inner.buffer.lock();
        if buffer.is_empty() {
            return;
        }
        if let Some(target) = self.target() {
            for pending in buffer.drain(..) {
                pending(&target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rally_remote::{Incarnation, NodeAddress};

    use super::*;

    fn id(port: u16) -> MemberId {
        MemberId::new(
            NodeAddress {
                system: "c".into(),
                host: "h".into(),
                port,
            },
            Incarnation(1),
            u64::from(port),
        )
    }

    /// A gate that saw `up` come up `stable-after` before `now` (so it may host at `now`).
    fn gate(local: u16, up: &[u16], now: Instant) -> SingletonGate {
        let mut gate = SingletonGate::new(id(local), None, ClusterConfig::default());
        let before = now - ClusterConfig::default().stable_after;
        for &p in up {
            gate.on_event(&MemberEvent::Joined(id(p)), before);
            gate.on_event(&MemberEvent::Up(id(p)), before);
        }
        gate.decide(now);
        gate
    }

    #[test]
    fn a_member_hosts_only_once_up_for_stable_after() {
        // Members started at once: 2 comes up with 3 and no word of 1 yet; it does not host at
        // once, and when 1 (older) turns up within stable-after, 2 never hosts at all.
        let now = Instant::now();
        let stable = ClusterConfig::default().stable_after;
        let mut g = SingletonGate::new(id(2), None, ClusterConfig::default());
        g.on_event(&MemberEvent::Up(id(3)), now);
        assert_eq!(g.on_event(&MemberEvent::Up(id(2)), now), None);
        assert_eq!(g.poll_timeout(), Some(now + stable));
        let soon = now + stable / 2;
        assert_eq!(g.on_timeout(soon), None);
        assert_eq!(g.on_event(&MemberEvent::Up(id(1)), soon), None);
        assert_eq!(g.on_timeout(now + stable), None, "1 is older");
        assert_eq!(g.poll_timeout(), None);
        assert!(!g.is_hosting());
        // Alone, it hosts once up for stable-after.
        let mut g = SingletonGate::new(id(2), None, ClusterConfig::default());
        assert_eq!(g.on_event(&MemberEvent::Up(id(2)), now), None);
        assert_eq!(g.on_timeout(now + stable), Some(SingletonChange::Start));
        // A younger host stops at once when an older member comes up (which waits).
        assert_eq!(
            g.on_event(&MemberEvent::Up(id(1)), now + stable * 2),
            Some(SingletonChange::Stop)
        );
    }

    #[test]
    fn the_oldest_up_member_hosts_and_a_joining_older_one_blocks() {
        let now = Instant::now();
        let mut g = SingletonGate::new(id(2), None, ClusterConfig::default());
        g.on_event(&MemberEvent::Joined(id(1)), now);
        assert_eq!(g.on_event(&MemberEvent::Up(id(2)), now), None);
        assert_eq!(g.location(), None, "1 is older but not yet up");
        assert_eq!(g.on_event(&MemberEvent::Up(id(1)), now), None);
        assert_eq!(g.location(), Some(&id(1)));
        let mut g = gate(1, &[1, 2, 3], now);
        assert!(g.is_hosting());
        assert_eq!(g.on_event(&MemberEvent::Unreachable(id(2)), now), None);
    }

    #[test]
    fn a_leaving_oldest_hands_over_only_once_removed() {
        let now = Instant::now();
        let mut g = gate(2, &[1, 2, 3], now);
        assert!(!g.is_hosting());
        assert_eq!(g.on_event(&MemberEvent::Leaving(id(1)), now), None);
        assert_eq!(g.location(), None);
        assert_eq!(
            g.on_event(&MemberEvent::Removed(id(1)), now),
            Some(SingletonChange::Start)
        );
        // The host leaving itself stops at once and never hosts again.
        assert_eq!(
            g.on_event(&MemberEvent::Leaving(id(2)), now),
            Some(SingletonChange::Stop)
        );
        assert_eq!(g.on_event(&MemberEvent::Removed(id(2)), now), None);
    }

    #[test]
    fn an_unreachable_oldest_keeps_it_until_downed_plus_the_margin() {
        let now = Instant::now();
        let mut g = gate(2, &[1, 2, 3], now);
        g.on_event(&MemberEvent::Unreachable(id(1)), now);
        assert_eq!(g.location(), Some(&id(1)));
        let later = now + Duration::from_secs(6);
        g.on_event(&MemberEvent::Down(id(1)), later);
        g.on_event(&MemberEvent::Removed(id(1)), later);
        let margin = ClusterConfig::default().takeover_margin(3);
        assert_eq!(g.poll_timeout(), Some(later + margin));
        assert_eq!(
            g.on_timeout(later + margin - Duration::from_millis(1)),
            None
        );
        assert_eq!(g.on_timeout(later + margin), Some(SingletonChange::Start));
    }

    #[test]
    fn a_downed_host_stops_and_a_role_limits_who_hosts() {
        let now = Instant::now();
        let mut g = gate(1, &[1, 2], now);
        assert!(g.is_hosting());
        assert_eq!(
            g.on_event(&MemberEvent::Down(id(1)), now),
            Some(SingletonChange::Stop)
        );
        let worker = |p| id(p).with_roles(["worker"]);
        let mut g = SingletonGate::new(worker(3), Some("worker".into()), ClusterConfig::default());
        for m in [id(1), id(2), worker(3)] {
            g.on_event(&MemberEvent::Up(m), now);
        }
        g.on_timeout(now + ClusterConfig::default().stable_after);
        assert!(g.is_hosting(), "1 and 2 are older but not workers");
        assert_eq!(g.location(), Some(&worker(3)));
    }
}
