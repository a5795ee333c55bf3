//! The etcd provider: membership kept in an etcd server that the deployment already runs.
//!
//! Each member writes a registration under `<prefix>/<cluster>/members/<host>:<port>/<incarnation>`,
//! attached to a lease of its own that it keeps alive; every member watches the prefix. A
//! member whose lease expires (it crashed, or it was cut off from etcd) disappears from every
//! view at once, and it has already downed itself: that is the lease-based downing strategy
//! ([`DowningStrategy::Lease`](crate::DowningStrategy::Lease)). Decisions that must be unique
//! go through compare-and-swap: a registration is created only if its key is absent (and
//! deletes the registrations of earlier lives at its address in the same transaction), and
//! an operator's `down` deletes a registration only if it is still the one seen.
//!
//! The view logic is sans-I/O (`view.rs`); this task only moves registrations, watch events
//! and keep-alive answers between etcd and it.

mod view;

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, Txn, TxnOp,
    WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

use self::view::{LEASE_ID_BYTES, LeaseView, Registration, key_of};
use super::{Command, Provider, ProviderContext, ProviderStartError, ProviderTask, ViewPublisher};
use crate::config::duration;
use crate::downing::DowningStrategy;

/// How long a registration lives without a keep-alive. A crashed member is seen down this
/// long after its last renewal; 5 s keeps failover well under 10 s.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);
/// Keep-alive period: five renewals per lease, so one or two lost to a blip or to an etcd
/// restart do not expire it.
const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// Longest wait for one etcd request: a request to a dead server must not hold the member
/// past its fence.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the etcd provider finds etcd and how it keeps its lease.
///
/// In a TOML file every key is optional and kebab-case.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::cluster::provider::EtcdConfig;
///
/// let config: EtcdConfig = toml::from_str(r#"
///     endpoints = ["http://10.0.0.5:2379"]
///     lease-ttl = "10s"
/// "#).unwrap();
/// assert_eq!(config.lease_ttl, Duration::from_secs(10));
/// assert_eq!(config.prefix, "/rally");
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct EtcdConfig {
    /// etcd client URLs (default `["http://127.0.0.1:2379"]`, etcd's own default).
    pub endpoints: Vec<String>,
    /// Key prefix under which clusters register (default `/rally`); a cluster's members live
    /// under `<prefix>/<cluster name>/members/`.
    pub prefix: String,
    /// Lease time-to-live (default 5 s): a crashed member is down this long after its last
    /// renewal.
    #[serde(with = "duration")]
    pub lease_ttl: Duration,
    /// Keep-alive period (default 1 s). A member that has had no renewal answered for
    /// `lease-ttl - keep-alive` downs itself, before etcd can expire its lease.
    #[serde(with = "duration")]
    pub keep_alive: Duration,
    /// Longest wait for one etcd request (default 1 s).
    #[serde(with = "duration")]
    pub request_timeout: Duration,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        Self {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            prefix: "/rally".into(),
            lease_ttl: DEFAULT_LEASE_TTL,
            keep_alive: DEFAULT_KEEP_ALIVE,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl EtcdConfig {
    /// The settings with these endpoints, the rest defaulted.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::provider::EtcdConfig;
    ///
    /// let config = EtcdConfig::new(["http://127.0.0.1:2379"]);
    /// assert_eq!(config.endpoints.len(), 1);
    /// ```
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Checks that the settings can work together.
    ///
    /// # Errors
    ///
    /// [`ProviderStartError::Etcd`] naming the first key out of range.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::provider::EtcdConfig;
    ///
    /// let mut config = EtcdConfig::default();
    /// config.keep_alive = Duration::from_secs(3);
    /// assert!(config.validate().unwrap_err().to_string().contains("keep-alive"));
    /// ```
    pub fn validate(&self) -> Result<(), ProviderStartError> {
        let invalid = |reason: &str| Err(ProviderStartError::Etcd(reason.to_owned()));
        if self.endpoints.is_empty() {
            return invalid("endpoints: at least one etcd endpoint is needed");
        }
        if self.lease_ttl < Duration::from_secs(2) || self.lease_ttl.subsec_nanos() != 0 {
            return invalid("lease-ttl: a whole number of seconds, at least 2 s");
        }
        if self.keep_alive.is_zero() || self.keep_alive * 2 > self.lease_ttl {
            return invalid("keep-alive: above zero and at most half of lease-ttl");
        }
        if self.request_timeout.is_zero() || self.request_timeout > self.keep_alive {
            return invalid("request-timeout: above zero and at most keep-alive");
        }
        Ok(())
    }

    /// How long after the last answered keep-alive was sent a member downs itself:
    /// `lease-ttl - keep-alive` (4 s by default). etcd renewed the lease after that send, so
    /// the member has stopped at least `keep-alive` before etcd can expire the lease and the
    /// others can take over what it hosted.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::provider::EtcdConfig;
    ///
    /// assert_eq!(EtcdConfig::default().fence_after(), Duration::from_secs(4));
    /// ```
    pub fn fence_after(&self) -> Duration {
        self.lease_ttl.saturating_sub(self.keep_alive)
    }
}

/// Membership from an etcd server, with lease-based downing.
///
/// Needs `downing = "lease"` ([`DowningStrategy::Lease`]) in the cluster configuration; the
/// other strategies resolve SWIM views, which this provider does not have.
///
/// # Example
///
/// ```no_run
/// use rally::ActorSystem;
/// use rally::cluster::provider::{EtcdConfig, EtcdProvider};
/// use rally::cluster::{Cluster, ClusterConfig, DowningStrategy};
/// use rally::remote::{RemoteConfig, RemoteNode};
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("shop");
/// let node = RemoteNode::start(&system, RemoteConfig::builder().listen("10.0.0.2", 2552).secret(b"s".to_vec()).build().unwrap())
///     .await
///     .unwrap();
/// let config = ClusterConfig::builder().downing(DowningStrategy::Lease).build().unwrap();
/// let etcd = EtcdProvider::new(EtcdConfig::new(["http://10.0.0.5:2379"])).unwrap();
/// let cluster = Cluster::join_using(&system, &node, config, etcd).unwrap();
/// # drop(cluster);
/// # }
/// ```
#[derive(Debug)]
pub struct EtcdProvider {
    config: EtcdConfig,
}

impl EtcdProvider {
    /// A provider using `config`.
    ///
    /// # Errors
    ///
    /// [`ProviderStartError::Etcd`] if `config` is out of range.
    pub fn new(config: EtcdConfig) -> Result<Self, ProviderStartError> {
        config.validate()?;
        Ok(Self { config })
    }
}

impl Provider for EtcdProvider {
    fn start(
        self: Box<Self>,
        context: ProviderContext,
    ) -> Result<ProviderTask, ProviderStartError> {
        if context.config.downing != DowningStrategy::Lease {
            return Err(ProviderStartError::Downing(
                "the etcd provider runs lease-based downing: set downing = \"lease\"",
            ));
        }
        Ok(Box::pin(run(self.config, context)))
    }
}

/// What the etcd tasks report to the member's loop.
enum Input {
    Snapshot(Vec<(String, Vec<u8>)>),
    Put(String, Vec<u8>),
    Delete(String),
    KeepAlive(Instant, i64),
    /// A request carrying this many bytes of keys, values and lease ids went to etcd.
    Sent(usize),
}

async fn run(config: EtcdConfig, context: ProviderContext) {
    let ProviderContext {
        local,
        publisher,
        mut commands,
        ..
    } = context;
    let root = format!(
        "{}/{}/members/",
        config.prefix.trim_end_matches('/'),
        local.address.system
    );
    let mut view = LeaseView::new(
        local,
        root.clone(),
        config.fence_after(),
        Instant::now().into_std(),
    );
    publish(&mut view, &publisher);
    // Register: retried until it succeeds, unless the member is told to stop first.
    let mut sent = Vec::new();
    let registered = loop {
        tokio::select! {
            result = register(&config, &root, &view, &mut sent) => match result {
                Ok(registered) => break Some(registered),
                Err(e) => {
                    tracing::warn!(error = %e, "registering in etcd; retrying");
                    tokio::time::sleep(config.keep_alive).await;
                }
            },
            command = commands.recv() => match command {
                Some(Command::Leave(done)) => {
                    view.left();
                    publish(&mut view, &publisher);
                    let _ = done.send(());
                    break None;
                }
                Some(Command::Down(member)) if member == view.local().id => {
                    view.down_local();
                    break None;
                }
                Some(Command::Down(_)) => {}
                None => break None,
            },
        }
    };
    for bytes in sent {
        view.sent(bytes);
    }
    let Some((client, registration, snapshot, revision, sent_at)) = registered else {
        publish(&mut view, &publisher);
        publisher.close();
        return;
    };
    view.snapshot(&snapshot);
    let lease = registration.lease;
    view.registered(registration, sent_at.into_std());
    publish(&mut view, &publisher);

    let (inputs, mut input) = mpsc::channel(1024);
    let watcher = tokio::spawn(watch(
        client.clone(),
        root,
        revision,
        config.clone(),
        inputs.clone(),
    ));
    let keeper = tokio::spawn(keep_alive(client.clone(), lease, config.clone(), inputs));
    let mut left = None;
    while !view.is_stopped() {
        let deadline = view
            .poll_timeout()
            .map_or_else(super::far_future, Instant::from_std);
        tokio::select! {
            Some(event) = input.recv() => match event {
                Input::Snapshot(entries) => view.snapshot(&entries),
                Input::Put(key, value) => view.put(&key, &value),
                Input::Delete(key) => view.delete(&key),
                Input::KeepAlive(sent_at, ttl) => view.keep_alive(sent_at.into_std(), ttl),
                Input::Sent(bytes) => view.sent(bytes),
            },
            command = commands.recv() => match command {
                Some(Command::Down(member)) => {
                    for bytes in down(&client, &config, &view, &member).await {
                        view.sent(bytes);
                    }
                    if member == view.local().id {
                        view.down_local();
                    }
                }
                Some(Command::Leave(done)) => {
                    leave(&client, &config, &mut view, lease).await;
                    left = Some(done);
                }
                // Every handle dropped without a leave: stop at once, as a crash would (the
                // lease then expires).
                None => break,
            },
            () = tokio::time::sleep_until(deadline) => view.handle_timeout(Instant::now().into_std()),
        }
        publish(&mut view, &publisher);
    }
    watcher.abort();
    keeper.abort();
    publish(&mut view, &publisher);
    drop(commands);
    publisher.close();
    if let Some(done) = left {
        let _ = done.send(());
    }
}

fn publish(view: &mut LeaseView, publisher: &ViewPublisher) {
    let events = view.drain_events();
    publisher.publish(view.local(), view.members(), events, Some(view.stats()));
}

async fn connect(config: &EtcdConfig) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(config.request_timeout)
        .with_timeout(config.request_timeout);
    Client::connect(&config.endpoints, Some(options)).await
}

type Registered = (Client, Registration, Vec<(String, Vec<u8>)>, i64, Instant);

/// Grants a lease and creates this member's registration under it, if its key is absent
/// (compare-and-swap), deleting the registrations of earlier lives at its address in the same
/// transaction. Returns the prefix as it was read before the transaction and the revision of
/// that read, for the watch to start after.
///
/// Adds the size of every request it sends to `sent`.
async fn register(
    config: &EtcdConfig,
    root: &str,
    view: &LeaseView,
    sent: &mut Vec<usize>,
) -> Result<Registered, String> {
    let attempt = async {
        let mut client = connect(config).await.map_err(|e| e.to_string())?;
        let sent_at = Instant::now();
        let ttl = i64::try_from(config.lease_ttl.as_secs()).unwrap_or(i64::MAX);
        sent.push(LEASE_ID_BYTES);
        let lease = client
            .lease_grant(ttl, None)
            .await
            .map_err(|e| e.to_string())?
            .id();
        sent.push(root.len());
        let existing = client
            .get(root, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| e.to_string())?;
        // The watch starts right after this read: a member registering between the read and
        // this member's own transaction is then seen through the watch.
        let revision = existing.header().map_or(0, |h| h.revision());
        let local = view.local().id.clone();
        let mut snapshot = Vec::new();
        let mut superseded = Vec::new();
        for kv in existing.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if let Some(r) = Registration::decode(kv.value())
                && key_of(root, &r.member) == key
                && local.supersedes(&r.member)
            {
                superseded.push((key.clone(), TxnOp::delete(key.clone(), None)));
                continue;
            }
            snapshot.push((key, kv.value().to_vec()));
        }
        let registration = Registration {
            member: local,
            lease,
            leaving: false,
        };
        let key = view.local_key();
        let value = registration.encode();
        sent.push(
            key.len() * 2
                + value.len()
                + LEASE_ID_BYTES
                + superseded.iter().map(|(k, _)| k.len()).sum::<usize>(),
        );
        let mut operations = vec![TxnOp::put(
            key.clone(),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )];
        operations.extend(superseded.into_iter().map(|(_, op)| op));
        let local_id = registration.member.clone();
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then(operations);
        let response = client.txn(txn).await.map_err(|e| e.to_string())?;
        if !response.succeeded() {
            sent.push(LEASE_ID_BYTES);
            let _ = client.lease_revoke(lease).await;
            // An earlier attempt of this member whose answer was lost registered it under
            // a lease nobody keeps alive: delete that registration (if it is still ours),
            // and register afresh at the next attempt.
            sent.push(key.len());
            let stale = client
                .get(key.as_str(), None)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(kv) = stale.kvs().first()
                && Registration::decode(kv.value()).is_some_and(|r| r.member == local_id)
            {
                sent.push(key.len() * 2 + kv.value().len());
                let _ = client
                    .txn(
                        Txn::new()
                            .when([Compare::value(key.as_str(), CompareOp::Equal, kv.value())])
                            .and_then([TxnOp::delete(key.as_str(), None)]),
                    )
                    .await;
            }
            return Err("this member's identity is already registered".to_owned());
        }
        Ok((client, registration, snapshot, revision, sent_at))
    };
    timeout(config.request_timeout * 4, attempt)
        .await
        .map_err(|_| "etcd did not answer in time".to_owned())?
}

/// Reports every change under `root` after `revision`; after any failure (etcd restarted, the
/// history compacted) reads the whole prefix again and watches on from there.
async fn watch(
    mut client: Client,
    root: String,
    mut revision: i64,
    config: EtcdConfig,
    inputs: mpsc::Sender<Input>,
) {
    loop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        if inputs.send(Input::Sent(root.len())).await.is_err() {
            return;
        }
        if let Ok(Ok(mut stream)) = timeout(
            config.request_timeout,
            client.watch(root.as_str(), Some(options)),
        )
        .await
        {
            while let Ok(Some(response)) = stream.message().await {
                if response.canceled() {
                    break;
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    revision = revision.max(kv.mod_revision());
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    let input = match event.event_type() {
                        EventType::Put => Input::Put(key, kv.value().to_vec()),
                        EventType::Delete => Input::Delete(key),
                    };
                    if inputs.send(input).await.is_err() {
                        return;
                    }
                }
            }
        }
        // Resynchronize: the whole prefix, then watch from its revision.
        loop {
            tokio::time::sleep(config.keep_alive).await;
            if inputs.send(Input::Sent(root.len())).await.is_err() {
                return;
            }
            let read = timeout(
                config.request_timeout,
                client.get(root.as_str(), Some(GetOptions::new().with_prefix())),
            )
            .await;
            if let Ok(Ok(response)) = read {
                revision = response.header().map_or(revision, |h| h.revision());
                let entries = response
                    .kvs()
                    .iter()
                    .map(|kv| {
                        (
                            String::from_utf8_lossy(kv.key()).into_owned(),
                            kv.value().to_vec(),
                        )
                    })
                    .collect();
                if inputs.send(Input::Snapshot(entries)).await.is_err() {
                    return;
                }
                break;
            }
        }
    }
}

/// Renews the lease every `keep-alive` period, reporting each answer with the instant its
/// request was sent; a broken stream is reopened at the next period.
async fn keep_alive(
    mut client: Client,
    lease: i64,
    config: EtcdConfig,
    inputs: mpsc::Sender<Input>,
) {
    let mut stream = None;
    let mut ticks = tokio::time::interval(config.keep_alive);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let sent_at = Instant::now();
        if stream.is_none() {
            stream = timeout(config.request_timeout, client.lease_keep_alive(lease))
                .await
                .ok()
                .and_then(Result::ok);
        }
        let Some((keeper, answers)) = stream.as_mut() else {
            continue;
        };
        if inputs.send(Input::Sent(LEASE_ID_BYTES)).await.is_err() {
            return;
        }
        let answered = timeout(config.request_timeout, async {
            keeper.keep_alive().await?;
            answers.message().await
        })
        .await;
        match answered {
            Ok(Ok(Some(answer))) => {
                if inputs
                    .send(Input::KeepAlive(sent_at, answer.ttl()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            _ => stream = None,
        }
    }
}

/// An operator's down: deletes the member's registration only if it is still the one this
/// member saw (compare-and-swap), and revokes its lease so it learns at its next keep-alive.
/// Returns the sizes of the requests it sent.
async fn down(
    client: &Client,
    config: &EtcdConfig,
    view: &LeaseView,
    member: &crate::MemberId,
) -> Vec<usize> {
    let Some((key, registration)) = view.registration_of(member) else {
        return Vec::new();
    };
    let sent = vec![key.len() * 2 + registration.encode().len(), LEASE_ID_BYTES];
    let mut client = client.clone();
    let txn = Txn::new()
        .when([Compare::value(
            key.clone(),
            CompareOp::Equal,
            registration.encode(),
        )])
        .and_then([TxnOp::delete(key, None)]);
    let attempt = async {
        client.txn(txn).await?;
        client.lease_revoke(registration.lease).await
    };
    if let Err(e) = timeout(config.request_timeout * 2, attempt)
        .await
        .map_err(|_| "timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()))
    {
        tracing::warn!(%member, error = %e, "downing a member in etcd");
    }
    sent
}

/// A graceful leave: the registration says `leaving`, then the lease is revoked (which
/// deletes it); the others report `Leaving`, then `Removed`.
async fn leave(client: &Client, config: &EtcdConfig, view: &mut LeaseView, lease: i64) {
    let mut client = client.clone();
    if let Some(registration) = view.leave() {
        let key = view.local_key();
        view.sent(key.len() + registration.encode().len() + LEASE_ID_BYTES);
        view.sent(LEASE_ID_BYTES);
        let attempt = async {
            client
                .put(
                    key,
                    registration.encode(),
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await?;
            client.lease_revoke(lease).await
        };
        if timeout(config.request_timeout * 2, attempt).await.is_err() {
            tracing::warn!("leaving: etcd did not answer; the lease will expire");
        }
    }
    view.left();
}
