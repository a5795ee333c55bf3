//! The life of one actor: start, the message loop, failure and supervision, stop.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::dead_letters::DeadLetterReason;
use crate::envelope::ReplyError;
use crate::mailbox::{Mailbox, MailboxReceiver, Next, SystemMsg};
use crate::panic::catch;
use crate::props::Source;
use crate::supervision::{Decision, Failure, Scope};
use crate::{Actor, ActorResult, Context, Envelope, Terminated, TerminationReason};

/// Everything an actor's task owns.
pub(crate) struct Cell<A: Actor> {
    pub(crate) source: Source<A>,
    pub(crate) ctx: Context<A>,
    pub(crate) receiver: MailboxReceiver<A>,
    pub(crate) mailbox: Arc<Mailbox<A>>,
    pub(crate) registered: bool,
}

/// Runs the actor until it stops.
///
/// Not an `async fn`: an `async fn` moves its argument into a local when it first runs, and the
/// compiler keeps room for both, so every actor's task carried its cell twice (1,400 bytes for
/// an actor without state). The block below borrows the captured cell in place instead.
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(crate) fn run<A: Actor>(mut cell: Cell<A>) -> impl Future<Output = ()> + Send {
    async move {
        let mut actor = cell.source.first();
        // The cell's parts are used in place (`cell.ctx`), not through borrowed locals: each
        // would be a pointer kept in every actor's task.
        let counters = cell.mailbox.monitor.counters().cloned();
        let spans = counters.is_some() && cell.ctx.system().config().monitoring.tracing_spans;
        // A run of handling: from resuming after a wait until the next wait or yield.
        let mut run_start = counters.as_ref().map(|c| c.resume());
        let mut taken = 0u64;
        // Boxed, and the dispatcher's settings read where used rather than kept in locals:
        // every byte held across an await is carried by every idle actor's task.
        let mut failure = guarded(actor.started(&mut cell.ctx))
            .await
            .err()
            .map(Box::new);
        let mut handled = 0usize;
        let mut slice_start = Instant::now();

        loop {
            if let Some(failed) = failure.take() {
                let text = failed.to_string();
                // Failure handling is rare: boxed, so it does not enlarge every actor's task.
                let decision = Box::pin(await_decision(
                    &mut cell.ctx,
                    &cell.mailbox,
                    &mut cell.receiver,
                    *failed,
                ))
                .await;
                if matches!(decision, Decision::Stop | Decision::Escalate) {
                    cell.ctx.set_stop_reason(TerminationReason::Failed(text));
                }
                failure = Box::pin(apply(
                    decision,
                    &mut actor,
                    &mut cell.source,
                    &mut cell.ctx,
                    &mut cell.receiver,
                ))
                .await
                .map(Box::new);
                continue;
            }
            if cell.ctx.stopping {
                break;
            }
            // In a block, so that the `Next` (48 bytes) is gone before the handler is awaited.
            let (envelope, from_mailbox) = {
                let (next, from_mailbox) = if let Some(msg) = cell.receiver.try_system_if_pending()
                {
                    (Next::System(msg), false)
                } else if let Some(envelope) = cell.ctx.pop_unstashed() {
                    (Next::User(envelope), false)
                } else if let Some(next) = cell.receiver.try_next() {
                    (next, true)
                } else {
                    handled = 0;
                    if let (Some(c), Some(start)) = (&counters, run_start.take()) {
                        c.pause(start);
                    }
                    let next = match cell.ctx.receive_timeout() {
                        None => Some(cell.receiver.next().await),
                        // `next` takes a message only when it returns it, so a timeout loses nothing.
                        // Boxed: a timer is 136 bytes that every actor's task would carry, used
                        // only by actors that set a receive timeout.
                        Some(idle) => Box::pin(tokio::time::timeout(idle, cell.receiver.next()))
                            .await
                            .ok(),
                    };
                    run_start = counters.as_ref().map(|c| c.resume());
                    match next {
                        Some(next) => (next, true),
                        None => match cell.ctx.receive_timeout_message() {
                            Some(envelope) => (Next::User(envelope), false),
                            None => continue,
                        },
                    }
                };
                match next {
                    Next::System(msg) => {
                        failure = Box::pin(on_system(
                            msg,
                            &mut actor,
                            &mut cell.source,
                            &mut cell.ctx,
                            &mut cell.receiver,
                        ))
                        .await
                        .map(Box::new);
                        continue;
                    }
                    Next::User(envelope) => (envelope, from_mailbox),
                }
            };
            if handled == 0 && cell.ctx.dispatcher().throughput_deadline().is_some() {
                slice_start = Instant::now();
            }
            if let Some(c) = counters.as_ref().filter(|_| from_mailbox) {
                c.taken(taken);
                taken += 1;
            }
            failure = if spans {
                let span = tracing::info_span!(
                    "rally.handle",
                    actor = %cell.mailbox.path,
                    message_type = envelope.type_name()
                );
                // Boxed: the span would enlarge every actor's task.
                Box::pin(envelope.handle(&mut actor, &mut cell.ctx).instrument(span)).await
            } else {
                envelope.handle(&mut actor, &mut cell.ctx).await
            }
            .err()
            .map(Box::new);
            if let Some(c) = counters.as_ref().filter(|_| from_mailbox) {
                c.completed();
            }
            handled += 1;
            let out_of_time = cell
                .ctx
                .dispatcher()
                .throughput_deadline()
                .is_some_and(|d| slice_start.elapsed() >= d);
            if handled >= cell.ctx.dispatcher().throughput() || out_of_time {
                handled = 0;
                if let Some(c) = &counters {
                    if let Some(start) = run_start.take() {
                        c.pause(start);
                    }
                    c.yielding();
                }
                cell.ctx.dispatcher().yield_now().await;
                if let Some(c) = &counters {
                    c.yielded();
                    run_start = Some(c.resume());
                }
            }
        }
        if let (Some(c), Some(start)) = (&counters, run_start.take()) {
            c.pause(start);
        }

        Box::pin(stop_cell(actor, cell)).await;
    }
}

/// Handles one system message in the running state; returns a failure to act on.
async fn on_system<A: Actor>(
    msg: SystemMsg<A>,
    actor: &mut A,
    source: &mut Source<A>,
    ctx: &mut Context<A>,
    receiver: &mut MailboxReceiver<A>,
) -> Option<Failure> {
    match msg {
        SystemMsg::Stop => {
            ctx.stopping = true;
            None
        }
        SystemMsg::Watch(watcher) => {
            ctx.add_watcher(watcher);
            None
        }
        SystemMsg::Unwatch(watcher) => {
            ctx.remove_watcher(watcher);
            None
        }
        SystemMsg::Priority(envelope) => envelope.handle(actor, ctx).await.err(),
        SystemMsg::ChildStopped(child) => {
            ctx.remove_child(child);
            None
        }
        SystemMsg::ChildFailed { child, failure } => supervise_child(actor, ctx, child, failure),
        SystemMsg::Supervise(decision) => apply(decision, actor, source, ctx, receiver).await,
    }
}

/// The parent's side of supervision: decide, and tell the child (or all children).
fn supervise_child<A: Actor>(
    actor: &A,
    ctx: &mut Context<A>,
    child: crate::ActorId,
    failure: Failure,
) -> Option<Failure> {
    let strategy = actor.supervisor_strategy();
    let entry = ctx.child_mut(child)?;
    let decision = strategy.decide(&failure, &mut entry.record, Instant::now());
    tracing::debug!(%child, %failure, ?decision, "supervising a failed child");
    match (&decision, strategy.scope()) {
        (Decision::Escalate, _) => {
            entry.control.supervise(Decision::Stop);
            Some(Failure {
                message: format!("child {child} failed: {failure}"),
                panicked: false,
            })
        }
        (Decision::Restart { .. } | Decision::Stop, Scope::AllForOne) => {
            for sibling in ctx.child_entries() {
                sibling.control.supervise(decision.clone());
            }
            None
        }
        _ => {
            entry.control.supervise(decision);
            None
        }
    }
}

/// The failed child's side: report, then wait (handling only system messages) for the verdict.
async fn await_decision<A: Actor>(
    ctx: &mut Context<A>,
    mailbox: &Mailbox<A>,
    receiver: &mut MailboxReceiver<A>,
    failure: Failure,
) -> Decision {
    if failure.panicked {
        // Logged here, once: the panic hook stayed quiet for it (see `panic`).
        tracing::error!(actor = %ctx.myself().path(), panic = %failure.message, "a handler panicked");
    } else {
        tracing::debug!(actor = %ctx.myself().path(), %failure, "actor failed");
    }
    ctx.parent.child_failed(mailbox, failure);
    let mut deferred = Vec::new();
    let decision = loop {
        match receiver.next_system().await {
            SystemMsg::Supervise(decision) => break decision,
            SystemMsg::Stop => break Decision::Stop,
            SystemMsg::Watch(watcher) => {
                ctx.add_watcher(watcher);
            }
            SystemMsg::Unwatch(watcher) => {
                ctx.remove_watcher(watcher);
            }
            SystemMsg::ChildStopped(child) => {
                ctx.remove_child(child);
            }
            // A suspended actor handles nothing else; these wait until it resumes.
            SystemMsg::Priority(envelope) => deferred.push(envelope),
            SystemMsg::ChildFailed { child, failure } => {
                if let Some(entry) = ctx.child_mut(child) {
                    // Its parent is itself suspended: the child stops, as its parent would be
                    // restarted or stopped (and its children with it) anyway.
                    tracing::debug!(%child, %failure, "child failed while its parent was suspended");
                    entry.control.supervise(Decision::Stop);
                }
            }
        }
    };
    for envelope in deferred.into_iter().rev() {
        ctx.push_unstashed_front(envelope);
    }
    decision
}

/// Carries out a supervision decision on this actor; returns a new failure if restarting fails.
async fn apply<A: Actor>(
    decision: Decision,
    actor: &mut A,
    source: &mut Source<A>,
    ctx: &mut Context<A>,
    receiver: &mut MailboxReceiver<A>,
) -> Option<Failure> {
    match decision {
        Decision::Resume => None,
        Decision::Stop | Decision::Escalate => {
            ctx.stopping = true;
            None
        }
        Decision::Restart { delay, failure } => {
            if !delay.is_zero() {
                let sleep = tokio::time::sleep(delay);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        () = &mut sleep => break,
                        msg = receiver.next_system() => match msg {
                            SystemMsg::Stop => {
                                ctx.stopping = true;
                                return None;
                            }
                            SystemMsg::Watch(w) => ctx.add_watcher(w),
                            SystemMsg::Unwatch(w) => ctx.remove_watcher(w),
                            SystemMsg::ChildStopped(child) => { ctx.remove_child(child); }
                            SystemMsg::Priority(envelope) => ctx.push_unstashed_back(envelope),
                            SystemMsg::ChildFailed { .. } | SystemMsg::Supervise(_) => {}
                        },
                    }
                }
            }
            quiet(actor.pre_restart(ctx, &failure.message)).await;
            stop_children(ctx, receiver).await;
            ctx.cancel_all_timers();
            source.restart(actor);
            quiet(actor.post_restart(ctx)).await;
            guarded(actor.started(ctx)).await.err()
        }
    }
}

/// Stops every child and waits until each has reported that it stopped.
async fn stop_children<A: Actor>(ctx: &mut Context<A>, receiver: &mut MailboxReceiver<A>) {
    for child in ctx.child_entries() {
        child.control.stop();
    }
    while ctx.has_children() {
        match receiver.next_system().await {
            SystemMsg::ChildStopped(child) => {
                ctx.remove_child(child);
            }
            SystemMsg::Watch(w) => {
                ctx.add_watcher(w);
            }
            SystemMsg::Unwatch(w) => {
                ctx.remove_watcher(w);
            }
            SystemMsg::Stop => ctx.stopping = true,
            SystemMsg::Priority(envelope) => ctx.push_unstashed_back(envelope),
            SystemMsg::ChildFailed { child, .. } => {
                if let Some(entry) = ctx.child_mut(child) {
                    entry.control.supervise(Decision::Stop);
                }
            }
            SystemMsg::Supervise(_) => {}
        }
    }
}

/// The stop sequence: children, `stopped`, timers, mailbox to dead letters, watchers, parent.
async fn stop<A: Actor>(
    mut actor: A,
    mut ctx: Context<A>,
    mut receiver: MailboxReceiver<A>,
    mailbox: Arc<Mailbox<A>>,
    registered: bool,
) {
    stop_children(&mut ctx, &mut receiver).await;
    quiet(actor.stopped(&mut ctx)).await;
    ctx.cancel_all_timers();
    ctx.abort_tasks();
    drop(actor);

    let reason = ctx.take_stop_reason().unwrap_or(TerminationReason::Stopped);
    // Set as the mailbox closes, so a watch arriving after the close can read it.
    let (queued, system) = receiver.close(reason.clone());
    let dead = ctx.system().dead_letters().clone();
    let path = mailbox.path.clone();
    let bury = |envelope: Envelope<A>| {
        dead.record(&path, envelope.type_name(), DeadLetterReason::Stopped);
        drop(envelope.reject(ReplyError::Stopped));
    };
    for envelope in ctx.drain_stash() {
        bury(envelope);
    }
    for envelope in queued {
        bury(envelope);
    }
    for msg in system {
        match msg {
            SystemMsg::Watch(watcher) => {
                ctx.add_watcher(watcher);
            }
            SystemMsg::Unwatch(watcher) => {
                ctx.remove_watcher(watcher);
            }
            SystemMsg::Priority(envelope) => bury(envelope),
            _ => {}
        }
    }
    let terminated = Terminated::new(mailbox.id, path.clone(), reason);
    let fixed = ctx.system().take_spawn_watcher(mailbox.id);
    for watcher in ctx.take_watchers().values().chain(&fixed) {
        watcher.notify(terminated.clone());
    }
    if registered {
        ctx.system().unregister(&path);
    }
    if mailbox.monitor.counters().is_some() {
        ctx.system().monitor().remove_actor(mailbox.id);
    }
    ctx.parent.child_stopped(&*mailbox);
}

/// [`stop`] with the parts of the cell (a plain function: an `async fn` would hold the cell
/// and the parts both).
fn stop_cell<A: Actor>(actor: A, cell: Cell<A>) -> impl Future<Output = ()> + Send {
    let Cell {
        ctx,
        receiver,
        mailbox,
        registered,
        ..
    } = cell;
    stop(actor, ctx, receiver, mailbox, registered)
}

/// Runs a fallible hook or handler, turning an error or a panic into a [`Failure`].
async fn guarded<T>(future: impl Future<Output = ActorResult<T>>) -> Result<T, Failure> {
    Failure::of(catch(future).await)
}

/// Runs an infallible hook; a panic in it is logged, not propagated.
async fn quiet(future: impl Future<Output = ()>) {
    if let Err(panic) = catch(future).await {
        tracing::warn!(%panic, "an actor hook panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Idle;
    impl Actor for Idle {}

    struct Ping;
    impl crate::Message for Ping {
        type Reply = ();
    }
    impl crate::Handler<Ping> for Idle {
        async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> crate::ActorResult<()> {
            Ok(())
        }
    }

    /// What an idle actor carries: its task (the `run` future plus 104 bytes of tokio's task
    /// cell, rounded up to 128: 392 bytes is the most that fits a 512-byte cell) and its
    /// mailbox. Growing either grows every actor; the bounds are today's sizes.
    #[test]
    fn an_idle_actor_stays_small() {
        eprintln!(
            "ctx {} mailbox {}",
            std::mem::size_of::<Context<Idle>>(),
            std::mem::size_of::<Mailbox<Idle>>()
        );
        // assert ctx
        assert!(std::mem::size_of::<Mailbox<Idle>>() <= 176);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let system = crate::ActorSystem::new("size");
            let (mailbox, receiver) = Mailbox::<Idle>::new(
                crate::ActorId(1),
                "/user/idle".into(),
                crate::MailboxConfig::default(),
                crate::monitor::Slot::default(),
                crate::EntryFilters::default(),
            );
            let myself = crate::ActorRef::local(mailbox.clone(), system.dead_letters().clone());
            let dispatcher = system.default_dispatcher().clone();
            let ctx = Context::new(myself, system, dispatcher, mailbox.clone());
            let task = run(Cell {
                source: crate::props::Source::Instance(Some(Idle)),
                ctx,
                receiver,
                mailbox,
                registered: false,
            });
            let size = std::mem::size_of_val(&task);
            eprintln!("task {size}");
            assert!(
                size <= 392,
                "the run future of an idle actor is {size} bytes"
            );
        });
    }

    /// An actor that was asked once keeps room for one queued message and one cached reply
    /// slot, not the four each that a growing buffer starts with: about 100 bytes per idle
    /// actor (a virtual actor at rest, say); the one slot is held in the context, with no
    /// buffer of its own. A burst still grows the queue as usual.
    #[test]
    fn an_actor_asked_once_keeps_room_for_one() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let system = crate::ActorSystem::new("room");
            let (mailbox, _receiver) = Mailbox::<Idle>::new(
                crate::ActorId(1),
                "/user/idle".into(),
                crate::MailboxConfig::default(),
                crate::monitor::Slot::default(),
                crate::EntryFilters::default(),
            );
            let ask = || crate::Envelope::new(Ping, crate::ReplyTo::ignore());
            assert!(mailbox.enqueue(ask()).is_ok());
            assert_eq!(mailbox.user_capacity(), 1);
            for _ in 0..5 {
                assert!(mailbox.enqueue(ask()).is_ok());
            }
            assert!(mailbox.user_capacity() >= 6, "a burst grows the queue");

            let myself = crate::ActorRef::local(mailbox.clone(), system.dead_letters().clone());
            let dispatcher = system.default_dispatcher().clone();
            let mut ctx = Context::new(myself, system, dispatcher, mailbox);
            let slot = ctx.reply_slot::<()>();
            ctx.return_reply_slot(slot);
            assert_eq!(ctx.reply_slot_capacity(), 1);
            let (first, second) = (ctx.reply_slot::<()>(), ctx.reply_slot::<u8>());
            ctx.return_reply_slot(first);
            ctx.return_reply_slot(second);
            assert!(
                ctx.reply_slot_capacity() >= 2,
                "a second reply type still fits"
            );
        });
    }
}
