//! Pins the `Send`/`Sync`-ness of the public types, so a change is a compile error here.

use rally::{
    ActorRef, ActorSystem, AskError, DeadLetter, DeadLetters, Dispatcher, EventStream,
    MailboxConfig, Pool, Recipient, SendError, SupervisorStrategy, SystemConfig,
    SystemConfigBuilder, Terminated, Termination, TerminationReason, WeakActorRef,
};

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}

struct A;
impl rally::Actor for A {}
struct M;
impl rally::Message for M {
    type Reply = ();
}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<ActorRef<A>>();
    send_sync::<WeakActorRef<A>>();
    send_sync::<Recipient<M>>();
    send_sync::<ActorSystem>();
    send_sync::<Dispatcher>();
    send_sync::<EventStream>();
    send_sync::<DeadLetters>();
    send_sync::<DeadLetter>();
    send_sync::<Terminated>();
    send_sync::<SupervisorStrategy>();
    send_sync::<SystemConfig>();
    send_sync::<MailboxConfig>();
    send_sync::<AskError>();
    send_sync::<SendError<u8>>();
    send_sync::<TerminationReason>();
    send_sync::<SystemConfigBuilder>();
    // A pool's ref is shared by many tasks; the pool itself moves to its dispatcher.
    send_sync::<ActorRef<Pool<A>>>();
    send::<Pool<A>>();
    // Awaited from any task (spawned futures must be Send).
    send::<Termination>();
    send::<rally::Envelope<A>>();
    send::<rally::ReplyTo<u8>>();
}

/// What is active and the cluster dashboard: their types and futures go to any task.
#[cfg(all(feature = "cluster", feature = "metrics"))]
#[test]
fn listing_and_dashboard_types_are_send_and_sync() {
    use rally::cluster::virtual_actors::{
        ActiveCursor, ActiveError, ActiveIdentity, ActivePage, VirtualActors,
    };
    use rally::metrics::dashboard::{ClusterView, Dashboard, DashboardError};

    send_sync::<ActiveCursor>();
    send_sync::<ActiveError>();
    send_sync::<ActiveIdentity>();
    send_sync::<ActivePage>();
    send_sync::<ClusterView>();
    send_sync::<Dashboard>();
    send_sync::<DashboardError>();
    fn future_is_send<F: std::future::Future + Send>(_: F) {}
    // Only built, never run: the futures' types are what is checked.
    let _ = |grains: VirtualActors| {
        future_is_send(async move {
            grains
                .active_in_cluster("cart", None, 10, std::time::Duration::from_secs(1))
                .await
        })
    };
    let _ = |cluster: rally::cluster::Cluster, node: rally::remote::RemoteNode| {
        future_is_send(async move {
            rally::metrics::dashboard::serve(&cluster, &node, "127.0.0.1:0".parse().unwrap()).await
        })
    };
}
