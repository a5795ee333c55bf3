//! Two nodes in one process over real loopback TCP (and over the in-memory transport): tell,
//! ask, request, ordering, watch, and what the sender is told about bad sends.

#[path = "support/nodes.rs"]
mod nodes;

use std::sync::Arc;
use std::time::Duration;

use nodes::{
    Blob, Check, Echo, Fill, Quit, Record, T, Target, Unregistered, client_node, config,
    target_node, target_node_on,
};
use rally_actor::{AskError, DeadLetter, DeadLetterReason, SendError, Terminated};
use rally_remote::transport::MemoryTransport;
use rally_test::Probe;
use rally_test::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tell_ask_and_ordering_across_nodes() {
    let (_b_system, b) = target_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert!(!target.is_local());
    assert_eq!(target.ask(Echo(7), T).await, Ok(7));
    const N: u64 = 50_000;
    for i in 1..=N {
        target.tell(Record(i)).unwrap();
    }
    // Check is handled after every Record before it: per-pair ordering.
    assert_eq!(target.ask(Check, T).await, Ok((N, true)));
    let stats = a.stats();
    assert!(
        stats.writes < stats.messages_sent,
        "writes were batched: {stats:?}"
    );
}

/// A burst sent by a task on the runtime leaves in a few writes, not one per message, even when
/// the link was quiet before it (a lone frame's sender outside the runtime writes it itself;
/// a task must not, or a burst of 50 makes 50 writes: a one-client ping-pong lost 80% of its
/// rate that way). On two cores shared with the other tests of this binary, the sending task
/// can lose its thread in the middle of a burst while the writer, on the other one, writes
/// what is queued so far: a burst so cut takes more writes, and is tried again (after another
/// quiet spell). One write per message fails every try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_after_a_quiet_spell_is_batched() {
    const BURST: u64 = 50;
    let (_b_system, b) = target_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    let mut tries = Vec::new();
    for attempt in 0..5 {
        // One lone round trip: the last write carried one frame, frames "come alone".
        assert_eq!(target.ask(Echo(attempt), T).await, Ok(attempt));
        let before = a.stats();
        for i in 1..=BURST {
            target.tell(Record(attempt * BURST + i)).unwrap();
        }
        assert_eq!(
            target.ask(Check, T).await,
            Ok(((attempt + 1) * BURST, true))
        );
        let after = a.stats();
        let writes = after.writes - before.writes;
        if writes < BURST / 2 {
            return;
        }
        tries.push(writes);
    }
    panic!("{tries:?} writes for bursts of {BURST} messages and an ask");
}

/// Replies to a burst of requests handed to many actors (one reply each, as virtual actors
/// give) leave in a few writes, not one per reply: each reply's wake-up put the writer ahead of
/// the actors about to reply too, so it wrote one reply at a time (the members of grain-ping
/// made about one `sendto` per reply). Now the read that brought the requests holds the
/// replies until every actor it woke has run, and the thread the last one ran on writes them:
/// the writer task is not woken for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_of_many_actors_to_one_burst_are_batched() {
    const BURST: u64 = 50;
    let (b_system, b) = target_node("b", config()).await;
    for i in 0..BURST {
        let actor = b_system.spawn(Target::new()).expect("spawn");
        b.expose(&format!("t-{i}"), &actor).expect("expose");
    }
    let (_a_system, a) = client_node("a", config()).await;
    let targets: Vec<_> = (0..BURST)
        .map(|i| a.lookup::<Target>(b.address(), &format!("t-{i}")))
        .collect();
    // One lone round trip to each first: the link is up and its last writes carried one frame.
    for (i, target) in (0..).zip(&targets) {
        assert_eq!(target.ask(Echo(i), T).await, Ok(i));
    }
    // A burst whose requests reached `b` in a few reads (the sender's writer may start writing
    // while this task is still sending, so a burst can arrive spread over many reads; it is
    // sent again then): its replies leave in at most one write per read that brought them,
    // plus a heartbeat's, and the writer task is not woken for them.
    for attempt in 1..=20 {
        let before = b.stats();
        // Every request leaves before any reply is awaited (one batch from this task).
        let answers: Vec<_> = (0..)
            .zip(&targets)
            .map(|(i, target)| {
                let (reply, answer) = rally_actor::ReplyTo::channel();
                target.send_with(Echo(i), reply).unwrap();
                answer
            })
            .collect();
        for (i, answer) in (0..).zip(answers) {
            assert_eq!(answer.await.unwrap(), Ok(i));
        }
        let after = b.stats();
        assert_eq!(after.replies_sent - before.replies_sent, BURST);
        let reads = after.reads - before.reads;
        if reads > 4 {
            eprintln!("burst {attempt}: the requests came in {reads} reads; again");
            continue;
        }
        let writes = after.writes - before.writes;
        assert!(
            writes <= reads + 1,
            "{writes} writes for {BURST} replies from {BURST} actors, asked in {reads} reads"
        );
        // At most a heartbeat's (the control lane's writer is woken once a second).
        let wakeups = after.writer_wakeups - before.writer_wakeups;
        assert!(
            wakeups <= 2,
            "{wakeups} writer wake-ups for {BURST} replies"
        );
        return;
    }
    panic!("no burst of the 20 reached the other node in at most 4 reads");
}

/// Many tasks asking in closed loops (each asks again when answered, as grain-ping's loops do)
/// share writes: each ask's wake-up put the writer ahead of the tasks about to ask too, and
/// once a write carried one frame the writer stopped yielding, so one-ask writes kept
/// themselves going (grain-ping's client made up to one `sendto` per two requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_of_many_tasks_in_closed_loops_share_writes() {
    const TASKS: u64 = 50;
    const ROUNDS: u64 = 40;
    let (_b_system, b) = target_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    // One lone round trip: the last write carried one frame.
    assert_eq!(target.ask(Echo(0), T).await, Ok(0));
    let before = a.stats();
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let target = target.clone();
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let n = i * ROUNDS + round;
                    assert_eq!(target.ask(Echo(n), T).await, Ok(n));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let after = a.stats();
    let writes = after.writes - before.writes;
    let asks = after.messages_sent - before.messages_sent;
    assert_eq!(asks, TASKS * ROUNDS);
    assert!(
        writes < asks / 4,
        "{writes} writes for {asks} asks from {TASKS} tasks in closed loops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_of_this_nodes_own_address_is_local() {
    let (_system, b) = target_node("b", config()).await;
    let target = b.lookup::<Target>(b.address(), "target");
    assert!(target.is_local());
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sends_are_refused_at_the_sender_with_the_message_back() {
    let mut small = config();
    small.max_frame_bytes = 64 * 1024;
    let (_b_system, b) = target_node("b", small.clone()).await;
    let (_a_system, a) = client_node("a", small).await;
    let target = a.lookup::<Target>(b.address(), "target");
    match target.tell(Unregistered) {
        Err(SendError::Refused(Unregistered, why)) => {
            assert!(why.contains("not registered"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    match target.tell(Blob(vec![0; 100_000])) {
        Err(SendError::Refused(Blob(back), why)) => {
            assert_eq!(back.len(), 100_000);
            assert!(why.contains("maximum"), "{why}");
        }
        other => panic!(
            "expected a size refusal, got {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
    // Nothing was put on the wire; the association still works.
    assert_eq!(target.ask(Blob(vec![1; 1000]), T).await, Ok(1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_answers_asks_with_an_error() {
    let (_b_system, b) = target_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let nobody = a.lookup::<Target>(b.address(), "nobody");
    assert!(matches!(
        nobody.ask(Echo(1), T).await,
        Err(AskError::Undeliverable(_))
    ));
    nobody.tell(Echo(2)).unwrap();
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(3), T).await, Ok(3));
    assert!(b.stats().unknown_recipient >= 2);
}

/// A message to a name nobody exposed on the peer is a dead letter on the sender, at once,
/// under its manifest; an ask also fails with `Undeliverable`, not at its timeout. (Before, a
/// tell vanished without a trace on the sender's side, and so did a request whose reply goes
/// to an actor: `remote-ping-pong --clients 60` waited 120 s per row for echoes that did not
/// exist.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_a_name_nobody_exposed_is_a_dead_letter_at_the_sender() {
    let (_b_system, b) = target_node("b", config()).await;
    let (a_system, a) = client_node("a", config()).await;
    let mut dead = Probe::<DeadLetter>::spawn(&a_system);
    a_system
        .event_stream()
        .subscribe(dead.actor().recipient::<DeadLetter>());
    let nobody = a.lookup::<Target>(b.address(), "nobody");
    nobody.tell(Record(1)).unwrap();
    let letter = dead.expect_msg(T).await.expect("the tell's dead letter");
    assert_eq!(&*letter.recipient, format!("{}/nobody", b.address()));
    assert_eq!(letter.message_type, "test.Record");
    assert_eq!(letter.reason, DeadLetterReason::Unreachable);
    // Far longer than the test waits: the answer is the peer's, not the timeout's.
    match nobody.ask(Echo(2), Duration::from_secs(600)).await {
        Err(AskError::Undeliverable(why)) => assert!(why.contains("exposed"), "{why}"),
        other => panic!("expected Undeliverable, got {other:?}"),
    }
    let letter = dead.expect_msg(T).await.expect("the ask's dead letter");
    assert_eq!(letter.message_type, "test.Echo");
    assert_eq!(a_system.dead_letters().count(), 2);
    assert_eq!(b.stats().unknown_recipient, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_a_remote_actor_delivers_terminated_when_it_stops() {
    let (_b_system, b) = target_node("b", config()).await;
    let (a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    // No wait for the watch to reach node B: a watch that arrives after the stop is answered
    // with Terminated at once.
    target.tell(Quit).unwrap();
    let terminated = probe.expect_msg(T).await.unwrap();
    assert_eq!(terminated.path, target.path().clone());
    assert!(matches!(
        target.ask(Echo(2), T).await,
        Err(AskError::Stopped | AskError::Undeliverable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_leave_terminates_watchers_at_once() {
    let (_b_system, b) = target_node("b", config()).await;
    let (a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    // Plain async code can await the same end, and hears why.
    let ended = tokio::spawn(target.terminated());
    b.leave(Duration::from_secs(1)).await;
    let terminated = probe.expect_msg(Duration::from_secs(2)).await.unwrap();
    // The watching actor hears the same reason as the awaiting code.
    assert_eq!(terminated.reason, rally_actor::TerminationReason::NodeDown);
    assert_eq!(
        tokio::time::timeout(T, ended).await.unwrap().unwrap(),
        rally_actor::TerminationReason::NodeDown
    );
}

/// A leave does not wait out its flush time for a peer that is gone: the lanes to it have no
/// connection and back off between attempts, so what the leave queues for it (its notice) has
/// nowhere to go, and waiting for their next attempt would only delay the leave. The peer
/// here has been gone for some seconds, so the lanes' backoff has grown to seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_does_not_wait_for_a_peer_that_is_gone() {
    let (_b_system, b) = target_node("b", config()).await;
    let mut a_config = config();
    a_config.max_reconnect_backoff = Duration::from_secs(600);
    let (a_system, a) = client_node("a", a_config).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    // B leaves and stops listening: A's lanes to it find nobody at its address from now on.
    b.leave(T).await;
    drop(b);
    probe.expect_msg(T).await.expect("A hears that B left");
    // The attempts to reconnect back off 100 ms, 200 ms, 400 ms...: after six seconds the
    // lanes wait seconds between two.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let started = std::time::Instant::now();
    let left = tokio::time::timeout(Duration::from_secs(3), a.leave(Duration::from_secs(60))).await;
    assert!(
        left.is_ok(),
        "the leave waited for a peer that is gone (still waiting after {:?})",
        started.elapsed()
    );
}

/// A reply queued just before its node leaves reaches the asker: the leave notice, which
/// travels on the control lane, does not overtake it on its ordinary lane (the asker would
/// otherwise fail the ask as `OutcomeUnknown` while its reply is still on the way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_queued_before_a_leave_reaches_the_asker() {
    let (_b_system, b) = target_node("b", config()).await;
    let (_a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    // Large enough that its writes take longer than the leave notice's.
    const LEN: usize = 4 << 20;
    let before = b.stats().replies_sent;
    let ask = tokio::spawn(async move { target.ask(Fill(LEN), T).await.map(|blob| blob.0) });
    // B leaves as soon as the reply is queued on its lane.
    eventually("the reply is queued", T, async || {
        b.stats().replies_sent != before
    })
    .await;
    b.leave(T).await;
    let blob = ask
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the reply queued before the leave was lost: {e:?}"));
    assert_eq!(blob.len(), LEN);
    assert!(blob.iter().all(|&byte| byte == 7));
}

#[tokio::test]
async fn the_in_memory_transport_runs_the_same_protocol() {
    let net = Arc::new(MemoryTransport::default());
    let mut config_b = config();
    config_b.host = "b".into();
    config_b.port = 1;
    let mut config_a = config();
    config_a.host = "a".into();
    config_a.port = 1;
    let (_b_system, b) = target_node_on("b", config_b, net.clone()).await;
    let (_a_system, a) = target_node_on("a", config_a, net).await;
    let target = a.lookup::<Target>(b.address(), "target");
    for i in 0..100 {
        assert_eq!(target.ask(Echo(i), T).await, Ok(i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_kind_is_spawned_on_the_chosen_node() {
    let (_b_system, b) = client_node("b", config()).await;
    b.register_kind("target", Target::new);
    let (_a_system, a) = client_node("a", config()).await;
    let spawned = a
        .spawn_on::<Target>(b.address(), "target", "fresh", T)
        .await
        .unwrap();
    assert_eq!(spawned.ask(Echo(11), T).await, Ok(11));
    // The name is now taken; an unknown kind is refused with a reason.
    let again = a
        .spawn_on::<Target>(b.address(), "target", "fresh", T)
        .await;
    assert!(
        matches!(again, Err(rally_remote::RemoteSpawnError::Refused(why)) if why.contains("fresh"))
    );
    let unknown = a.spawn_on::<Target>(b.address(), "nope", "x", T).await;
    assert!(
        matches!(unknown, Err(rally_remote::RemoteSpawnError::Refused(why)) if why.contains("nope"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_remote_ref_stops_the_actor_there() {
    let (_b_system, b) = target_node("b", config()).await;
    let (a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    target.stop();
    assert_eq!(
        probe.expect_msg(T).await.unwrap().path,
        target.path().clone()
    );
}
