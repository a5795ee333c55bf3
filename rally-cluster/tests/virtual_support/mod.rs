//! A probe kind that logs every activation's start and end (member, epoch, instant), and
//! members on the in-memory provider with fast membership timings.

#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
use rally::cluster::virtual_actors::{
    Activation, GrainMessages, GrainNetwork, VirtualActor, VirtualActors, VirtualActorsConfig,
};
use rally::cluster::{Cluster, ClusterConfig, MemberId, MemberStatus};
use rally::remote::{Incarnation, RemoteMessage};
use rally::state::StateStore;
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use serde::{Deserialize, Serialize};

/// Bound on every wait: generous, since several sessions' builds share two cores.
pub const T: Duration = Duration::from_secs(60);

/// One activation's life as the probe saw it.
#[derive(Debug, Clone)]
pub struct Life {
    pub identity: String,
    pub owner: String,
    pub epoch: u64,
    pub start: Instant,
    pub end: Option<Instant>,
}

static LOG: LazyLock<Mutex<Vec<Life>>> = LazyLock::new(|| Mutex::new(Vec::new()));
static FAILED_ONCE: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(|| Mutex::new(HashSet::new()));
/// Probe instances alive (built and not dropped), by identity prefix (before the first '-').
static LIVE: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
pub static STARTS: AtomicUsize = AtomicUsize::new(0);
/// Every [`Next`] that did not follow the one before it: (identity, count before, number).
static DISORDER: LazyLock<Mutex<Vec<(String, u64, u64)>>> =
    LazyLock::new(|| Mutex::new(Vec::new()));

/// The [`Next`]s of identities starting with `prefix-` that came out of order or after a gap.
pub fn disorder(prefix_: &str) -> Vec<(String, u64, u64)> {
    DISORDER
        .lock()
        .unwrap()
        .iter()
        .filter(|(identity, _, _)| prefix(identity) == prefix_)
        .cloned()
        .collect()
}

fn prefix(identity: &str) -> String {
    identity.split('-').next().unwrap_or("").to_owned()
}

/// The lives of identities starting with `prefix-`.
pub fn lives(prefix_: &str) -> Vec<Life> {
    LOG.lock()
        .unwrap()
        .iter()
        .filter(|l| prefix(&l.identity) == prefix_)
        .cloned()
        .collect()
}

pub fn live(prefix_: &str) -> usize {
    LIVE.lock().unwrap().get(prefix_).copied().unwrap_or(0)
}

/// No two lives of one identity overlap: each ends before the next starts (by the end
/// instant logged in `stopped`, before the lease is released, and the start logged in
/// `activate`, after it is granted).
pub fn assert_never_two_at_once(prefix_: &str) {
    let mut by_identity: HashMap<String, Vec<Life>> = HashMap::new();
    for life in lives(prefix_) {
        by_identity
            .entry(life.identity.clone())
            .or_default()
            .push(life);
    }
    for (identity, mut lives) in by_identity {
        lives.sort_by_key(|l| l.start);
        for pair in lives.windows(2) {
            let end = pair[0].end.unwrap_or_else(|| {
                panic!("{identity}: a life without end before another: {pair:?}")
            });
            assert!(
                end <= pair[1].start,
                "{identity}: two activations at once: {pair:?}"
            );
            // A new lease (another owner's, or this owner's after a release) has a higher
            // epoch; lives one after another under one lease share it.
            assert!(
                pair[1].epoch > pair[0].epoch
                    || (pair[1].epoch == pair[0].epoch && pair[1].owner == pair[0].owner),
                "{identity}: epochs must grow from one lease to the next: {pair:?}"
            );
        }
    }
}

/// The probe kind. Identities starting `failonce-` fail their first activation hook,
/// `paniconce-` panic in it; state is a counter saved when the activation ends.
pub struct Probe {
    activation: Activation,
    count: u64,
    index: usize,
}

impl Actor for Probe {
    async fn stopped(&mut self, _: &mut Context<Self>) {
        let _ = self.activation.save(&self.count.to_le_bytes()).await;
        LOG.lock().unwrap()[self.index].end = Some(Instant::now());
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        *LIVE
            .lock()
            .unwrap()
            .entry(prefix(self.activation.identity()))
            .or_default() -= 1;
    }
}

impl VirtualActor for Probe {
    const KIND: &'static str = "probe";

    async fn activate(activation: Activation) -> ActorResult<Self> {
        let identity = activation.identity().to_owned();
        HOOKS_STARTED
            .lock()
            .unwrap()
            .push((identity.clone(), activation.owner().to_owned()));
        if identity.starts_with("slowact-") {
            tokio::time::sleep(SLOW_ACTIVATION).await;
        }
        let first_time = FAILED_ONCE.lock().unwrap().insert(identity.clone());
        if first_time && identity.starts_with("failonce-") {
            return Err("the hook refused".into());
        }
        if first_time && identity.starts_with("paniconce-") {
            panic!("the hook panicked");
        }
        let count = match activation.load().await? {
            Some(bytes) => u64::from_le_bytes(bytes.as_slice().try_into()?),
            None => 0,
        };
        let index = {
            let mut log = LOG.lock().unwrap();
            log.push(Life {
                identity: identity.clone(),
                owner: activation.owner().to_owned(),
                epoch: activation.epoch(),
                start: Instant::now(),
                end: None,
            });
            log.len() - 1
        };
        *LIVE.lock().unwrap().entry(prefix(&identity)).or_default() += 1;
        STARTS.fetch_add(1, Ordering::Relaxed);
        Ok(Probe {
            activation,
            count,
            index,
        })
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table
            .add::<Add>()
            .add::<Where>()
            .add::<Next>()
            .add::<Pause>()
            .add::<Bulk>();
    }
}

/// Adds to the counter; replies with the new count.
#[derive(Debug, Serialize, Deserialize)]
pub struct Add(pub u64);
impl Message for Add {
    type Reply = u64;
}
impl RemoteMessage for Add {
    const MANIFEST: &'static str = "test.probe.Add";
}
impl Handler<Add> for Probe {
    async fn handle(&mut self, msg: Add, _: &mut Context<Self>) -> ActorResult<u64> {
        self.count += msg.0;
        Ok(self.count)
    }
}

/// The sender's next number: the count becomes it. One that is not the count plus one (out of
/// order, or after a lost one) is logged (see [`disorder`]).
#[derive(Debug, Serialize, Deserialize)]
pub struct Next(pub u64);
impl Message for Next {
    type Reply = u64;
}
impl RemoteMessage for Next {
    const MANIFEST: &'static str = "test.probe.Next";
}
impl Handler<Next> for Probe {
    async fn handle(&mut self, msg: Next, _: &mut Context<Self>) -> ActorResult<u64> {
        if msg.0 != self.count + 1 {
            DISORDER.lock().unwrap().push((
                self.activation.identity().to_owned(),
                self.count,
                msg.0,
            ));
        }
        self.count = msg.0;
        Ok(self.count)
    }
}

/// Adds one to the counter; replies with that many bytes (larger than a connection's frame
/// limit, the reply cannot travel although the message was handled).
#[derive(Debug, Serialize, Deserialize)]
pub struct Bulk(pub usize);
impl Message for Bulk {
    type Reply = Vec<u8>;
}
impl RemoteMessage for Bulk {
    const MANIFEST: &'static str = "test.probe.Bulk";
}
impl Handler<Bulk> for Probe {
    async fn handle(&mut self, msg: Bulk, _: &mut Context<Self>) -> ActorResult<Vec<u8>> {
        self.count += 1;
        Ok(vec![7; msg.0])
    }
}

/// Where the activation runs: (owner, epoch, count).
#[derive(Debug, Serialize, Deserialize)]
pub struct Where;
impl Message for Where {
    type Reply = (String, u64, u64);
}
impl RemoteMessage for Where {
    const MANIFEST: &'static str = "test.probe.Where";
}
impl Handler<Where> for Probe {
    async fn handle(&mut self, _: Where, _: &mut Context<Self>) -> ActorResult<(String, u64, u64)> {
        Ok((
            self.activation.owner().to_owned(),
            self.activation.epoch(),
            self.count,
        ))
    }
}

/// Every activation hook that started: (identity, owner).
static HOOKS_STARTED: LazyLock<Mutex<Vec<(String, String)>>> =
    LazyLock::new(|| Mutex::new(Vec::new()));
/// How long the hook of an identity starting with `slowact-` takes.
pub const SLOW_ACTIVATION: Duration = Duration::from_millis(400);

/// The owners on which `identity`'s activation hook has started, in order.
pub fn hooks_started(identity: &str) -> Vec<String> {
    HOOKS_STARTED
        .lock()
        .unwrap()
        .iter()
        .filter(|(i, _)| i == identity)
        .map(|(_, owner)| owner.clone())
        .collect()
}

/// Handles for this many milliseconds, then answers where it ran (owner, epoch).
#[derive(Debug, Serialize, Deserialize)]
pub struct Pause(pub u64);
impl Message for Pause {
    type Reply = (String, u64);
}
impl RemoteMessage for Pause {
    const MANIFEST: &'static str = "test.probe.Pause";
}
impl Handler<Pause> for Probe {
    async fn handle(&mut self, msg: Pause, _: &mut Context<Self>) -> ActorResult<(String, u64)> {
        tokio::time::sleep(Duration::from_millis(msg.0)).await;
        Ok((self.activation.owner().to_owned(), self.activation.epoch()))
    }
}

/// Not registered in the probe's table: works locally, refused across members.
#[derive(Debug, Serialize, Deserialize)]
pub struct Unlisted;
impl Message for Unlisted {
    type Reply = ();
}
impl RemoteMessage for Unlisted {
    const MANIFEST: &'static str = "test.probe.Unlisted";
}
impl Handler<Unlisted> for Probe {
    async fn handle(&mut self, _: Unlisted, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}

/// Fast membership: failures are detected and decided within a couple of seconds.
pub fn fast_membership() -> ClusterConfig {
    let mut builder = ClusterConfig::builder();
    builder
        // Members in this process: a downed one stops, the test goes on.
        .when_downed(rally::cluster::WhenDowned::Stop)
        .probe(Duration::from_millis(100), Duration::from_millis(40))
        .stable_after(Duration::from_millis(500))
        .down_all_when_unstable(Duration::from_millis(500))
        .gossip_period(Duration::from_millis(50))
        .join_retry(Duration::from_millis(100));
    builder.build().expect("valid")
}

pub fn member_id(cluster: &str, port: u16, hosts: bool) -> MemberId {
    let id = MemberId::new(
        format!("rally://{cluster}@mem:{port}")
            .parse()
            .expect("valid"),
        Incarnation(u64::from(port) * 31),
        u64::from(port),
    );
    if hosts { id.with_kinds(["probe"]) } else { id }
}

pub struct TestMember {
    pub id: MemberId,
    pub cluster: Cluster,
    pub system: ActorSystem,
    pub grains: VirtualActors,
}

/// Members on one in-memory network; the first is the seed.
pub struct TestCluster {
    pub name: String,
    pub network: MemoryNetwork,
    pub grains: GrainNetwork,
    pub membership: ClusterConfig,
    pub config: VirtualActorsConfig,
}

impl TestCluster {
    pub fn new(name: &str, config: VirtualActorsConfig) -> Self {
        Self {
            name: name.to_owned(),
            network: MemoryNetwork::new(),
            grains: GrainNetwork::new(),
            membership: fast_membership(),
            config,
        }
    }

    pub fn join(&self, port: u16, hosts: bool, store: Arc<dyn StateStore>) -> TestMember {
        let (id, cluster, membership) = self.join_cluster(port, hosts);
        self.start_grains(id, cluster, &membership, hosts, store)
    }

    /// Joins the cluster only: the member is seen up (hosting, if `hosts`) before its
    /// virtual-actor runtime starts ([`start_grains`](Self::start_grains)).
    pub fn join_cluster(&self, port: u16, hosts: bool) -> (MemberId, Cluster, ClusterConfig) {
        let id = member_id(&self.name, port, hosts);
        let mut membership = self.membership.clone();
        membership.seeds = vec![member_id(&self.name, 1, true).address];
        let cluster = Cluster::join_with(
            id.clone(),
            membership.clone(),
            MemoryProvider::new(&self.network),
        )
        .expect("joins");
        (id, cluster, membership)
    }

    pub fn start_grains(
        &self,
        id: MemberId,
        cluster: Cluster,
        membership: &ClusterConfig,
        hosts: bool,
        store: Arc<dyn StateStore>,
    ) -> TestMember {
        let system = ActorSystem::new(&self.name);
        let mut builder = VirtualActors::builder(&cluster, &system);
        builder
            .store(store)
            .config(self.config.clone())
            .membership(membership);
        if hosts {
            builder.kind::<Probe>();
        }
        let grains = builder.start_in_memory(&self.grains).expect("starts");
        TestMember {
            id,
            cluster,
            system,
            grains,
        }
    }
}

/// Waits until every member sees exactly `ids` up.
pub async fn converged(members: &[&TestMember], ids: &[MemberId]) {
    eventually("every member sees every member up", T, async || {
        members.iter().all(|m| {
            let seen = m.cluster.members();
            ids.iter().all(|id| {
                seen.iter()
                    .any(|s| s.id == *id && s.status == MemberStatus::Up)
            })
        })
    })
    .await;
}

/// The one bounded poll, for conditions no event announces.
pub use rally_test::eventually;

/// A store that fails every call once cut, as a crashed process's store calls never arrive;
/// it counts the claims and releases that reach it, and can hold releases back until told.
#[derive(Debug)]
pub struct Switch {
    inner: Arc<dyn StateStore>,
    cut: std::sync::atomic::AtomicBool,
    pub claims: AtomicUsize,
    pub releases: AtomicUsize,
    /// Whether releases go through (`true`) or wait.
    releases_go: tokio::sync::watch::Sender<bool>,
}

impl Switch {
    pub fn new(inner: Arc<dyn StateStore>) -> Self {
        Self {
            inner,
            cut: std::sync::atomic::AtomicBool::new(false),
            claims: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            releases_go: tokio::sync::watch::Sender::new(true),
        }
    }

    /// Releases wait from now on until [`let_releases_go`](Self::let_releases_go).
    pub fn hold_releases(&self) {
        self.releases_go.send_replace(false);
    }

    pub fn let_releases_go(&self) {
        self.releases_go.send_replace(true);
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Every call goes through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), rally::state::StoreError> {
        if self.cut.load(Ordering::SeqCst) {
            Err(rally::state::StoreError::Backend("cut".into()))
        } else {
            Ok(())
        }
    }
}

impl StateStore for Switch {
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
    ) -> rally::state::BoxFuture<'a, Result<rally::state::Claim, rally::state::StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.claims.fetch_add(1, Ordering::SeqCst);
            self.inner.claim(kind, scope, owner).await
        })
    }

    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
        from: u64,
    ) -> rally::state::BoxFuture<'a, Result<rally::state::Claim, rally::state::StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.take_over(kind, scope, owner, from).await
        })
    }

    fn release<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: u64,
    ) -> rally::state::BoxFuture<'a, Result<(), rally::state::StoreError>> {
        Box::pin(async move {
            self.check()?;
            let mut go = self.releases_go.subscribe();
            let _ = go.wait_for(|go| *go).await;
            self.releases.fetch_add(1, Ordering::SeqCst);
            self.inner.release(kind, scope, epoch).await
        })
    }

    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> rally::state::BoxFuture<'a, Result<Option<Vec<u8>>, rally::state::StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.load(kind, identity).await
        })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: rally::state::Fence,
        identity: &'a str,
        state: &'a [u8],
    ) -> rally::state::BoxFuture<'a, Result<(), rally::state::StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.save(kind, scope, fence, identity, state).await
        })
    }

    fn fence<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: rally::state::Fence,
        identity: &'a str,
    ) -> rally::state::BoxFuture<'a, Result<(), rally::state::StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.fence(kind, scope, fence, identity).await
        })
    }
}
