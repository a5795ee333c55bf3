//! A node: this actor system made reachable from others. The public [`RemoteNode`] and the
//! state its tasks share are here; the tasks are beside it: `accept` (the listener), `lanes`
//! (one per outbound lane: connect, write, reconnect) and `heartbeats`.

mod accept;
mod error;
mod heartbeats;
mod lanes;

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rally_actor::{ActorId, ActorRef, ActorSystem, DeadLetterReason};
use rally_wire::{HandshakeConfig, Incarnation, NodeAddress, Observed, UniqueAddress};
use tokio::sync::{Semaphore, broadcast, watch};

use crate::association::{Association, Ended};
use crate::config::LEAVE_FLUSH_WAIT;
use crate::connection;
use crate::deploy::{KindFactory, Kinds, RemoteSpawnError, SPAWNER, SpawnRequest, Spawner};
use crate::events::{DownReason, PEER_EVENTS_CAPACITY, PeerEvent};
use crate::registry::{Exposed, ExposedActor, MessageTable, RemoteActor};
use crate::remote_ref::RemoteRef;
#[cfg(not(loom))]
use crate::transport::TcpTransport;
use crate::transport::Transport;
use crate::{RemoteConfig, RemoteStats};
pub use error::{ExposeError, NodeStartError};
use rally_actor::sync::{Mutex, RwLock};

/// This actor system, reachable from other nodes.
///
/// # Example
///
/// ```no_run
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
/// use rally::remote::{MessageTable, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Hello(String);
/// impl Message for Hello { type Reply = String; }
/// impl RemoteMessage for Hello { const MANIFEST: &'static str = "example.Hello"; }
///
/// struct Greeter;
/// impl Actor for Greeter {}
/// impl Handler<Hello> for Greeter {
///     async fn handle(&mut self, msg: Hello, _: &mut Context<Self>) -> ActorResult<String> {
///         Ok(format!("Hello {}", msg.0))
///     }
/// }
/// impl RemoteActor for Greeter {
///     fn messages(table: &mut MessageTable<Self>) { table.add::<Hello>(); }
/// }
///
/// # #[tokio::main] async fn main() {
/// let config = || RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
/// let system_b = ActorSystem::new("b");
/// let node_b = RemoteNode::start(&system_b, config()).await.unwrap();
/// node_b.expose("greeter", &system_b.spawn(Greeter).unwrap()).unwrap();
///
/// let system_a = ActorSystem::new("a");
/// let node_a = RemoteNode::start(&system_a, config()).await.unwrap();
/// let greeter = node_a.lookup::<Greeter>(node_b.address(), "greeter");
/// let reply = greeter.ask(Hello("rally".into()), std::time::Duration::from_secs(5)).await;
/// assert_eq!(reply.unwrap(), "Hello rally");
/// # }
/// ```
#[derive(Clone)]
pub struct RemoteNode {
    pub(crate) inner: Arc<NodeInner>,
    _alive: Arc<watch::Sender<bool>>,
}

pub(crate) struct NodeInner {
    pub(crate) system: ActorSystem,
    pub(crate) config: RemoteConfig,
    pub(crate) local: UniqueAddress,
    transport: Arc<dyn Transport>,
    exposed: RwLock<HashMap<String, ExposedEntry>>,
    associations: Mutex<HashMap<NodeAddress, Arc<Association>>>,
    /// Bumped on every expose and unexpose: connections re-resolve their cached recipients.
    exposed_version: AtomicU64,
    /// Slots for connections that have not authenticated yet.
    unauthenticated: Arc<Semaphore>,
    /// Peers whose handshake failures were already logged as warnings (once per peer).
    reported: Mutex<HashSet<String>>,
    tables: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// The manifests of every message type this node has sent to another: a peer's notice
    /// of an undelivered message names its manifest, and its dead letter names it with these.
    sent_manifests: Mutex<HashSet<&'static str>>,
    remote_ids: Mutex<HashMap<String, ActorId>>,
    kinds: Kinds,
    pub(crate) counters: Counters,
    shutdown: watch::Receiver<bool>,
    /// Where peer events go ([`RemoteNode::peer_events`]).
    events: broadcast::Sender<PeerEvent>,
    /// What serves grain requests ([`RemoteNode::serve_grains`]), and a count of its changes
    /// (connections keep the one they found while the count holds).
    grains: RwLock<Option<Weak<dyn crate::grain::GrainService>>>,
    grains_version: AtomicU64,
    /// Grain tells kept until a service is installed ([`RemoteNode::hold_grain_tells`]);
    /// `None` when this node does not hold them.
    held_tells: Mutex<Option<crate::grain::HeldTells>>,
}

struct ExposedEntry {
    exposed: Arc<dyn Exposed>,
    actor: Box<dyn Any + Send + Sync>,
    id: ActorId,
}

/// Unexposes an actor's name when the actor stops.
struct Unexposer {
    id: ActorId,
    name: String,
    actor: ActorId,
    node: Weak<NodeInner>,
}

impl rally_actor::TerminationSink for Unexposer {
    fn watcher(&self) -> ActorId {
        self.id
    }

    fn notify(&self, _terminated: rally_actor::Terminated) {
        if let Some(node) = self.node.upgrade() {
            node.unexpose(&self.name, Some(self.actor));
        }
    }
}

/// Counters behind [`RemoteStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) unknown_manifest: AtomicU64,
    pub(crate) decode_failed: AtomicU64,
    pub(crate) unknown_recipient: AtomicU64,
    pub(crate) undelivered: AtomicU64,
    pub(crate) protocol_errors: AtomicU64,
    pub(crate) handshake_failures: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
    pub(crate) frames_in: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) reads: AtomicU64,
}

impl RemoteNode {
    #[cfg(not(loom))]
    /// Starts listening on the configured address over TCP.
    ///
    /// # Errors
    ///
    /// [`NodeStartError::Config`] without a secret (unless allowed) or for a setting out of
    /// range ([`RemoteConfig::validate`]),
    /// [`NodeStartError::Bind`] if the address cannot be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it returns, nothing is left running (the listener, if
    /// bound, is closed with the future).
    pub async fn start(system: &ActorSystem, config: RemoteConfig) -> Result<Self, NodeStartError> {
        Self::start_with(system, config, Arc::new(TcpTransport)).await
    }

    /// Starts on a given transport (for example [`MemoryTransport`](crate::transport::MemoryTransport)
    /// in tests).
    ///
    /// # Errors
    ///
    /// [`NodeStartError::Config`] without a secret (unless allowed) or for a setting out of
    /// range ([`RemoteConfig::validate`]),
    /// [`NodeStartError::Bind`] if the address cannot be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it returns, nothing is left running (the listener, if
    /// bound, is closed with the future).
    pub async fn start_with(
        system: &ActorSystem,
        config: RemoteConfig,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, NodeStartError> {
        config.validate()?;
        let listener = transport
            .bind(&config.host, config.port)
            .await
            .map_err(|source| NodeStartError::Bind {
                address: format!("{}:{}", config.host, config.port),
                source,
            })?;
        let (host, port) = listener
            .local_addr()
            .map_err(|source| NodeStartError::Bind {
                address: format!("{}:{}", config.host, config.port),
                source,
            })?;
        let local = UniqueAddress {
            address: NodeAddress {
                system: system.name().to_owned(),
                host,
                port,
            },
            incarnation: Incarnation(rand::random()),
        };
        let (alive, shutdown) = watch::channel(false);
        let unauthenticated = Arc::new(Semaphore::new(config.max_unauthenticated_connections));
        let inner = Arc::new(NodeInner {
            system: system.clone(),
            config,
            local,
            transport,
            exposed: RwLock::new(HashMap::new()),
            associations: Mutex::new(HashMap::new()),
            exposed_version: AtomicU64::new(0),
            unauthenticated,
            reported: Mutex::new(HashSet::new()),
            tables: Mutex::new(HashMap::new()),
            sent_manifests: Mutex::new(HashSet::new()),
            remote_ids: Mutex::new(HashMap::new()),
            kinds: RwLock::new(HashMap::new()),
            counters: Counters::default(),
            shutdown,
            events: broadcast::channel(PEER_EVENTS_CAPACITY).0,
            grains: RwLock::new(None),
            grains_version: AtomicU64::new(0),
            held_tells: Mutex::new(None),
        });
        tracing::info!(address = %inner.local.address, "remote node listening");
        // Its figures go to the system's metrics endpoint for as long as it lives.
        let figures: std::sync::Weak<dyn rally_actor::monitor::FigureSource> =
            Arc::downgrade(&inner) as _;
        system.monitor().add_source(figures);
        accept::spawn(listener, &inner);
        tokio::spawn(heartbeats::run(
            Arc::downgrade(&inner),
            inner.shutdown.clone(),
        ));
        let spawner = system
            .spawn(Spawner {
                node: Arc::downgrade(&inner),
            })
            .map_err(NodeStartError::System)?;
        inner
            .expose(SPAWNER, &spawner)
            .expect("the spawner's name is reserved");
        Ok(Self {
            inner,
            _alive: Arc::new(alive),
        })
    }

    /// This node's address, `rally://system@host:port`.
    pub fn address(&self) -> &NodeAddress {
        &self.inner.local.address
    }

    /// This node's address with its incarnation (new on every start).
    pub fn unique_address(&self) -> &UniqueAddress {
        &self.inner.local
    }

    /// The actor system this node makes reachable.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::ActorSystem;
    /// use rally::remote::{RemoteConfig, RemoteNode};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("shop");
    /// let config = RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
    /// let node = RemoteNode::start(&system, config).await.unwrap();
    /// assert_eq!(node.system().name(), "shop");
    /// # }
    /// ```
    pub fn system(&self) -> &ActorSystem {
        &self.inner.system
    }

    /// Subscribes to what happens to peer nodes: connected (authenticated, with its
    /// incarnation), unreachable and reachable again (the phi-accrual failure detector over
    /// the control lane's heartbeats), down (quarantined: left, restarted, broke the protocol,
    /// unreachable for `quarantine_unreachable_after`, or [`quarantine`](Self::quarantine)d),
    /// and refused (a handshake failure that retrying cannot fix).
    ///
    /// The receiver is a [`tokio::sync::broadcast::Receiver`]: every subscriber gets every
    /// event sent after it subscribed, those about one peer in the order they happened.
    /// Subscribe before the node talks to anyone to see every peer's `Connected`. A subscriber
    /// that falls more than 1024 events behind loses the oldest and is told how many
    /// (`RecvError::Lagged`); the node never waits for a subscriber.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
    /// use rally::remote::{MessageTable, PeerEvent, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Ping;
    /// impl Message for Ping { type Reply = (); }
    /// impl RemoteMessage for Ping { const MANIFEST: &'static str = "example.Ping"; }
    /// struct Pong;
    /// impl Actor for Pong {}
    /// impl Handler<Ping> for Pong {
    ///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
    /// }
    /// impl RemoteActor for Pong {
    ///     fn messages(table: &mut MessageTable<Self>) { table.add::<Ping>(); }
    /// }
    ///
    /// # #[tokio::main] async fn main() {
    /// let config = || RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
    /// let a = RemoteNode::start(&ActorSystem::new("a"), config()).await.unwrap();
    /// let b_system = ActorSystem::new("b");
    /// let b = RemoteNode::start(&b_system, config()).await.unwrap();
    /// b.expose("pong", &b_system.spawn(Pong).unwrap()).unwrap();
    ///
    /// let mut events = a.peer_events();
    /// let pong = a.lookup::<Pong>(b.address(), "pong");
    /// pong.ask(Ping, std::time::Duration::from_secs(5)).await.unwrap();
    /// assert_eq!(events.recv().await.unwrap(), PeerEvent::Connected(b.unique_address().clone()));
    /// # }
    /// ```
    pub fn peer_events(&self) -> broadcast::Receiver<PeerEvent> {
        self.inner.events.subscribe()
    }

    /// Declares `peer`'s incarnation down here, as if it had broken the protocol: watchers of
    /// its actors get `Terminated` (reason node down), requests waiting for it fail, its queued
    /// messages are dropped, and that incarnation is refused from now on (only a restarted
    /// process is admitted). Subscribers get [`PeerEvent::Down`] with
    /// [`DownReason::Requested`]`(reason)`. Does nothing if `peer` is not the incarnation this
    /// node talks to. This is how a cluster's downing decision reaches remoting.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::ActorSystem;
    /// use rally::remote::{RemoteConfig, RemoteNode};
    ///
    /// # #[tokio::main] async fn main() {
    /// let config = RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
    /// let node = RemoteNode::start(&ActorSystem::new("a"), config).await.unwrap();
    /// let stranger = "rally://b@127.0.0.1:1".parse().unwrap();
    /// let peer = rally::remote::UniqueAddress { address: stranger, incarnation: rally::remote::Incarnation(7) };
    /// node.quarantine(&peer, "downed by the cluster"); // never talked to: nothing to do
    /// # }
    /// ```
    pub fn quarantine(&self, peer: &UniqueAddress, reason: &str) {
        self.inner
            .quarantine(peer, DownReason::Requested(reason.to_owned()));
    }

    /// Makes a local actor reachable from other nodes under `name`.
    ///
    /// # Errors
    ///
    /// [`ExposeError::NameTaken`] if the name is in use.
    pub fn expose<A: RemoteActor>(
        &self,
        name: &str,
        actor: &ActorRef<A>,
    ) -> Result<(), ExposeError> {
        self.inner.expose(name, actor)
    }

    /// Makes `name` unreachable from other nodes; returns whether it was exposed. An exposed
    /// actor that stops is unexposed by itself, so its name can be used again.
    pub fn unexpose(&self, name: &str) -> bool {
        self.inner.unexpose(name, None)
    }

    /// Registers an actor kind that other nodes may spawn here with
    /// [`spawn_on`](Self::spawn_on); `factory` makes each instance.
    pub fn register_kind<A: RemoteActor>(
        &self,
        kind: &str,
        factory: impl Fn() -> A + Send + Sync + 'static,
    ) {
        let spawn: KindFactory = Arc::new(move |node: &Arc<NodeInner>, name: &str| {
            let actor = node.system.spawn(factory()).map_err(|e| e.to_string())?;
            node.expose(name, &actor).map_err(|e| {
                actor.stop();
                e.to_string()
            })
        });
        self.inner.kinds.write().insert(kind.to_owned(), spawn);
    }

    /// Spawns an actor of a kind registered on `node`, exposed there as `name`, and returns a
    /// ref to it (Akka's remote deploy).
    ///
    /// # Errors
    ///
    /// [`RemoteSpawnError::Refused`] (unknown kind, name in use) or
    /// [`RemoteSpawnError::Ask`] (unreachable, timed out).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the answer, as for an `ask`: the actor may still be
    /// spawned and exposed on `node`.
    pub async fn spawn_on<A: RemoteActor>(
        &self,
        node: &NodeAddress,
        kind: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<ActorRef<A>, RemoteSpawnError> {
        let spawner = self.lookup::<Spawner>(node, SPAWNER);
        spawner
            .ask(
                SpawnRequest {
                    kind: kind.to_owned(),
                    name: name.to_owned(),
                },
                timeout,
            )
            .await?
            .map_err(RemoteSpawnError::Refused)?;
        Ok(self.lookup(node, name))
    }

    /// A ref to the actor exposed as `name` on `node`. No round trip: messages to a name the
    /// node does not expose are dropped there and counted (an `ask` gets an error reply).
    /// On this node's own address it returns the local actor.
    pub fn lookup<A: RemoteActor>(&self, node: &NodeAddress, name: &str) -> ActorRef<A> {
        if *node == self.inner.local.address {
            let exposed = self.inner.exposed.read();
            if let Some(actor) = exposed
                .get(name)
                .and_then(|e| e.actor.downcast_ref::<ActorRef<A>>())
            {
                return actor.clone();
            }
        }
        let association = self.inner.association(node);
        let large = self
            .inner
            .config
            .large_message_destinations
            .iter()
            .any(|n| n == name);
        let lane = association.lane_for(name, large);
        let (id, path) = self.inner.remote_identity(node, name);
        let generation = association.generation();
        ActorRef::external(Arc::new(RemoteRef {
            id,
            path,
            name: name.to_owned(),
            association,
            generation,
            lane,
            table: self.inner.table::<A>(),
            dead_letters: self.inner.system.dead_letters().clone(),
            entry: self.inner.system.entry_filters().clone(),
        }))
    }

    /// A snapshot of the node's counters. The actor system's metrics endpoint exports the
    /// same figures as `rally_remote_*` (see `docs/tuning.md`).
    pub fn stats(&self) -> RemoteStats {
        self.inner.stats()
    }

    /// Leaves gracefully: tells every peer, flushes what is queued (waiting at most `timeout`),
    /// then stops accepting and connecting. A peer that could not be reached at the last
    /// attempt is not waited for: what is queued for it is dropped.
    ///
    /// # Cancel safety
    ///
    /// The peers are told and the lanes closed at the first poll; dropping the future after
    /// that skips the wait for the flush and leaves the node accepting and connecting (drop
    /// the node, or call `leave` again, to stop it).
    pub async fn leave(&self, timeout: Duration) {
        let associations: Vec<Arc<Association>> =
            self.inner.lock_associations().values().cloned().collect();
        for association in &associations {
            let _ = association.control().push_leave();
            for lane in &association.lanes {
                lane.close();
            }
        }
        let deadline = crate::now() + timeout;
        while crate::now() < deadline
            && !associations
                .iter()
                .all(|a| a.lanes.iter().all(|l| l.is_settled()))
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = self._alive.send(true);
    }
}

impl NodeInner {
    fn expose<A: RemoteActor>(
        self: &Arc<Self>,
        name: &str,
        actor: &ActorRef<A>,
    ) -> Result<(), ExposeError> {
        {
            let mut exposed = self.exposed.write();
            if exposed.contains_key(name) {
                return Err(ExposeError::NameTaken(name.to_owned()));
            }
            let entry = ExposedEntry {
                exposed: Arc::new(ExposedActor {
                    actor: actor.clone(),
                    table: self.table::<A>(),
                }),
                actor: Box::new(actor.clone()),
                id: actor.id(),
            };
            exposed.insert(name.to_owned(), entry);
            self.exposed_version.fetch_add(1, Ordering::Release);
        }
        // The entry goes with the actor, so the name is free again once it stops.
        actor.watch_with(Arc::new(Unexposer {
            id: self.system.next_id(),
            name: name.to_owned(),
            actor: actor.id(),
            node: Arc::downgrade(self),
        }));
        Ok(())
    }

    /// Removes `name` (only if it still names `actor`, when given).
    fn unexpose(&self, name: &str, actor: Option<ActorId>) -> bool {
        let mut exposed = self.exposed.write();
        let matches = exposed
            .get(name)
            .is_some_and(|entry| actor.is_none_or(|id| entry.id == id));
        if matches {
            exposed.remove(name);
            self.exposed_version.fetch_add(1, Ordering::Release);
        }
        matches
    }

    /// Installs what serves grain requests (see [`RemoteNode::serve_grains`]).
    /// The tells held until now go to it first, in the order they came (under the lock a
    /// connection takes to hold one, so none is held after they were handed over).
    pub(crate) fn set_grain_service(&self, service: Weak<dyn crate::grain::GrainService>) {
        let mut held = self.held_tells.lock();
        if let Some(tells) = held.take() {
            tells.hand_to(&service);
        }
        *self.grains.write() = Some(service);
        self.grains_version.fetch_add(1, Ordering::Release);
    }

    /// Starts holding the grain tells that arrive while no service is installed (none once
    /// one was: the locks in the order `set_grain_service` takes them).
    pub(crate) fn hold_grain_tells(&self) {
        let mut held = self.held_tells.lock();
        if self.grains.read().is_none() {
            held.get_or_insert_with(crate::grain::HeldTells::default);
        }
    }

    /// Keeps a grain tell that found no service; `false` if this node does not hold them (or
    /// holds as many as it keeps): then the caller looks for a service again.
    pub(crate) fn hold_grain_tell(
        &self,
        from: &UniqueAddress,
        request: &crate::grain::GrainRequest<'_>,
    ) -> bool {
        self.held_tells
            .lock()
            .as_mut()
            .is_some_and(|held| held.keep(from, request))
    }

    /// What serves grain requests now (held weakly: a dropped service serves no more), and the
    /// count of its changes it was read at.
    pub(crate) fn grain_service(&self) -> (u64, Option<Weak<dyn crate::grain::GrainService>>) {
        let version = self.grains_version.load(Ordering::Acquire);
        let service = self.grains.read().clone();
        (version, service)
    }

    /// The count of grain service changes.
    pub(crate) fn grains_version(&self) -> u64 {
        self.grains_version.load(Ordering::Acquire)
    }

    pub(crate) fn exposed_version(&self) -> u64 {
        self.exposed_version.load(Ordering::Acquire)
    }

    pub(crate) fn kind(&self, kind: &str) -> Option<KindFactory> {
        self.kinds.read().get(kind).cloned()
    }

    fn lock_associations(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<NodeAddress, Arc<Association>>> {
        self.associations.lock()
    }

    /// The association to `node`, created (with its lane writers) on first use.
    pub(crate) fn association(self: &Arc<Self>, node: &NodeAddress) -> Arc<Association> {
        let mut associations = self.lock_associations();
        if let Some(existing) = associations.get(node) {
            return existing.clone();
        }
        let association = Arc::new(Association::new(
            node.clone(),
            self.config.ordinary_lanes,
            self.config.max_frame_bytes,
            self.config.outbound_lane_bytes,
            self.config.failure_detector.clone(),
            self.events.clone(),
        ));
        associations.insert(node.clone(), association.clone());
        for index in 0..association.lanes.len() {
            tokio::spawn(lanes::run(Arc::downgrade(self), association.clone(), index));
        }
        association
    }

    /// A stable id and path for the remote actor `name` on `node`.
    pub(crate) fn remote_identity(&self, node: &NodeAddress, name: &str) -> (ActorId, Arc<str>) {
        let path: Arc<str> = format!("{node}/{name}").into();
        let mut ids = self.remote_ids.lock();
        let id = *ids
            .entry(path.to_string())
            .or_insert_with(|| self.system.next_id());
        (id, path)
    }

    /// A peer did not deliver a message this node sent to `recipient` there (nobody is exposed
    /// under that name): a dead letter here, under the message's manifest.
    pub(crate) fn undelivered(&self, peer: &NodeAddress, recipient: &str, manifest: &str) {
        let message_type = self
            .sent_manifests
            .lock()
            .get(manifest)
            .copied()
            .unwrap_or("(a manifest this node does not send)");
        let (_, path) = self.remote_identity(peer, recipient);
        self.system
            .dead_letters()
            .record(&path, message_type, DeadLetterReason::Unreachable);
    }

    pub(crate) fn exposed(&self, name: &str) -> Option<Arc<dyn Exposed>> {
        self.exposed.read().get(name).map(|e| e.exposed.clone())
    }

    fn table<A: RemoteActor>(&self) -> Arc<MessageTable<A>> {
        let mut tables = self.tables.lock();
        let entry = tables.entry(TypeId::of::<A>()).or_insert_with(|| {
            let table = MessageTable::<A>::of();
            self.sent_manifests.lock().extend(table.manifests());
            Arc::new(Arc::new(table))
        });
        entry
            .downcast_ref::<Arc<MessageTable<A>>>()
            .expect("the cache maps A's TypeId to A's table")
            .clone()
    }

    pub(crate) fn handshake_config(&self) -> HandshakeConfig {
        HandshakeConfig {
            local: self.local.clone(),
            secret: self.config.secret.clone(),
            cluster: self.config.cluster_name.clone(),
            max_frame_len: self.config.max_frame_bytes,
        }
    }

    /// Whether `incarnation` of the node at `address` was declared down here.
    pub(crate) fn is_quarantined(&self, address: &NodeAddress, incarnation: Incarnation) -> bool {
        self.lock_associations()
            .get(address)
            .is_some_and(|association| association.is_quarantined(incarnation))
    }

    /// Ends `peer`'s life here (it broke the protocol after authenticating, or someone asked):
    /// its incarnation is refused from now on.
    pub(crate) fn quarantine(&self, peer: &UniqueAddress, reason: DownReason) {
        tracing::warn!(peer = %peer.address, incarnation = %peer.incarnation, %reason, "peer quarantined");
        let association = self.lock_associations().get(&peer.address).cloned();
        if let Some(association) = association
            && association.admits(peer.incarnation)
        {
            self.declare_down(&association, reason);
        }
    }

    /// Learnt the incarnation of a peer from a handshake; a new one means the old process is
    /// gone. Returns what it means and the generation now current.
    pub(crate) fn observe(
        &self,
        association: &Association,
        peer: &UniqueAddress,
    ) -> (Observed, u64) {
        let (observed, generation, ended) = association.observe(peer.incarnation, |name| {
            self.remote_identity(&association.remote, name)
        });
        if let Some(ended) = ended {
            self.record_dropped(association, ended);
        }
        (observed, generation)
    }

    pub(crate) fn declare_down(&self, association: &Association, reason: DownReason) {
        let ended = association.declare_down(reason, |name| {
            self.remote_identity(&association.remote, name)
        });
        if let Some(ended) = ended {
            self.record_dropped(association, ended);
        }
    }

    /// The peer sent its leave notice (on the control lane). It is declared down once its
    /// connections on the data lanes have ended — it closes them when they are flushed, so a
    /// reply it queued before leaving is read first instead of being failed as
    /// `OutcomeUnknown` — or after [`LEAVE_FLUSH_WAIT`] at the latest.
    pub(crate) fn peer_left(self: &Arc<Self>, association: &Arc<Association>) {
        let (node, association) = (Arc::downgrade(self), Arc::clone(association));
        tokio::spawn(async move {
            association
                .data_connections_ended(crate::now() + LEAVE_FLUSH_WAIT)
                .await;
            if let Some(node) = node.upgrade() {
                node.declare_down(&association, DownReason::Left);
            }
        });
    }

    fn record_dropped(&self, association: &Association, ended: Ended) {
        lanes::record_lost(
            &self.system,
            &association.remote,
            ended.dropped,
            "(queued for an incarnation that is gone)",
        );
    }

    /// Logs a failed handshake: as a warning the first time for a peer host and cause, then
    /// quietly, so a peer that keeps retrying (from a new port each time) does not flood the
    /// log.
    pub(crate) fn report_handshake_failure(&self, peer: &str, error: &connection::ConnectError) {
        let host = peer.rsplit_once(':').map_or(peer, |(host, _port)| host);
        let first = self.reported.lock().insert(format!("{host} {error}"));
        if first {
            tracing::warn!(%peer, %error, "handshake failed; connection closed (logged once per peer)");
        } else {
            tracing::debug!(%peer, %error, "handshake failed; connection closed");
        }
    }

    fn stats(&self) -> RemoteStats {
        let associations = self.lock_associations();
        let lane_sum = |f: fn(&crate::outbound::LaneStats) -> &AtomicU64| -> u64 {
            associations
                .values()
                .flat_map(|a| a.lanes.iter())
                .map(|l| f(&l.stats).load(Ordering::Relaxed))
                .sum()
        };
        let c = &self.counters;
        let (messages, replies_sent) = associations
            .values()
            .flat_map(|a| a.lanes.iter())
            .map(|l| l.counts())
            .fold((0, 0), |(m, r), (lm, lr)| (m + lm, r + lr));
        RemoteStats {
            associations: associations.len(),
            messages_sent: messages + replies_sent,
            replies_sent,
            writes: lane_sum(|s| &s.writes),
            sender_writes: lane_sum(|s| &s.sender_writes),
            writer_wakeups: lane_sum(|s| &s.wakeups),
            bytes_written: lane_sum(|s| &s.bytes),
            outbound_dropped: lane_sum(|s| &s.dropped),
            pending_requests: associations.values().map(|a| a.pending_requests()).sum(),
            frames_received: c.frames_in.load(Ordering::Relaxed),
            bytes_read: c.bytes_in.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            unknown_manifest: c.unknown_manifest.load(Ordering::Relaxed),
            decode_failed: c.decode_failed.load(Ordering::Relaxed),
            unknown_recipient: c.unknown_recipient.load(Ordering::Relaxed),
            undelivered: c.undelivered.load(Ordering::Relaxed),
            protocol_errors: c.protocol_errors.load(Ordering::Relaxed),
            handshake_failures: c.handshake_failures.load(Ordering::Relaxed),
            connections_refused: c.connections_refused.load(Ordering::Relaxed),
        }
    }
}

impl rally_actor::monitor::FigureSource for NodeInner {
    fn figures(&self, out: &mut Vec<rally_actor::monitor::Figure>) {
        self.stats().figures(&self.local.address.to_string(), out);
    }
}

impl crate::inbound::ReadContext for NodeInner {
    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn exposed_version(&self) -> u64 {
        NodeInner::exposed_version(self)
    }

    fn exposed(&self, name: &str) -> Option<Arc<dyn Exposed>> {
        NodeInner::exposed(self, name)
    }

    fn next_id(&self) -> ActorId {
        self.system.next_id()
    }

    fn remote_identity(&self, node: &NodeAddress, name: &str) -> (ActorId, Arc<str>) {
        NodeInner::remote_identity(self, node, name)
    }

    fn peer_left(self: &Arc<Self>, association: &Arc<Association>) {
        NodeInner::peer_left(self, association);
    }

    fn grains_version(&self) -> u64 {
        NodeInner::grains_version(self)
    }

    fn grain_service(&self) -> (u64, Option<Weak<dyn crate::grain::GrainService>>) {
        NodeInner::grain_service(self)
    }

    fn hold_grain_tell(
        &self,
        from: &UniqueAddress,
        request: &crate::grain::GrainRequest<'_>,
    ) -> bool {
        NodeInner::hold_grain_tell(self, from, request)
    }

    fn undelivered(&self, node: &NodeAddress, recipient: &str, manifest: &str) {
        NodeInner::undelivered(self, node, recipient, manifest);
    }
}

impl std::fmt::Debug for RemoteNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteNode")
            .field("address", &self.inner.local)
            .finish_non_exhaustive()
    }
}
