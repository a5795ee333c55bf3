//! The virtual-actor runtime of one member: how it starts, the drivers of its kinds, and the
//! refs it hands out.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use rally_actor::sync::{Mutex, RwLock};
use std::time::Duration;

use rally_actor::{ActorSystem, CallFilter, Handler, Rejection, RequestContext};
use rally_remote::{GrainRequest, GrainService, RemoteMessage, RemoteNode, UniqueAddress};
use rally_state::{MemoryStore, StateStore};

use super::config::VirtualActorsConfig;
use super::core::{CorePage, KindCore};
use super::driver::KindDriver;
use super::error::{AskError, GetError, TellError};
use super::idempotent::{Idempotent, Next, Retry};
use super::kind::VirtualActor;
use super::outcome::Refusal;
use super::ownership::Ownership;
use super::placement::{Placement, Placements};
use super::transport::{GrainNetwork, Inbound, InboundReply, Peer, RemoteInbound, Transport};
use crate::cluster::Cluster;
use crate::config::ClusterConfig;
use crate::member::{MemberEvent, MemberId};

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
    /// A hosted kind is declared with a placement strategy this member does not know (register
    /// it with [`VirtualActorsBuilder::placement`]).
    #[error("kind {kind:?} is declared with placement {placement:?}, which is not registered")]
    UnknownPlacement {
        /// The kind.
        kind: String,
        /// The strategy's name.
        placement: String,
    },
    /// A virtual-actor runtime already runs for this cluster member.
    #[error("virtual actors are already started on this member")]
    AlreadyStarted,
    /// The [`VirtualActorsConfig`] is out of range (the error names the key).
    #[error("invalid virtual actors configuration: {0}")]
    Config(#[from] crate::config::ClusterConfigError),
}

/// The figures of one kind on this member.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::KindStats;
///
/// fn report(stats: &KindStats) -> String {
///     format!("{}: {} active, {} activations", stats.kind, stats.active, stats.activations)
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KindStats {
    /// The kind.
    pub kind: &'static str,
    /// Activations alive now.
    pub active: usize,
    /// Leases of the kind held now: shards (or identities leased alone) this member may
    /// activate in without a claim in the state store.
    pub leases: usize,
    /// Activations started since this member started.
    pub activations: u64,
    /// Activations ended (idle, over the cap, moved, this member stopping, or by themselves).
    pub deactivations: u64,
    /// Activations whose hook failed or panicked, or whose claim failed.
    pub failed_activations: u64,
    /// Activations ended because their identity now belongs to another member.
    pub moves: u64,
    /// Messages this member passed on to another member instead of handling them.
    pub forwarded: u64,
    /// Messages refused because a member's placement settings for the kind differ from the
    /// cluster's (this member's own, or a sender's).
    pub settings_mismatches: u64,
    /// Calls handled here by how long they took, from being handed to their activation until
    /// it finished them: `call_times[i]` counts those within [`CALL_TIME_BOUNDS`]`[i]` (and
    /// above the bound before), the last those above every bound.
    pub call_times: Vec<u64>,
}

/// The upper bounds of [`KindStats::call_times`]' buckets, about three per decade from 50 µs
/// to 10 s.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::CALL_TIME_BOUNDS;
///
/// assert_eq!(CALL_TIME_BOUNDS[0], std::time::Duration::from_micros(50));
/// ```
pub const CALL_TIME_BOUNDS: [std::time::Duration; 16] = {
    let mut bounds = [std::time::Duration::ZERO; 16];
    let mut i = 0;
    while i < 16 {
        bounds[i] = std::time::Duration::from_micros(super::core::BOUNDS_US[i]);
        i += 1;
    }
    bounds
};

/// What the drivers of one member share.
pub(crate) struct Shared {
    pub(crate) local: MemberId,
    /// This member as the state store records owners.
    pub(crate) owner_key: Arc<str>,
    pub(crate) system: ActorSystem,
    pub(crate) store: Arc<dyn StateStore>,
    pub(crate) config: VirtualActorsConfig,
    pub(crate) transport: Transport,
    /// Each kind's call filters, after the actor system's.
    pub(crate) kind_filters: HashMap<&'static str, Vec<Arc<dyn CallFilter>>>,
}

/// One kind's driver, erased over the kind.
trait KindEntry: Send + Sync + 'static {
    fn receive(&self, from: &UniqueAddress, request: GrainRequest<'_>, reply: Option<InboundReply>);
    fn member_event(&self, event: &MemberEvent);
    fn stop(&self);
    fn stats(&self) -> KindStats;
    fn hosting(&self) -> bool;
    fn active(&self, from: u32, limit: usize) -> CorePage;
    fn drained(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<K: VirtualActor> KindEntry for KindDriver<K> {
    fn receive(
        &self,
        from: &UniqueAddress,
        request: GrainRequest<'_>,
        reply: Option<InboundReply>,
    ) {
        KindDriver::receive(self, from, request, reply);
    }
    fn member_event(&self, event: &MemberEvent) {
        KindDriver::member_event(self, event);
    }
    fn stop(&self) {
        KindDriver::stop(self);
    }
    fn stats(&self) -> KindStats {
        KindDriver::stats(self)
    }
    fn hosting(&self) -> bool {
        KindDriver::hosting(self)
    }
    fn active(&self, from: u32, limit: usize) -> CorePage {
        KindDriver::active(self, from, limit)
    }
    fn drained(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(KindDriver::drained(self))
    }
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// Makes the driver of a registered kind.
type MakeKind = Box<dyn FnOnce(&Runtime, bool) -> Arc<dyn KindEntry> + Send>;

/// One member's runtime: its kinds' drivers (hosted ones, and those it only sends to), and its
/// view of the members, from which the drivers made later start.
pub(crate) struct Runtime {
    pub(crate) shared: Arc<Shared>,
    placements: Arc<Placements>,
    kinds: RwLock<HashMap<&'static str, Arc<dyn KindEntry>>>,
    view: Mutex<Ownership>,
    stopped: AtomicBool,
    /// What the node serves grain requests with (it holds it weakly).
    service: Mutex<Option<Arc<dyn GrainService>>>,
}

impl Runtime {
    /// The driver of kind `K`: the hosted one, or one that only sends, made on first use.
    fn driver<K: VirtualActor>(&self) -> Arc<KindDriver<K>> {
        let found = self.kinds.read().get(K::KIND).cloned();
        if let Some(entry) = found {
            return entry
                .as_any()
                .downcast::<KindDriver<K>>()
                .unwrap_or_else(|_| unreachable!("kinds map K::KIND to KindDriver<K>"));
        }
        let mut kinds = self.kinds.write();
        let entry = kinds
            .entry(K::KIND)
            .or_insert_with(|| self.make::<K>(false))
            .clone();
        drop(kinds);
        if self.stopped.load(Ordering::Acquire) {
            entry.stop();
        }
        entry
            .as_any()
            .downcast::<KindDriver<K>>()
            .unwrap_or_else(|_| unreachable!("kinds map K::KIND to KindDriver<K>"))
    }

    /// A driver of `K`, from this member's view now.
    fn make<K: VirtualActor>(&self, hosting: bool) -> Arc<dyn KindEntry> {
        let view = self.view.lock().clone();
        let core = KindCore::new(
            K::KIND,
            hosting,
            self.shared.config.clone(),
            Arc::clone(&self.placements),
            view,
            super::now(),
        );
        KindDriver::<K>::start(core, Arc::clone(&self.shared), hosting)
    }

    fn entries(&self) -> Vec<Arc<dyn KindEntry>> {
        self.kinds.read().values().cloned().collect()
    }

    /// A member event: the view, and every kind's core.
    fn member_event(&self, event: &MemberEvent) {
        self.view.lock().apply(event, super::now());
        for entry in self.entries() {
            entry.member_event(event);
        }
    }

    /// Stops hosting: every kind stops.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        for entry in self.entries() {
            entry.stop();
        }
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The figures of each kind, hosted or not, by kind.
    pub(crate) fn stats(&self) -> Vec<KindStats> {
        let mut stats: Vec<_> = self
            .entries()
            .iter()
            .filter(|entry| entry.hosting())
            .map(|entry| entry.stats())
            .collect();
        stats.sort_by_key(|s| s.kind);
        stats
    }

    pub(crate) fn local(&self) -> &MemberId {
        &self.shared.local
    }

    /// A page of the active identities of `kind` here; `None` if this member does not host it.
    pub(crate) fn active(&self, kind: &str, from: u32, limit: usize) -> Option<CorePage> {
        let entry = self.kinds.read().get(kind).cloned()?;
        entry.hosting().then(|| entry.active(from, limit))
    }

    /// Whether this member hosts `kind`.
    pub(crate) fn hosts_locally(&self, kind: &str) -> bool {
        self.kinds
            .read()
            .get(kind)
            .is_some_and(|entry| entry.hosting())
    }

    /// The members that host `kind` in this member's view.
    pub(crate) fn hosts(&self, kind: &str) -> Vec<MemberId> {
        self.view.lock().hosts(kind)
    }

    /// A hosted kind whose name is close to `kind`.
    pub(crate) fn similar_kind(&self, kind: &str) -> Option<String> {
        self.view.lock().similar_kind(kind)
    }

    fn check_identity(&self, identity: &str) -> Result<(), GetError> {
        let max = self.shared.config.max_identity_bytes;
        if identity.is_empty() || identity.len() > max {
            return Err(GetError::InvalidIdentity(format!(
                "identity must be 1..={max} bytes, got {}",
                identity.len()
            )));
        }
        Ok(())
    }

    /// Resolves once every kind has stopped and has nothing left here.
    async fn drained(&self) {
        for entry in self.entries() {
            entry.drained().await;
        }
    }
}

impl Inbound for Runtime {
    fn request(
        &self,
        from: &UniqueAddress,
        request: GrainRequest<'_>,
        reply: Option<InboundReply>,
    ) {
        let entry = self.kinds.read().get(request.kind).cloned();
        match entry {
            Some(entry) if entry.hosting() || self.is_stopped() => {
                entry.receive(from, request, reply);
            }
            _ => {
                let refusal = if self.is_stopped() {
                    Refusal::Stopped
                } else if let Err(GetError::InvalidIdentity(why)) =
                    self.check_identity(request.identity)
                {
                    Refusal::InvalidIdentity(why)
                } else {
                    Refusal::NotHosted(self.shared.local.to_string())
                };
                if let Some(reply) = reply {
                    let (outcome, text) = refusal.to_wire();
                    reply.send_text(outcome, &text);
                }
            }
        }
    }
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
/// cluster.wait_until_up(Duration::from_secs(30)).await.unwrap();
/// // From the runtime or from the cluster: the same ref.
/// let cart = grains.get::<Cart>("user-42").unwrap();
/// let _same = cluster.get::<Cart>("user-42").unwrap();
/// let items = cart.ask(Count, Duration::from_secs(5)).await.unwrap();
/// // Leave, stop hosting, close the node, stop the system: one call, bounded.
/// cluster.shutdown(Duration::from_secs(20)).await.unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct VirtualActors {
    pub(super) runtime: Arc<Runtime>,
}

/// Builds a [`VirtualActors`]; see [`VirtualActors::builder`].
pub struct VirtualActorsBuilder {
    cluster: Cluster,
    system: ActorSystem,
    store: Arc<dyn StateStore>,
    placements: Placements,
    config: VirtualActorsConfig,
    membership: ClusterConfig,
    kinds: Vec<(&'static str, MakeKind)>,
    kind_filters: HashMap<&'static str, Vec<Arc<dyn CallFilter>>>,
}

impl VirtualActors {
    /// A builder for this member of `cluster`, whose actors run in `system`. Defaults: no
    /// kind (client-only), a [`MemoryStore`] (enough for members in one process; members in
    /// several processes must share a durable store), the built-in placement strategies
    /// ([`Hashed`](super::Hashed), [`PreferLocal`](super::PreferLocal)), the default [`VirtualActorsConfig`],
    /// and the cluster's own timings ([`Cluster::config`]) for the takeover wait. Each kind is
    /// placed by the strategy its hosts declare (`ClusterConfig`'s `placements`).
    pub fn builder(cluster: &Cluster, system: &ActorSystem) -> VirtualActorsBuilder {
        VirtualActorsBuilder {
            cluster: cluster.clone(),
            system: system.clone(),
            store: Arc::new(MemoryStore::new()),
            placements: Placements::default(),
            config: VirtualActorsConfig::default(),
            membership: cluster.config().clone(),
            kinds: Vec::new(),
            kind_filters: HashMap::new(),
        }
    }

    pub(crate) fn from_runtime(runtime: Arc<Runtime>) -> Self {
        Self { runtime }
    }

    /// A ref to `identity` of kind `K`, wherever it is (or will be) active.
    ///
    /// # Errors
    ///
    /// [`GetError::InvalidIdentity`] for an empty identity or one longer than
    /// `max_identity_bytes`.
    pub fn get<K: VirtualActor>(&self, identity: &str) -> Result<GrainRef<K>, GetError> {
        self.runtime.check_identity(identity)?;
        Ok(GrainRef {
            identity: Arc::from(identity),
            driver: self.runtime.driver::<K>(),
            route: Mutex::new(None),
        })
    }

    /// The figures of each hosted kind on this member.
    pub fn stats(&self) -> Vec<KindStats> {
        self.runtime.stats()
    }

    /// Stops hosting (as when this member leaves): every activation finishes the message it
    /// is handling, runs its `stopped` hook and leaves its lease; the messages not yet handled
    /// go to the identities' next owners. Returns when all have, when every ask this member
    /// passed on for another member has had its answer back through it (or reached its
    /// deadline), and when no message has reached it for a moment; so a node that leaves right
    /// after takes no answer's way back with it.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the wait does not cancel the deactivations.
    pub async fn shutdown(&self) {
        self.runtime.stop();
        self.runtime.drained().await;
    }
}

impl VirtualActorsBuilder {
    /// Hosts kind `K` on this member (which must declare it in its kinds).
    pub fn kind<K: VirtualActor>(&mut self) -> &mut Self {
        self.kinds.push((
            K::KIND,
            Box::new(|runtime: &Runtime, hosting| runtime.make::<K>(hosting)),
        ));
        self
    }

    /// Adds a call filter for kind `K`'s activations on this member: it runs around their
    /// handlers and on their sends, after the actor system's filters
    /// (`rally::ActorSystem::add_call_filter`). A rejection reaches the caller as
    /// [`AskError::Rejected`] (not handled).
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rally::{CallFilter, Incoming, Kept, Rejection};
    /// use rally::cluster::virtual_actors::{VirtualActor, VirtualActorsBuilder};
    ///
    /// struct NeedsTenant;
    /// impl CallFilter for NeedsTenant {
    ///     fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
    ///         match call.context().and_then(|c| c.get("tenant")) {
    ///             Some(_) => Ok(None),
    ///             None => Err(Rejection::new("no tenant")),
    ///         }
    ///     }
    /// }
    /// fn host<K: VirtualActor>(builder: &mut VirtualActorsBuilder) {
    ///     builder.kind::<K>().call_filter::<K>(Arc::new(NeedsTenant));
    /// }
    /// ```
    pub fn call_filter<K: VirtualActor>(&mut self, filter: Arc<dyn CallFilter>) -> &mut Self {
        self.kind_filters.entry(K::KIND).or_default().push(filter);
        self
    }

    /// Where activations claim their identities and keep their state.
    pub fn store(&mut self, store: Arc<dyn StateStore>) -> &mut Self {
        self.store = store;
        self
    }

    /// Makes a placement strategy of the application's own known by its name, so that kinds
    /// declared with it (`ClusterConfigBuilder::kind_placed`) can be hosted, or sent to, from
    /// this member. The built-in ones need no registration.
    pub fn placement(&mut self, placement: impl Placement) -> &mut Self {
        self.placements.add(Arc::new(placement));
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

    /// Starts over Rally's own connections: this node serves the grain requests that reach it.
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
        let inbound: Weak<dyn Inbound> = Arc::downgrade(&grains.runtime) as Weak<dyn Inbound>;
        let service: Arc<dyn GrainService> = Arc::new(RemoteInbound(inbound));
        node.serve_grains(Arc::downgrade(&service));
        *grains.runtime.service.lock() = Some(service);
        super::active::expose(node, &grains.runtime);
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
        let inbound: Weak<dyn Inbound> = Arc::downgrade(&grains.runtime) as Weak<dyn Inbound>;
        network.attach(grains.runtime.local(), inbound);
        Ok(grains)
    }

    fn build(&mut self, transport: Transport) -> Result<VirtualActors, VirtualActorsStartError> {
        self.config.validate()?;
        let local = self.cluster.self_member().id;
        let mut seen = std::collections::HashSet::new();
        for (kind, _) in &self.kinds {
            let Some(declared) = local.declaration(kind) else {
                return Err(VirtualActorsStartError::KindNotDeclared((*kind).to_owned()));
            };
            if self.placements.get(&declared.placement).is_none() {
                return Err(VirtualActorsStartError::UnknownPlacement {
                    kind: (*kind).to_owned(),
                    placement: declared.placement.clone(),
                });
            }
            if !seen.insert(*kind) {
                return Err(VirtualActorsStartError::DuplicateKind((*kind).to_owned()));
            }
        }
        let shared = Arc::new(Shared {
            owner_key: Arc::from(Ownership::owner_key(&local)),
            local: local.clone(),
            system: self.system.clone(),
            store: Arc::clone(&self.store),
            config: self.config.clone(),
            transport,
            kind_filters: self.kind_filters.clone(),
        });
        let view = Ownership::new(local, &self.membership, self.config.deactivation_timeout);
        let runtime = Arc::new(Runtime {
            shared,
            placements: Arc::new(self.placements.clone()),
            kinds: RwLock::new(HashMap::new()),
            view: Mutex::new(view),
            stopped: AtomicBool::new(false),
            service: Mutex::new(None),
        });
        for (kind, make) in self.kinds.drain(..) {
            let entry = make(&runtime, true);
            runtime.kinds.write().insert(kind, entry);
        }
        if !self.cluster.attach_grains(&runtime) {
            return Err(VirtualActorsStartError::AlreadyStarted);
        }
        crate::figures::register(&self.system, &runtime);
        spawn_event_loop(&self.cluster, &runtime);
        Ok(VirtualActors { runtime })
    }
}

/// Feeds member events to the runtime; when the stream ends (this member left, was downed, or
/// every cluster handle dropped) the runtime stops hosting.
fn spawn_event_loop(cluster: &Cluster, runtime: &Arc<Runtime>) {
    let mut events = cluster.events();
    let runtime = Arc::downgrade(runtime);
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Some(runtime) = runtime.upgrade() else {
                return;
            };
            runtime.member_event(&event);
        }
        if let Some(runtime) = runtime.upgrade() {
            runtime.stop();
        }
    });
}

/// A ref to one identity of a virtual-actor kind, used like an `ActorRef`: `tell` and `ask`.
/// The activation it reaches may be on any member and may change between two messages.
///
/// # Example
///
/// See [`VirtualActors`].
pub struct GrainRef<K: VirtualActor> {
    identity: Arc<str>,
    driver: Arc<KindDriver<K>>,
    /// The member the last ask went to straight from here, and the view it was found by.
    route: Mutex<Option<(u64, Peer)>>,
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
    /// [`TellError::Stopped`] if this member's runtime has stopped.
    pub fn tell<M>(&self, msg: M) -> Result<(), TellError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        if self.driver.is_stopped() {
            return Err(TellError::Stopped);
        }
        let context = self
            .context_for::<M>()
            .map_err(|rejection| TellError::Rejected(rejection.reason().to_owned()))?;
        self.driver.tell(&self.identity, msg, context);
        Ok(())
    }

    /// Sends a message and waits at most `timeout` for the reply; the identity is activated
    /// on its owner if it is not active. Any timeout works (one too long for the clock waits
    /// as long as it can).
    ///
    /// # Errors
    ///
    /// [`AskError`], which says whether the message was handled
    /// ([`AskError::handled`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the reply; the message may still be handled.
    pub async fn ask<M>(&self, msg: M, timeout: Duration) -> Result<M::Reply, AskError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        let context = self
            .context_for::<M>()
            .map_err(|rejection| AskError::Rejected(rejection.reason().to_owned()))?;
        self.driver
            .ask(&self.identity, msg, timeout, &self.route, context)
            .await
    }

    /// The request context a message sent now carries (see
    /// `rally::EntryFilters::context_for_grain_send`).
    fn context_for<M: RemoteMessage>(&self) -> Result<Option<RequestContext>, Rejection> {
        self.driver.entry_filters().context_for_grain_send(
            K::KIND,
            &self.identity,
            std::any::type_name::<M>(),
        )
    }

    /// Asks until there is a definite answer or `deadline` has passed: sends the same message
    /// (with the same idempotency key) again after every error a retry may change (a timeout,
    /// a lost connection, a member gone in a failover, no host seen yet, a failed handler),
    /// and returns the first reply. Each attempt waits at most a quarter of `deadline`
    /// (at least 500 ms); errors that come back at once are retried after a pause that
    /// doubles from 50 ms to 1 s. With a handler that applies each key once
    /// ([`State::apply_once`](super::State::apply_once)), the operation is applied exactly
    /// once and this returns its reply, across failovers too: give it a deadline longer than
    /// a failover (about 8 s with the default settings, `docs/cluster.md`).
    ///
    /// # Errors
    ///
    /// The last attempt's [`AskError`] once `deadline` has passed (`handled()` says what is
    /// known of every attempt together only if it is `No` for each: an `Unknown` attempt
    /// before may have been applied, and a retry within the key window would answer it), or
    /// at once an error no retry changes ([`AskError::UnknownMessage`],
    /// [`AskError::Undeliverable`], [`AskError::SettingsMismatch`],
    /// [`AskError::InvalidTimeout`], [`AskError::Stopped`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the retries; an attempt under way may still be handled.
    pub async fn ask_until_definite<M>(
        &self,
        msg: M,
        deadline: Duration,
    ) -> Result<M::Reply, AskError>
    where
        M: Idempotent,
        K: Handler<M>,
    {
        let mut retry = Retry::new(super::now(), deadline);
        loop {
            // Only a zero deadline has no time for a first attempt: every retry is decided
            // with the time left in view.
            let Some(timeout) = retry.attempt_timeout(super::now()) else {
                return Err(AskError::InvalidTimeout);
            };
            let error = match self.ask(msg.clone(), timeout).await {
                Ok(reply) => return Ok(reply),
                Err(error) => error,
            };
            match retry.after(super::now(), &error) {
                Next::GiveUp => return Err(error),
                Next::After(pause) => {
                    tracing::debug!(
                        kind = K::KIND,
                        identity = %self.identity,
                        key = msg.idempotency_key(),
                        %error,
                        "asking again with the same idempotency key"
                    );
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

impl<K: VirtualActor> Clone for GrainRef<K> {
    fn clone(&self) -> Self {
        Self {
            identity: Arc::clone(&self.identity),
            driver: Arc::clone(&self.driver),
            route: Mutex::new(self.route.lock().clone()),
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
            .field("member", &self.runtime.local().to_string())
            .field("stats", &self.runtime.stats())
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
            .field("placements", &self.placements)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
