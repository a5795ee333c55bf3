//! A panicking handler: the asker gets the panic message, the panic hook stays quiet, and the
//! runtime logs it once through `tracing` with the actor's path. One test per file: the panic
//! hook is process-wide.

#[path = "support/log.rs"]
mod log;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rally::{Actor, ActorResult, ActorSystem, AskError, Context, Handler, Message, Props};

struct Boom;
impl Message for Boom {
    type Reply = u32;
}

struct Fragile;
impl Actor for Fragile {}
impl Handler<Boom> for Fragile {
    async fn handle(&mut self, _: Boom, _: &mut Context<Self>) -> ActorResult<u32> {
        panic!("the disk is on fire");
    }
}

#[test]
fn a_handler_panic_reaches_the_asker_and_the_log_once_and_not_the_panic_hook() {
    // A hook that counts: it stands for the default hook, which prints to stderr.
    let hook_calls = Arc::new(AtomicUsize::new(0));
    let counted = hook_calls.clone();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, Ordering::SeqCst);
        eprintln!("hook: {info}");
    }));
    let (captured, _guard) = log::capture();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let system = ActorSystem::new("t");
        let actor = system.spawn(Props::new(Fragile).named("fragile")).unwrap();
        let error = actor.ask(Boom, Duration::from_secs(5)).await.unwrap_err();
        let AskError::Failed(text) = error else {
            panic!("expected Failed, got {error:?}");
        };
        assert!(text.contains("the disk is on fire"), "{text}");
        assert!(
            text.contains("actor_panic_reporting.rs"),
            "the place is named: {text}"
        );
        system.shutdown().await.unwrap();
    });

    assert_eq!(
        hook_calls.load(Ordering::SeqCst),
        0,
        "the caught panic was not printed"
    );
    let log = captured.text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert_eq!(lines.len(), 1, "logged once: {log}");
    assert!(lines[0].contains("/user/fragile"), "{}", lines[0]);
    assert!(lines[0].contains("the disk is on fire"), "{}", lines[0]);

    // A panic outside any handler still reaches the hook that was there before.
    let outside = std::panic::catch_unwind(|| panic!("not an actor"));
    assert!(outside.is_err());
    assert_eq!(hook_calls.load(Ordering::SeqCst), 1);
}
