//! The cluster as a member's application sees it.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rally_actor::ActorSystem;
use rally_remote::RemoteNode;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::config::{ClusterConfig, ClusterConfigError};
use crate::member::{Member, MemberEvent, MemberId, MemberStatus};
use crate::membership::MembershipStats;
use crate::provider::{
    Command, GossipProvider, Provider, ProviderContext, ProviderStartError, Shared,
};
use crate::virtual_actors::Runtime as GrainsInner;
use crate::virtual_actors::{GetError, GrainRef, VirtualActor, VirtualActors};
use rally_actor::sync::Mutex;

mod ready;
mod shutdown;

use ready::SeedRefusals;
pub use ready::UpError;
pub use shutdown::{ShutdownError, ShutdownPhase};

/// Why a member could not join.
///
/// # Example
///
/// ```
/// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
/// use rally::cluster::{Cluster, ClusterConfig, JoinError, MemberId};
/// use rally::remote::Incarnation;
///
/// # #[tokio::main] async fn main() {
/// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
/// let mut config = ClusterConfig::default();
/// config.max_members = 1;
/// let refused = Cluster::join_with(me, config, MemoryProvider::new(&MemoryNetwork::new()));
/// assert!(matches!(refused, Err(JoinError::Config(_))));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The configuration is out of range.
    #[error("invalid cluster configuration: {0}")]
    Config(#[from] ClusterConfigError),
    /// The provider could not start.
    #[error(transparent)]
    Provider(#[from] ProviderStartError),
}

/// Why a member could not be downed.
///
/// # Example
///
/// ```
/// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
/// use rally::cluster::{Cluster, ClusterConfig, DownError, MemberId};
/// use rally::remote::Incarnation;
///
/// # #[tokio::main] async fn main() {
/// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
/// let cluster = Cluster::join_with(me.clone(), ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
/// cluster.leave().await.unwrap();
/// assert_eq!(cluster.down(&me), Err(DownError::NotInCluster));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DownError {
    /// This member is no longer in the cluster (it left or was downed).
    #[error("this member is no longer in the cluster")]
    NotInCluster,
}

/// Why a leave did not run.
///
/// # Example
///
/// ```
/// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
/// use rally::cluster::{Cluster, ClusterConfig, LeaveError, MemberId};
/// use rally::remote::Incarnation;
///
/// # #[tokio::main] async fn main() {
/// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
/// let cluster = Cluster::join_with(me.clone(), ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
/// cluster.leave().await.unwrap();
/// assert_eq!(cluster.leave().await, Err(LeaveError::NotInCluster));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaveError {
    /// This member is no longer in the cluster (it left or was downed).
    #[error("this member is no longer in the cluster")]
    NotInCluster,
}

/// This member of a cluster: its view of the members, their events, and leave/down.
///
/// Cloning gives another handle to the same member. Dropping every handle without
/// [`leave`](Self::leave) stops the member at once, as a crash would: the others find it
/// unreachable and down it.
///
/// # Example
///
/// ```no_run
/// use rally::ActorSystem;
/// use rally::cluster::{Cluster, ClusterConfig, MemberEvent};
/// use rally::remote::{RemoteConfig, RemoteNode};
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("shop");
/// let remote = RemoteConfig::builder().listen("127.0.0.1", 2552).secret(b"cluster secret".to_vec()).build().unwrap();
/// let node = RemoteNode::start(&system, remote).await.unwrap();
/// let config = ClusterConfig::builder()
///     .seed("rally://shop@127.0.0.1:2552".parse().unwrap())
///     .build()
///     .unwrap();
/// let cluster = Cluster::join(&system, &node, config).unwrap();
/// let mut events = cluster.events();
/// while let Some(event) = events.next().await {
///     if let MemberEvent::Up(member) = event {
///         println!("{member} is up; members: {}", cluster.members().len());
///     }
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    config: Arc<ClusterConfig>,
    /// This member's virtual-actor runtime, once started (weak: the runtime holds the
    /// cluster's event stream; it stops when the member leaves or is downed).
    grains: Arc<Mutex<Weak<GrainsInner>>>,
    /// Hand-overs [`leave`](Self::leave) runs before it tells anyone: each stops something
    /// this member runs that another member must not start before it has stopped (a
    /// singleton's instance).
    leave_hooks: Arc<Mutex<Vec<LeaveHook>>>,
    /// The seeds that refused this node ([`wait_until_up`](Self::wait_until_up)).
    refusals: SeedRefusals,
    /// The node and the actor system this member runs on, when it was joined with them:
    /// [`shutdown`](Self::shutdown) stops them last.
    node: Option<RemoteNode>,
    system: Option<ActorSystem>,
}

/// A hand-over run by [`Cluster::leave`] before the leave is announced.
pub(crate) type LeaveHook =
    Box<dyn Fn() -> Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

impl Cluster {
    /// Joins (or founds) the cluster named by the node's system name, through
    /// `config.seeds`, with SWIM gossip over the node's connections ([`GossipProvider`]).
    /// Returns at once; [`events`](Self::events) reports when this member is up. Member
    /// events are also published on `system`'s event stream.
    ///
    /// # Errors
    ///
    /// [`JoinError::Config`] for an invalid configuration; [`JoinError::Provider`] if a
    /// member already runs on this node or the actor system is shutting down.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn join(
        system: &ActorSystem,
        node: &RemoteNode,
        config: ClusterConfig,
    ) -> Result<Self, JoinError> {
        Self::join_using(system, node, config, GossipProvider::new(system, node))
    }

    /// Joins like [`join`](Self::join) (this node's identity, the roles and kinds of
    /// `config`, events on `system`'s event stream) with another [`Provider`], for example
    /// the etcd provider.
    ///
    /// # Errors
    ///
    /// As [`join`](Self::join); [`JoinError::Provider`] if the provider refuses the
    /// configuration (its downing strategy).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn join_using(
        system: &ActorSystem,
        node: &RemoteNode,
        config: ClusterConfig,
        provider: impl Provider,
    ) -> Result<Self, JoinError> {
        let local = Self::member_id(node).declaring(&config);
        // Before the provider dials the seeds: no refusal is missed.
        let refusals = SeedRefusals::watch(node, &config.seeds);
        // The others send to a member that hosts kinds once they see it up, which can be
        // before its virtual actors start: the tells that come meanwhile wait for them.
        if !config.kinds.is_empty() {
            node.hold_grain_tells();
        }
        let mut cluster = Self::join_as(system, local, config, provider)?;
        cluster.refusals = refusals;
        cluster.node = Some(node.clone());
        Ok(cluster)
    }

    /// Joins as `local` (whose roles and kinds are the ones it declares; `config.roles` and
    /// `config.kinds` are not read) with any [`Provider`], its events published on `system`'s
    /// event stream and its membership figures on `system`'s monitor (so a metrics endpoint
    /// exports them), as [`join`](Self::join) does. For an identity chosen by the caller:
    /// `rally::sim::join` takes the generation from the simulated clock, for example.
    ///
    /// # Errors
    ///
    /// As [`join`](Self::join).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::ActorSystem;
    /// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// use rally::cluster::{Cluster, ClusterConfig, MemberId};
    /// use rally::remote::Incarnation;
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("c");
    /// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
    /// let provider = MemoryProvider::new(&MemoryNetwork::new());
    /// let cluster = Cluster::join_as(&system, me, ClusterConfig::default(), provider).unwrap();
    /// let figures = system.monitor().snapshot().figures;
    /// assert!(figures.iter().any(|f| f.name == "rally_cluster_members"));
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn join_as(
        system: &ActorSystem,
        local: MemberId,
        config: ClusterConfig,
        provider: impl Provider,
    ) -> Result<Self, JoinError> {
        Self::start(local, config, provider, Some(system.clone()))
    }

    /// Joins as `local` (whose roles and kinds are the ones it declares; `config.roles` and
    /// `config.kinds` are not read)
    /// with any [`Provider`]. With no actor system, its events go only to its own streams and
    /// its membership figures only to [`stats`](Self::stats), not to a metrics endpoint:
    /// [`join_as`](Self::join_as) takes a system for them.
    ///
    /// # Errors
    ///
    /// As [`join`](Self::join).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn join_with(
        local: MemberId,
        config: ClusterConfig,
        provider: impl Provider,
    ) -> Result<Self, JoinError> {
        Self::start(local, config, provider, None)
    }

    fn start(
        local: MemberId,
        config: ClusterConfig,
        provider: impl Provider,
        system: Option<ActorSystem>,
    ) -> Result<Self, JoinError> {
        config.validate()?;
        let observer = system.clone();
        let shared = Shared::new(
            Member::new(local.clone(), MemberStatus::Joining, true),
            system,
            config.when_downed,
        );
        if let Some(system) = &observer {
            crate::figures::register(system, &shared);
        }
        let (commands, receiver) = mpsc::unbounded_channel();
        let task = Box::new(provider).start(ProviderContext {
            local,
            config: config.clone(),
            publisher: shared.publisher(),
            commands: receiver,
        })?;
        tokio::spawn(task);
        Ok(Self {
            shared,
            commands,
            config: Arc::new(config),
            grains: Arc::new(Mutex::new(Weak::new())),
            leave_hooks: Arc::default(),
            refusals: SeedRefusals::none(),
            node: None,
            system: observer,
        })
    }

    /// The identity a node joins with: its address and incarnation, and now as its generation.
    pub fn member_id(node: &RemoteNode) -> MemberId {
        let unique = node.unique_address();
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        MemberId::new(
            unique.address.clone(),
            unique.incarnation,
            generation.max(1),
        )
    }

    /// The configuration this member joined with.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::{Cluster, ClusterConfig, MemberId};
    /// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// use rally::remote::Incarnation;
    ///
    /// # #[tokio::main] async fn main() {
    /// let me = MemberId::new("rally://doc@mem:1".parse().unwrap(), Incarnation(1), 1);
    /// let config = ClusterConfig::default();
    /// let cluster = Cluster::join_with(me, config.clone(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
    /// assert_eq!(cluster.config().stable_after, config.stable_after);
    /// # }
    /// ```
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// A ref to the virtual actor `identity` of kind `K`, wherever it is (or will be) active:
    /// the same as [`VirtualActors::get`] on this member's virtual-actor runtime.
    ///
    /// # Errors
    ///
    /// [`GetError::NotStarted`] before this member's runtime is started
    /// ([`VirtualActors::builder`]);
    /// [`GetError::InvalidIdentity`] for an empty or too long identity.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::{Cluster, ClusterConfig, MemberId};
    /// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// use rally::cluster::virtual_actors::{
    ///     Activation, GetError, GrainMessages, GrainNetwork, VirtualActor, VirtualActors,
    /// };
    /// use rally::remote::Incarnation;
    /// use rally::{Actor, ActorResult, ActorSystem};
    ///
    /// struct Cart;
    /// impl Actor for Cart {}
    /// impl VirtualActor for Cart {
    ///     const KIND: &'static str = "cart";
    ///     async fn activate(_: Activation) -> ActorResult<Self> { Ok(Cart) }
    ///     fn messages(_: &mut GrainMessages<Self>) {}
    /// }
    ///
    /// # #[tokio::main] async fn main() {
    /// let me = MemberId::new("rally://doc@mem:1".parse().unwrap(), Incarnation(1), 1);
    /// let cluster = Cluster::join_with(me, ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
    /// assert!(matches!(cluster.get::<Cart>("user-42"), Err(GetError::NotStarted)));
    /// let system = ActorSystem::new("doc");
    /// let grains = VirtualActors::builder(&cluster, &system).start_in_memory(&GrainNetwork::new()).unwrap();
    /// let cart = cluster.get::<Cart>("user-42").unwrap();
    /// assert_eq!(cart.identity(), "user-42");
    /// # drop(grains);
    /// # }
    /// ```
    pub fn get<K: VirtualActor>(&self, identity: &str) -> Result<GrainRef<K>, GetError> {
        let inner = self.grains.lock().upgrade();
        inner
            .map(VirtualActors::from_runtime)
            .ok_or(GetError::NotStarted)?
            .get(identity)
    }

    /// This member's virtual-actor runtime, once started (and until it stops): its figures
    /// and listings, for an observer that is handed the cluster alone.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::{Cluster, ClusterConfig, MemberId};
    /// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// use rally::remote::Incarnation;
    ///
    /// # #[tokio::main] async fn main() {
    /// let me = MemberId::new("rally://doc@mem:1".parse().unwrap(), Incarnation(1), 1);
    /// let cluster = Cluster::join_with(me, ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
    /// assert!(cluster.virtual_actors().is_none(), "not started");
    /// # }
    /// ```
    pub fn virtual_actors(&self) -> Option<VirtualActors> {
        self.grains
            .lock()
            .upgrade()
            .map(VirtualActors::from_runtime)
    }

    /// Records this member's virtual-actor runtime; false if one is already running.
    pub(crate) fn attach_grains(&self, inner: &Arc<GrainsInner>) -> bool {
        let mut grains = self.grains.lock();
        if grains.strong_count() > 0 {
            return false;
        }
        *grains = Arc::downgrade(inner);
        true
    }

    /// Resolves once this member was downed by the cluster (at once if it was already): it
    /// hosts nothing any more and is never admitted again; only a new process joins. What
    /// happens next is `when-downed` ([`WhenDowned`](crate::WhenDowned)): by default the
    /// process exits a moment later; with `stop` it goes on, and this is where it decides.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: waiting changes nothing.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(cluster: rally::cluster::Cluster) {
    /// cluster.downed().await;
    /// eprintln!("downed: restarting as a new member");
    /// # }
    /// ```
    pub async fn downed(&self) {
        let mut downed = self.shared.downed.subscribe();
        let _ = downed.wait_for(|downed| *downed).await;
    }

    /// This member as it sees itself.
    pub fn self_member(&self) -> Member {
        self.shared.state().local.clone()
    }

    /// Every member this member knows, itself included, oldest first (down members until
    /// they are removed). Empty until the provider's first report, which it makes as soon as
    /// it starts.
    pub fn members(&self) -> Vec<Member> {
        self.shared.state().members.clone()
    }

    /// The membership figures (packets, drops by reason, decisions).
    pub fn stats(&self) -> MembershipStats {
        self.shared.state().stats
    }

    /// Member events from now on, starting with the current view as events (each known
    /// member's `Joined`, then `Up`, `Unreachable`, `Leaving` or `Down` as it stands), so a
    /// subscriber misses nothing between the view and the stream.
    pub fn events(&self) -> MemberEvents {
        let (state, receiver) = self.shared.subscribe();
        let mut initial = Vec::new();
        for member in &state.members {
            let id = &member.id;
            initial.push(MemberEvent::Joined(id.clone()));
            match member.status {
                MemberStatus::Up => initial.push(MemberEvent::Up(id.clone())),
                MemberStatus::Leaving => initial.push(MemberEvent::Leaving(id.clone())),
                MemberStatus::Down => initial.push(MemberEvent::Down(id.clone())),
                _ => {}
            }
            if !member.reachable && member.is_serving() {
                initial.push(MemberEvent::Unreachable(id.clone()));
            }
        }
        initial.reverse();
        MemberEvents {
            initial,
            live: BroadcastStream::new(receiver),
            missed: 0,
        }
    }

    /// Declares `member` down: it is out of the cluster for good (a restart joins as a new
    /// member). Downing this member itself stops it.
    ///
    /// # Errors
    ///
    /// [`DownError::NotInCluster`] if this member has left or was downed.
    pub fn down(&self, member: &MemberId) -> Result<(), DownError> {
        self.commands
            .send(Command::Down(member.clone()))
            .map_err(|_| DownError::NotInCluster)
    }

    /// Leaves gracefully: first hands over what may run on one member only (a cluster
    /// singleton's instance here is stopped, so the next member cannot start it while this one
    /// still runs it), then tells every member it is leaving, then that it is gone; the others
    /// report it `Leaving`, then `Removed` (never `Down`). With the gossip and in-memory
    /// providers it declares itself gone only once every member has acknowledged the leave (or
    /// after `stable-after`, for a member that cannot hear it). Returns when the last packets
    /// are handed to the transport.
    ///
    /// # Errors
    ///
    /// [`LeaveError::NotInCluster`] if this member has already left or was downed.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the wait does not cancel the leave.
    pub async fn leave(&self) -> Result<(), LeaveError> {
        let hand_overs: Vec<_> = self.leave_hooks.lock().iter().map(|hook| hook()).collect();
        for hand_over in hand_overs {
            hand_over.await;
        }
        let (done, wait) = oneshot::channel();
        self.commands
            .send(Command::Leave(done))
            .map_err(|_| LeaveError::NotInCluster)?;
        wait.await.map_err(|_| LeaveError::NotInCluster)
    }

    /// Waits until this member is up (the others have admitted it: it may host and be sent
    /// to), at most `timeout`. Returns at once if it is up already. Fails as soon as every
    /// seed has refused this node for a reason retrying cannot fix (another secret, cluster
    /// name or protocol version: the cause the node logs), instead of waiting out the time.
    ///
    /// # Errors
    ///
    /// [`UpError::Refused`] (every seed refused this node), [`UpError::Timeout`],
    /// [`UpError::Stopped`] (this member left or was downed first).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: waiting changes nothing.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// use rally::cluster::{Cluster, ClusterConfig, MemberId, MemberStatus};
    /// use rally::remote::Incarnation;
    ///
    /// # #[tokio::main] async fn main() {
    /// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
    /// let cluster = Cluster::join_with(me, ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
    /// cluster.wait_until_up(Duration::from_secs(10)).await.unwrap();
    /// assert_eq!(cluster.self_member().status, MemberStatus::Up);
    /// # }
    /// ```
    pub async fn wait_until_up(&self, timeout: Duration) -> Result<(), UpError> {
        let me = self.self_member().id;
        let mut events = self.events();
        let mut refusals = self.refusals.clone();
        let start = tokio::time::Instant::now();
        let deadline = start.checked_add(timeout).unwrap_or(start + FOREVER);
        loop {
            if self.self_member().status == MemberStatus::Up {
                return Ok(());
            }
            if let Some((seed, reason)) = refusals.all_refused() {
                return Err(UpError::Refused { seed, reason });
            }
            tokio::select! {
                event = events.next() => match event {
                    Some(MemberEvent::Up(member)) if member == me => return Ok(()),
                    Some(_) => {}
                    None => return Err(UpError::Stopped),
                },
                () = refusals.changed() => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(UpError::Timeout {
                        waited: timeout,
                        status: self.self_member().status,
                    });
                }
            }
        }
    }

    /// Stops this member, gracefully, in one call bounded by `timeout`, in these phases
    /// ([`ShutdownPhase`]): leave the cluster (singletons here hand over, the others stop
    /// routing here, virtual actors' identities move), wait until the others have removed
    /// it, stop hosting virtual actors (each activation finishes its message and runs its
    /// `stopped` hook; answers passed on through here get back), close the node's
    /// connections (waiting at most 2 s for what is queued on them), stop the actor system.
    /// The node and the system are those of
    /// [`join`](Self::join) / [`join_using`](Self::join_using) ([`join_as`](Self::join_as)
    /// has no node; [`join_with`](Self::join_with) neither). A phase is skipped when there is
    /// nothing to do (already left, no virtual actors).
    ///
    /// Every phase runs, each within what is left of `timeout` (the node and the system get at
    /// least 200 ms even past it): a slow phase does not keep the member from stopping. What
    /// a member holds in memory and has not written is lost; see `docs/cluster.md`.
    ///
    /// # Errors
    ///
    /// [`ShutdownError::Overran`]: the first phase that had not finished within `timeout`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropping the future stops the phases where they are (the leave, once
    /// announced, goes on).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// use rally::cluster::{Cluster, ClusterConfig, MemberId};
    /// use rally::remote::Incarnation;
    ///
    /// # #[tokio::main] async fn main() {
    /// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
    /// let cluster = Cluster::join_with(me, ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
    /// cluster.wait_until_up(Duration::from_secs(10)).await.unwrap();
    /// cluster.shutdown(Duration::from_secs(10)).await.unwrap();
    /// assert!(cluster.leave().await.is_err(), "it has left already");
    /// # }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), ShutdownError> {
        let start = tokio::time::Instant::now();
        let deadline = start.checked_add(timeout).unwrap_or(start + FOREVER);
        let mut overran = None;
        let mut bounded = async |phase: ShutdownPhase, at_least: Duration, work| {
            let until = deadline.max(tokio::time::Instant::now() + at_least);
            if tokio::time::timeout_at(until, work).await.is_err() {
                tracing::warn!(%phase, ?timeout, "shutdown: a phase overran its bound; going on");
                overran.get_or_insert(ShutdownError::Overran {
                    phase,
                    after: until - start,
                });
            }
        };
        // Subscribed before the leave: the stream ends once this member is removed.
        let mut events = self.events();
        let leave: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> =
            Box::pin(async {
                // Already left or downed: nothing to announce.
                let _ = self.leave().await;
            });
        bounded(ShutdownPhase::Leave, Duration::ZERO, leave).await;
        let removed = Box::pin(async move { while events.next().await.is_some() {} });
        bounded(ShutdownPhase::Removed, Duration::ZERO, removed).await;
        let grains = self.grains.lock().upgrade();
        if let Some(grains) = grains.map(VirtualActors::from_runtime) {
            let stop = Box::pin(async move { grains.shutdown().await });
            bounded(ShutdownPhase::VirtualActors, Duration::ZERO, stop).await;
        }
        if let Some(node) = &self.node {
            // `leave` returns once every connection's queue is written, or has no connection
            // to be written to (a member that is gone); the flush time bounds one that takes
            // its bytes slowly (a member that stopped reading), which is not worth the rest of
            // the bound. A member that was downed has nobody left to tell.
            let most = if *self.shared.downed.borrow() {
                shutdown::LAST_PHASES_MIN
            } else {
                shutdown::NODE_FLUSH
            };
            let flush = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .min(most)
                .max(shutdown::LAST_PHASES_MIN);
            node.leave(flush).await;
        }
        if let Some(system) = &self.system {
            let stop = Box::pin(async move {
                let _ = system.shutdown().await;
            });
            bounded(ShutdownPhase::System, shutdown::LAST_PHASES_MIN, stop).await;
        }
        overran.map_or(Ok(()), Err)
    }

    /// Runs [`shutdown`](Self::shutdown) with `timeout` when the process receives SIGTERM
    /// (what `systemctl stop`, `docker stop` and Kubernetes send), then exits the process
    /// with code 0. Opt-in: without it SIGTERM ends the process at once, as the operating
    /// system does by default. Call it once, after joining; on other platforms than Unix it
    /// does nothing.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(cluster: rally::cluster::Cluster) {
    /// use std::time::Duration;
    /// cluster.shutdown_on_sigterm(Duration::from_secs(20));
    /// # }
    /// ```
    pub fn shutdown_on_sigterm(&self, timeout: Duration) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut terms = match signal(SignalKind::terminate()) {
                Ok(terms) => terms,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch for SIGTERM: it ends the process at once");
                    return;
                }
            };
            let cluster = self.clone();
            tokio::spawn(async move {
                if terms.recv().await.is_none() {
                    return;
                }
                tracing::info!(?timeout, "SIGTERM: shutting this member down");
                if let Err(e) = cluster.shutdown(timeout).await {
                    tracing::warn!(error = %e, "SIGTERM: the shutdown overran");
                }
                std::process::exit(0);
            });
        }
        #[cfg(not(unix))]
        let _ = timeout;
    }
}

/// A time so long it stands for "no bound" (a timeout too long to add to the clock).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Member events as an async stream (see [`Cluster::events`]).
///
/// A subscriber that falls more than a few thousand events behind misses the oldest; it can
/// tell from [`missed`](Self::missed) and re-read [`Cluster::members`].
///
/// # Example
///
/// ```
/// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
/// use rally::cluster::{Cluster, ClusterConfig, MemberEvent, MemberId};
/// use rally::remote::Incarnation;
///
/// # #[tokio::main] async fn main() {
/// let me = MemberId::new("rally://c@mem:1".parse().unwrap(), Incarnation(1), 1);
/// let cluster = Cluster::join_with(me.clone(), ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
/// let mut events = cluster.events();
/// assert_eq!(events.next().await, Some(MemberEvent::Joined(me.clone())));
/// assert_eq!(events.next().await, Some(MemberEvent::Up(me.clone())));
/// cluster.leave().await.unwrap();
/// assert_eq!(events.next().await, Some(MemberEvent::Leaving(me.clone())));
/// assert_eq!(events.next().await, Some(MemberEvent::Removed(me)));
/// assert_eq!(events.next().await, None);
/// assert_eq!(events.missed(), 0);
/// # }
/// ```
pub struct MemberEvents {
    initial: Vec<MemberEvent>,
    live: BroadcastStream<MemberEvent>,
    missed: u64,
}

impl MemberEvents {
    /// The next event; `None` once this member has stopped (left, downed, or every
    /// [`Cluster`] handle dropped) and every event was read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an event is never lost to a cancelled call.
    pub async fn next(&mut self) -> Option<MemberEvent> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Events this subscriber missed by falling behind.
    pub fn missed(&self) -> u64 {
        self.missed
    }
}

impl Stream for MemberEvents {
    type Item = MemberEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<MemberEvent>> {
        if let Some(event) = self.initial.pop() {
            return Poll::Ready(Some(event));
        }
        loop {
            match Pin::new(&mut self.live).poll_next(cx) {
                Poll::Ready(Some(Ok(event))) => return Poll::Ready(Some(event)),
                Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => self.missed += n,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Cluster {
    /// Adds a hand-over for [`leave`](Self::leave) to run first.
    pub(crate) fn on_leave(&self, hook: LeaveHook) {
        self.leave_hooks.lock().push(hook);
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("self_member", &self.self_member().id)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for MemberEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberEvents").finish_non_exhaustive()
    }
}
