//! Where membership comes from: the [`Provider`] trait, and the loop that runs the
//! [`Membership`] core over any packet transport.
//!
//! A provider is started once per member by [`Cluster::join_with`](crate::Cluster::join_with).
//! It returns a task that runs until the member leaves, is downed, or every
//! [`Cluster`](crate::Cluster) handle is dropped; the task reports through a [`ViewPublisher`]
//! and obeys [`Command`]s. The providers: [`GossipProvider`] (SWIM over Rally's own
//! connections, the default), [`MemoryProvider`] (SWIM over in-process channels, for many
//! members in one test) and, with the `etcd` feature, `EtcdProvider` (registrations under
//! leases in an etcd server, with lease-based downing).

#[cfg(feature = "etcd")]
mod etcd;
mod gossip;
mod memory;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, MutexGuard};

use tokio::sync::{broadcast, mpsc, oneshot};

use rally_remote::{PeerEvent, UniqueAddress};

use crate::member::{Member, MemberEvent, MemberId};
use crate::membership::{Membership, MembershipStats, Transmit};
use rally_actor::sync::Mutex;

#[cfg(feature = "etcd")]
pub use etcd::{EtcdConfig, EtcdProvider};
pub use gossip::GossipProvider;
pub use memory::{MemoryNetwork, MemoryProvider};

/// A membership packet with the node its connection authenticated, if the transport has one.
pub(crate) type Inbound = (Option<rally_remote::UniqueAddress>, Vec<u8>);

/// The task a provider runs for one member.
pub type ProviderTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A source of membership for one member.
///
/// # Example
///
/// A provider that only ever knows the member itself:
///
/// ```
/// use rally::cluster::provider::{Command, Provider, ProviderContext, ProviderStartError, ProviderTask};
/// use rally::cluster::{Member, MemberEvent, MemberStatus};
///
/// struct Alone;
///
/// impl Provider for Alone {
///     fn start(self: Box<Self>, mut context: ProviderContext) -> Result<ProviderTask, ProviderStartError> {
///         Ok(Box::pin(async move {
///             let me = Member::new(context.local.clone(), MemberStatus::Up, true);
///             context.publisher.publish(&me, vec![me.clone()], [MemberEvent::Up(me.id.clone())], None);
///             while let Some(command) = context.commands.recv().await {
///                 if let Command::Leave(done) = command {
///                     let _ = done.send(());
///                     break;
///                 }
///             }
///             // Every event stream of this member ends.
///             context.publisher.close();
///         }))
///     }
/// }
///
/// let provider: Box<dyn Provider> = Box::new(Alone);
/// # drop(provider);
/// ```
pub trait Provider: Send + 'static {
    /// Starts membership for `context.local`.
    ///
    /// # Errors
    ///
    /// [`ProviderStartError`] when the provider cannot start (its endpoint name is taken, its
    /// actor system is shutting down).
    fn start(self: Box<Self>, context: ProviderContext)
    -> Result<ProviderTask, ProviderStartError>;
}

/// What a provider is started with.
#[non_exhaustive]
pub struct ProviderContext {
    /// This member.
    pub local: MemberId,
    /// The member's settings.
    pub config: crate::ClusterConfig,
    /// Where to report the view and events.
    pub publisher: ViewPublisher,
    /// What the cluster asks of the provider; closed when every handle is dropped.
    pub commands: mpsc::UnboundedReceiver<Command>,
}

/// A request from the [`Cluster`](crate::Cluster) to its provider.
#[derive(Debug)]
#[non_exhaustive]
pub enum Command {
    /// Declare this member down.
    Down(MemberId),
    /// Leave gracefully; answer when done.
    Leave(oneshot::Sender<()>),
}

/// Why a provider could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderStartError {
    /// The node already exposes an actor under the membership endpoint's name: a cluster is
    /// already running on it.
    #[error("a cluster member already runs on this node: {0}")]
    Endpoint(#[from] rally_remote::ExposeError),
    /// The actor system refused the provider's actor (it is shutting down).
    #[error("the actor system refused the membership endpoint: {0}")]
    System(#[from] rally_actor::SpawnError),
    /// The downing strategy is not one this provider runs (lease-based downing needs the
    /// etcd provider; the etcd provider runs only lease-based downing).
    #[error("downing: {0}")]
    Downing(&'static str),
    /// The etcd provider's settings are out of range.
    #[error("etcd provider: {0}")]
    Etcd(String),
}

/// Refuses lease-based downing in a provider that has no lease (gossip, in-memory).
pub(crate) fn refuse_lease(config: &crate::ClusterConfig) -> Result<(), ProviderStartError> {
    if config.downing == crate::DowningStrategy::Lease {
        return Err(ProviderStartError::Downing(
            "lease-based downing needs the etcd provider",
        ));
    }
    Ok(())
}

/// Where a provider reports this member's view; the [`Cluster`](crate::Cluster) reads it.
///
/// A provider gets one in its [`ProviderContext`]; see [`Provider`] for a whole provider.
///
/// # Example
///
/// ```
/// # #![allow(dead_code)]
/// use rally::cluster::provider::ViewPublisher;
/// use rally::cluster::{Member, MemberEvent};
///
/// fn report_up(publisher: &ViewPublisher, me: &Member) {
///     publisher.publish(me, vec![me.clone()], [MemberEvent::Up(me.id.clone())], None);
/// }
/// ```
#[derive(Clone)]
pub struct ViewPublisher {
    shared: Arc<Shared>,
}

/// The view shared by a provider and the cluster handles.
pub(crate) struct Shared {
    state: Mutex<ViewState>,
    /// The actor system whose event stream also gets every event, if any.
    system: Option<rally_actor::ActorSystem>,
    /// `None` once the provider has finished: subscribers' streams then end.
    events: Mutex<Option<broadcast::Sender<MemberEvent>>>,
    /// Whether this member was downed (see [`crate::Cluster::downed`]).
    pub(crate) downed: tokio::sync::watch::Sender<bool>,
    /// What this member does then.
    when_downed: crate::config::WhenDowned,
}

#[derive(Clone)]
pub(crate) struct ViewState {
    pub(crate) local: Member,
    pub(crate) members: Vec<Member>,
    pub(crate) stats: MembershipStats,
}

/// Events kept for a slow subscriber before it starts missing some.
const EVENT_BUFFER: usize = 4096;

impl Shared {
    pub(crate) fn new(
        local: Member,
        system: Option<rally_actor::ActorSystem>,
        when_downed: crate::config::WhenDowned,
    ) -> Arc<Self> {
        Arc::new(Self {
            system,
            downed: tokio::sync::watch::Sender::new(false),
            when_downed,
            // No members until the provider's first report (which comes at once): a
            // subscriber before it gets every event live, one after it the view as events.
            state: Mutex::new(ViewState {
                members: Vec::new(),
                local,
                stats: MembershipStats::default(),
            }),
            events: Mutex::new(Some(broadcast::channel(EVENT_BUFFER).0)),
        })
    }

    /// The state, locked (every update is whole).
    pub(crate) fn state(&self) -> MutexGuard<'_, ViewState> {
        self.state.lock()
    }

    /// The current view and a subscription that starts right after it.
    pub(crate) fn subscribe(&self) -> (ViewState, broadcast::Receiver<MemberEvent>) {
        let state = self.state();
        let receiver = match &*self.sender() {
            Some(sender) => sender.subscribe(),
            // Finished: a stream that ends after the view.
            None => broadcast::channel(1).1,
        };
        (state.clone(), receiver)
    }

    fn sender(&self) -> MutexGuard<'_, Option<broadcast::Sender<MemberEvent>>> {
        self.events.lock()
    }

    /// This member learnt that it was downed: says so, once, and does what `when-downed` says.
    fn downed_now(&self, local: &MemberId) {
        if self.downed.send_replace(true) {
            return;
        }
        match self.when_downed {
            crate::config::WhenDowned::Exit => {
                tracing::warn!(
                    member = %local,
                    code = crate::config::DOWNED_EXIT_CODE,
                    "this member was downed by the cluster: it hosts nothing and is never admitted \
                     again; the process exits now (when-downed = exit) so that its supervisor \
                     starts it again as a new member"
                );
                // A moment for what runs now (the stop of what it hosted, the log) before the
                // process ends.
                std::thread::spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    use std::io::Write as _;
                    let _ = std::io::stdout().flush();
                    let _ = std::io::stderr().flush();
                    std::process::exit(crate::config::DOWNED_EXIT_CODE);
                });
            }
            crate::config::WhenDowned::Stop => tracing::warn!(
                member = %local,
                "this member was downed by the cluster: it hosts nothing and is never admitted \
                 again (when-downed = stop: the process goes on; start it again to rejoin)"
            ),
        }
    }

    pub(crate) fn publisher(self: &Arc<Self>) -> ViewPublisher {
        ViewPublisher {
            shared: self.clone(),
        }
    }
}

impl ViewPublisher {
    /// Replaces the view (this member and every member it knows, itself included) and
    /// delivers `events`, atomically for subscribers; `stats`, if given, replaces the figures.
    pub fn publish(
        &self,
        local: &Member,
        members: Vec<Member>,
        events: impl IntoIterator<Item = MemberEvent>,
        stats: Option<MembershipStats>,
    ) {
        let events: Vec<MemberEvent> = events.into_iter().collect();
        if events
            .iter()
            .any(|event| matches!(event, MemberEvent::Down(member) if *member == local.id))
        {
            self.shared.downed_now(&local.id);
        }
        {
            let mut state = self.shared.state();
            state.local = local.clone();
            state.members = members;
            if let Some(stats) = stats {
                state.stats = stats;
            }
            if let Some(sender) = &*self.shared.sender() {
                for event in &events {
                    // No subscriber is not an error: the view above is still kept.
                    let _ = sender.send(event.clone());
                }
            }
        }
        if let Some(system) = &self.shared.system {
            let stream = system.event_stream();
            if stream.has_subscribers::<MemberEvent>() {
                for event in events {
                    stream.publish(event);
                }
            }
        }
    }

    /// The provider has finished (this member left, was downed, or was dropped): every event
    /// stream ends once its events are read.
    pub fn close(&self) {
        let _state = self.shared.state();
        self.shared.sender().take();
    }
}

/// Runs a membership core: joins, then feeds it packets, time and commands, and sends what it
/// hands out through `send`, until it stops or the commands close.
pub(crate) async fn drive(
    mut core: Membership,
    mut inbound: mpsc::Receiver<Inbound>,
    mut send: impl FnMut(Transmit) + Send,
    mut commands: mpsc::UnboundedReceiver<Command>,
    publisher: ViewPublisher,
    mut peer_events: Option<broadcast::Receiver<PeerEvent>>,
) {
    let now = || tokio::time::Instant::now().into_std();
    core.join(now());
    // Callers of `leave` waiting for it to complete (it waits for the members' acknowledgements).
    let mut leaving = Vec::new();
    loop {
        flush(&mut core, &mut send, &publisher);
        if core.is_stopped() {
            break;
        }
        let deadline = core
            .poll_timeout()
            .map_or_else(far_future, tokio::time::Instant::from_std);
        tokio::select! {
            packet = inbound.recv() => match packet {
                Some((from, packet)) => {
                    let _ = core.handle_packet_from(&packet, from.as_ref(), now());
                }
                None => break,
            },
            command = commands.recv() => match command {
                Some(Command::Down(member)) => core.down(&member, now()),
                Some(Command::Leave(done)) => {
                    core.leave(now());
                    leaving.push(done);
                }
                // Every handle dropped without a leave: stop at once, as a crash would.
                None => break,
            },
            verdict = transport_verdict(&mut peer_events) => match verdict {
                Some((peer, reachable)) => {
                    core.handle_transport_reachability(&peer, reachable, now());
                }
                None => peer_events = None,
            },
            () = tokio::time::sleep_until(deadline) => core.handle_timeout(now()),
        }
    }
    flush(&mut core, &mut send, &publisher);
    // Refuse commands before the streams end, so a handle that saw its stream end is
    // refused at once.
    drop(commands);
    publisher.close();
    for done in leaving {
        let _ = done.send(());
    }
}

/// The next verdict of the transport's failure detector on a peer (the remoting heartbeats'
/// phi-accrual): `false` when it suspects the peer or gave it up, `true` when it hears it
/// again. `None` once the node's events end; pending for ever without a transport.
async fn transport_verdict(
    events: &mut Option<broadcast::Receiver<PeerEvent>>,
) -> Option<(UniqueAddress, bool)> {
    let Some(events) = events else {
        return std::future::pending().await;
    };
    loop {
        match events.recv().await {
            Ok(PeerEvent::Unreachable(peer) | PeerEvent::Down { peer, .. }) => {
                return Some((peer, false));
            }
            Ok(PeerEvent::Reachable(peer) | PeerEvent::Connected(peer)) => {
                return Some((peer, true));
            }
            // Missed verdicts are not replayed: the next one for a peer corrects its state.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(24 * 60 * 60)
}

fn flush(core: &mut Membership, send: &mut impl FnMut(Transmit), publisher: &ViewPublisher) {
    while let Some(transmit) = core.poll_transmit() {
        send(transmit);
    }
    let events: Vec<MemberEvent> = std::iter::from_fn(|| core.poll_event()).collect();
    publisher.publish(core.local(), core.members(), events, Some(core.stats()));
}

impl std::fmt::Debug for ViewPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewPublisher").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ProviderContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderContext").finish_non_exhaustive()
    }
}
