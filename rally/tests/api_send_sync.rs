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
