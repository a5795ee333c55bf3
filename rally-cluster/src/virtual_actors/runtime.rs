//! The virtual-actor runtime of one member: how it starts, and the refs it hands out.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rally_actor::{ActorSystem, Handler};
use rally_remote::{ExposeError, RemoteMessage, RemoteNode};
use rally_state::{MemoryStore, StateStore};

use super::config::VirtualActorsConfig;
use super::error::GrainError;
use super::host::{Host, Inner, KindHost, KindStats};
use super::kind::{Call, TypedCall, VirtualActor, decode_reply};
use super::ownership::Ownership;
use super::placement::{Hashed, Placement};
use super::transport::{ENDPOINT, GrainEndpoint, GrainNetwork, GrainRequest, Peer, Transport};
use crate::cluster::Cluster;
use crate::config::ClusterConfig;

/// Why the virtual-actor runtime did not start.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::VirtualActorsStartError;
///
/// let error = VirtualActorsStartError::KindNotDeclared("cart".into());
/// assert!(error.to_string().contains("cart"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VirtualActorsStartError {
    /// A kind was registered that this member does not declare (`ClusterConfig::kinds`), so
    /// no other member would ever send it a message for that kind.
    #[error("kind {0:?} is registered but this member does not declare it in its kinds")]
    KindNotDeclared(String),
    /// Two registered kinds share one name.
    #[error("kind {0:?} is registered twice")]
    DuplicateKind(String),
    /// The endpoint could not be exposed on the node (a runtime already runs there).
    #[error(transparent)]
    Expose(#[from] ExposeError),
    /// The actor system is shutting down.
    #[error("cannot start the endpoint: {0}")]
    Spawn(String),
    /// A virtual-actor runtime already runs for this cluster member.
    #[error("virtual actors are already started on this member")]
    AlreadyStarted,
    /// The [`VirtualActorsConfig`] is out of range (the error names the key).
    #[error("invalid virtual actors configuration: {0}")]
    Config(#[from] crate::config::ClusterConfigError),
}

/// The virtual actors of one member: the kinds it hosts, and refs to any identity of any kind
/// hosted anywhere in the cluster (a client-only member hosts none and still sends).
///
/// # Example
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use rally::ActorSystem;
/// use rally::cluster::{Cluster, ClusterConfig};
/// use rally::cluster::virtual_actors::VirtualActors;
/// use rally::remote::{RemoteConfig, RemoteNode};
/// use rally::state::SqliteStore;
/// # use rally::{Actor, ActorResult, Context, Handler, Message};
/// # use rally::cluster::virtual_actors::{Activation, GrainMessages, VirtualActor};
/// # use rally::remote::RemoteMessage;
/// # use serde::{Deserialize, Serialize};
/// # struct Cart;
/// # impl Actor for Cart {}
/// # impl VirtualActor for Cart {
/// #     const KIND: &'static str = "cart";
/// #     async fn activate(_: Activation) -> ActorResult<Self> { Ok(Cart) }
/// #     fn messages(table: &mut GrainMessages<Self>) { table.add::<Count>(); }
/// # }
/// # #[derive(Serialize, Deserialize)] struct Count;
/// # impl Message for Count { type Reply = u32; }
/// # impl RemoteMessage for Count { const MANIFEST: &'static str = "doc.Count"; }
/// # impl Handler<Count> for Cart {
/// #     async fn handle(&mut self, _: Count, _: &mut Context<Self>) -> ActorResult<u32> { Ok(0) }
/// # }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("shop");
/// let node = RemoteNode::start(&system, RemoteConfig::builder().listen("127.0.0.1", 2552).secret(b"s".to_vec()).build().unwrap())
///     .await
///     .unwrap();
/// let config = ClusterConfig::builder().kind("cart").build().unwrap();
/// let cluster = Cluster::join(&system, &node, config).unwrap();
/// let grains = VirtualActors::builder(&cluster, &system)
///     .kind::<Cart>()
///     .store(Arc::new(SqliteStore::open("/var/lib/shop/grains.db").unwrap()))
///     .start(&node)
///     .unwrap();
/// // From the runtime or from the cluster: the same ref.
/// let cart = grains.get::<Cart>("user-42").unwrap();
/// let _same = cluster.get::<Cart>("user-42").unwrap();
/// let items = cart.ask(Count, Duration::from_secs(5)).await.unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct VirtualActors {
    inner: Arc<Inner>,
}

/// Builds a [`VirtualActors`]; see [`VirtualActors::builder`].
pub struct VirtualActorsBuilder {
    cluster: Cluster,
    system: ActorSystem,
    store: Arc<dyn StateStore>,
    placement: Arc<dyn Placement>,
    config: VirtualActorsConfig,
    membership: ClusterConfig,
    kinds: Vec<(&'static str, Arc<dyn KindHost>)>,
}

impl VirtualActors {
    /// A builder for this member of `cluster`, whose actors run in `system`. Defaults: no
    /// kind (client-only), a [`MemoryStore`] (enough for members in one process; members in
    /// several processes must share a durable store), [`Hashed`] placement, the default
    /// [`VirtualActorsConfig`], and the cluster's own timings ([`Cluster::config`]) for the takeover wait.
    pub fn builder(cluster: &Cluster, system: &ActorSystem) -> VirtualActorsBuilder {
        VirtualActorsBuilder {
            cluster: cluster.clone(),
            system: system.clone(),
            store: Arc::new(MemoryStore::new()),
            placement: Arc::new(Hashed),
            config: VirtualActorsConfig::default(),
            membership: cluster.config().clone(),
            kinds: Vec::new(),
        }
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    /// A ref to `identity` of kind `K`, wherever it is (or will be) active.
    ///
    /// # Errors
    ///
    /// [`GrainError::InvalidIdentity`] for an empty identity or one longer than
    /// `max_identity_bytes`.
    pub fn get<K: VirtualActor>(&self, identity: &str) -> Result<GrainRef<K>, GrainError> {
        self.inner.check_identity(identity)?;
        Ok(GrainRef {
            identity: Arc::from(identity),
            inner: Arc::clone(&self.inner),
            owner: Mutex::new(None),
            kind: PhantomData,
        })
    }

    /// The figures of each hosted kind on this member.
    pub fn stats(&self) -> Vec<KindStats> {
        self.inner.stats()
    }

    /// Stops hosting (as when this member leaves): new messages fail with
    /// [`GrainError::Stopped`]; every activation finishes what it was handed, runs its
    /// `stopped` hook and releases its identity. Returns when all have, and when every ask
    /// this member passed on for another member (to the identity's next owner) has had its
    /// answer back through it or reached its deadline, so a node that leaves right after
    /// takes no answer's way back with it.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the wait does not cancel the deactivations.
    pub async fn shutdown(&self) {
        self.inner.stop();
        self.inner.drained().await;
    }
}

impl VirtualActorsBuilder {
    /// Hosts kind `K` on this member (which must declare it in its kinds).
    pub fn kind<K: VirtualActor>(&mut self) -> &mut Self {
        let host: Arc<dyn KindHost> = Host::<K>::new();
        self.kinds.push((K::KIND, host));
        self
    }

    /// Where activations claim their identities and keep their state.
    pub fn store(&mut self, store: Arc<dyn StateStore>) -> &mut Self {
        self.store = store;
        self
    }

    /// How identities are placed.
    pub fn placement(&mut self, placement: impl Placement) -> &mut Self {
        self.placement = Arc::new(placement);
        self
    }

    /// Activation, passivation and move settings.
    pub fn config(&mut self, config: VirtualActorsConfig) -> &mut Self {
        self.config = config;
        self
    }

    /// The cluster settings whose timings decide how long after a member is downed its
    /// identities may be taken over. Default: the ones the cluster member joined with
    /// ([`Cluster::config`]), which is what every application wants; setting others is for
    /// tests that join through a provider with its own timings.
    pub fn membership(&mut self, config: &ClusterConfig) -> &mut Self {
        self.membership = config.clone();
        self
    }

    /// Starts over Rally's own connections: exposes this member's endpoint on `node`.
    ///
    /// # Errors
    ///
    /// See [`VirtualActorsStartError`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(&mut self, node: &RemoteNode) -> Result<VirtualActors, VirtualActorsStartError> {
        let grains = self.build(Transport::remote(node))?;
        let endpoint = self
            .system
            .spawn(GrainEndpoint {
                inner: Arc::downgrade(&grains.inner),
            })
            .map_err(|e| VirtualActorsStartError::Spawn(e.to_string()))?;
        node.expose(ENDPOINT, &endpoint)?;
        Ok(grains)
    }

    /// Starts on an in-process network shared by the members of one process (tests).
    ///
    /// # Errors
    ///
    /// See [`VirtualActorsStartError`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_in_memory(
        &mut self,
        network: &GrainNetwork,
    ) -> Result<VirtualActors, VirtualActorsStartError> {
        let grains = self.build(Transport::Memory(network.clone()))?;
        grains.inner.attach();
        Ok(grains)
    }

    fn build(&mut self, transport: Transport) -> Result<VirtualActors, VirtualActorsStartError> {
        self.config.validate()?;
        let local = self.cluster.self_member().id;
        let mut kinds = HashMap::new();
        for (kind, host) in self.kinds.drain(..) {
            if !local.hosts_kind(kind) {
                return Err(VirtualActorsStartError::KindNotDeclared(kind.to_owned()));
            }
            if kinds.insert(kind, host).is_some() {
                return Err(VirtualActorsStartError::DuplicateKind(kind.to_owned()));
            }
        }
        let ownership = Ownership::new(
            local.clone(),
            &self.membership,
            self.config.deactivation_timeout,
        );
        let inner = Arc::new(Inner::new(
            local,
            self.system.clone(),
            Arc::clone(&self.store),
            Arc::clone(&self.placement),
            self.config.clone(),
            ownership,
            kinds,
            transport,
        ));
        if !self.cluster.attach_grains(&inner) {
            return Err(VirtualActorsStartError::AlreadyStarted);
        }
        crate::figures::register(&self.system, &inner);
        spawn_event_loop(&self.cluster, &inner);
        spawn_sweeper(&inner);
        Ok(VirtualActors { inner })
    }
}

/// Feeds member events to the runtime; when the stream ends (this member left, was downed,
/// or every cluster handle dropped) the runtime stops hosting.
fn spawn_event_loop(cluster: &Cluster, inner: &Arc<Inner>) {
    let mut events = cluster.events();
    let inner = Arc::downgrade(inner);
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Some(inner) = inner.upgrade() else { return };
            inner.apply(&event);
        }
        if let Some(inner) = inner.upgrade() {
            inner.stop();
        }
    });
}

/// Runs passivation and moves: after every membership change, and every tenth of the idle
/// time (between 10 ms and 1 s), so an idle activation goes within 10% of its idle time.
fn spawn_sweeper(inner: &Arc<Inner>) {
    let period =
        (inner.config.idle_timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let inner = Arc::clone(inner);
    tokio::spawn(async move {
        let mut next = crate::virtual_actors::now() + period;
        while !inner.is_stopped() {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => next = crate::virtual_actors::now() + period,
                () = inner.view_changed.notified() => {}
            }
            inner.sweep();
        }
    });
}

/// A ref to one identity of a virtual-actor kind, used like an `ActorRef`: `tell` and `ask`.
/// The activation it reaches may be on any member and may change between two messages.
///
/// # Example
///
/// See [`VirtualActors`].
pub struct GrainRef<K> {
    identity: Arc<str>,
    inner: Arc<Inner>,
    /// The member the last ask went to straight from here, and the view it was found by
    /// (see `Inner::direct_peer`).
    owner: Mutex<Option<(u64, Peer)>>,
    kind: PhantomData<fn() -> K>,
}

impl<K: VirtualActor> GrainRef<K> {
    /// The identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Sends a message without waiting for its handling; what becomes of it is not
    /// reported (use [`ask`](Self::ask) to know). If no member hosting the kind has been
    /// seen yet, the message waits for one at most `host-wait`.
    ///
    /// # Errors
    ///
    /// [`GrainError::Stopped`] if this member's runtime has stopped.
    pub fn tell<M>(&self, msg: M) -> Result<(), GrainError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        if self.inner.is_stopped() {
            return Err(GrainError::Stopped);
        }
        let call = TypedCall::<M> {
            msg,
            reply: Box::new(|_| {}),
            hops: 0,
            deadline: None,
            handed_over: false,
        };
        self.inner.send::<K>(&self.identity, Box::new(call));
        Ok(())
    }

    /// Sends a message and waits at most `timeout` for the reply; the identity is activated
    /// on its owner if it is not active.
    ///
    /// # Errors
    ///
    /// See [`GrainError`]: `InvalidTimeout` (nothing sent), `NoHost` (no member hosting the
    /// kind was seen before the timeout; the message waits for one until then), `NotHosted`,
    /// `UnknownMessage`, `ActivationFailed`, `Failed`, `Timeout`, `TooManyHops`, …
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the reply; the message may still be handled.
    pub async fn ask<M>(&self, msg: M, timeout: Duration) -> Result<M::Reply, GrainError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        if timeout.is_zero() {
            return Err(GrainError::InvalidTimeout);
        }
        let until = tokio::time::Instant::now() + timeout;
        let deadline = until.into_std();
        let call = TypedCall::<M> {
            msg,
            reply: Box::new(|_| {}),
            hops: 0,
            deadline: Some(deadline),
            handed_over: false,
        };
        // On a member that does not host the kind (a client-only one, say), the ask goes from
        // here to the owner and its answer straight back here: no task in between.
        if let Some(peer) = self.inner.direct_peer(K::KIND, &self.identity, &self.owner) {
            return self.ask_direct(&peer, call, until, timeout).await;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let call = TypedCall::<M> {
            reply: Box::new(move |result| {
                let _ = tx.send(result);
            }),
            ..call
        };
        self.inner.send::<K>(&self.identity, Box::new(call));
        self.answer(rx, until, timeout).await
    }

    /// An ask sent by this task to `peer`, the identity's owner by this member's view, its
    /// answer awaited here. One that `peer` did not handle (it stopped hosting, or never took
    /// it) is routed anew as a forwarded ask is, within the same deadline.
    async fn ask_direct<M>(
        &self,
        peer: &Peer,
        mut call: TypedCall<M>,
        until: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<M::Reply, GrainError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        let outgoing = Call::<K>::request(&mut call)?;
        let request = GrainRequest::new(K::KIND, &self.identity, outgoing);
        let result = match self.inner.transport.ask(peer, request) {
            Ok(answer) => match tokio::time::timeout_at(until, answer.reply()).await {
                Ok(result) => result,
                Err(_) => return Err(self.timed_out(timeout)),
            },
            Err(error) => Err(error),
        };
        let error = match result {
            Ok(bytes) => return decode_reply::<M>(&bytes),
            Err(error) => error,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        call.reply = Box::new(move |result| {
            let _ = tx.send(result);
        });
        let deadline = until.into_std();
        self.inner.not_answered::<K>(
            &peer.member,
            Arc::clone(&self.identity),
            Box::new(call),
            deadline,
            error,
        );
        self.answer(rx, until, timeout).await
    }

    /// Waits for a call's reply until `until`.
    async fn answer<R>(
        &self,
        rx: tokio::sync::oneshot::Receiver<Result<R, GrainError>>,
        until: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<R, GrainError> {
        match tokio::time::timeout_at(until, rx).await {
            Err(_) => Err(self.timed_out(timeout)),
            Ok(Err(_)) => Err(GrainError::Undeliverable(
                "the reply destination was dropped".into(),
            )),
            Ok(Ok(result)) => result,
        }
    }

    /// The error of an ask that had no answer within `timeout`.
    fn timed_out(&self, timeout: Duration) -> GrainError {
        if self.inner.no_host(K::KIND, &self.identity) {
            GrainError::NoHost(K::KIND.to_owned())
        } else {
            GrainError::Timeout(timeout)
        }
    }
}

impl<K> Clone for GrainRef<K> {
    fn clone(&self) -> Self {
        Self {
            identity: Arc::clone(&self.identity),
            inner: Arc::clone(&self.inner),
            owner: Mutex::new(
                self.owner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone(),
            ),
            kind: PhantomData,
        }
    }
}

impl<K: VirtualActor> fmt::Debug for GrainRef<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrainRef")
            .field("kind", &K::KIND)
            .field("identity", &self.identity)
            .finish()
    }
}

impl fmt::Debug for VirtualActors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualActors")
            .field("member", &self.inner.local.to_string())
            .field("stats", &self.inner.stats())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for VirtualActorsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualActorsBuilder")
            .field(
                "kinds",
                &self.kinds.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("placement", &self.placement)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
