//! Tracing in one process, exported over OTLP/gRPC to a real receiver on loopback: the spans of
//! a chain of local actors and how they link, sampling that follows the caller's decision (an
//! unrecorded trace exports nothing and says so downstream; a request from outside any actor
//! is recorded whole or not at all), a failing handler's span, and the settings `install`
//! refuses.

use std::collections::HashMap;
use std::time::Duration;

use rally::otel::{InstallError, Tracing};
use rally::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Context, Handler, Message, RequestContext,
    TraceParent,
};
use rally_test::otlp::{CONSUMER, INTERNAL, PRODUCER, Received, Receiver};

const SECOND: Duration = Duration::from_secs(5);

/// The first actor of the chain: asks the second.
struct First {
    next: ActorRef<Second>,
}
impl Actor for First {}

/// The second: answers with the traceparent its handler sees, or fails when asked to.
struct Second;
impl Actor for Second {}

struct Start {
    fail: bool,
}
impl Message for Start {
    type Reply = Option<TraceParent>;
}

struct Leaf {
    fail: bool,
}
impl Message for Leaf {
    type Reply = Option<TraceParent>;
}

impl Handler<Start> for First {
    async fn handle(
        &mut self,
        msg: Start,
        _: &mut Context<Self>,
    ) -> ActorResult<Option<TraceParent>> {
        match self.next.ask(Leaf { fail: msg.fail }, SECOND).await {
            Ok(seen) => Ok(seen),
            Err(e) if msg.fail => Err(e.to_string().into()),
            Err(e) => panic!("the second actor answers: {e}"),
        }
    }
}

impl Handler<Leaf> for Second {
    async fn handle(
        &mut self,
        msg: Leaf,
        ctx: &mut Context<Self>,
    ) -> ActorResult<Option<TraceParent>> {
        if msg.fail {
            return Err("the leaf refuses".into());
        }
        Ok(ctx.request_context().and_then(|c| c.traceparent()))
    }
}

/// A system traced to `receiver` as service `service`, with the chain spawned after the
/// filter; its `Tracing`, and the first actor.
async fn traced_chain(
    receiver: &Receiver,
    service: &str,
    ratio: f64,
) -> (ActorSystem, Tracing, ActorRef<First>) {
    let system = ActorSystem::new(service);
    let tracing = Tracing::builder()
        .endpoint(receiver.endpoint())
        .service_name(service)
        .member(format!("{service}-member"))
        .sampling_ratio(ratio)
        .install()
        .expect("valid settings");
    system.add_call_filter(tracing.filter());
    let second = system.spawn(Second).expect("spawns");
    let first = system.spawn(First { next: second }).expect("spawns");
    (system, tracing, first)
}

/// Asks the chain's first actor to start, inside `context`: a request entering the system
/// there. Its answer is the traceparent the leaf's handler saw.
async fn start_in(
    system: &ActorSystem,
    first: &ActorRef<First>,
    context: RequestContext,
    fail: bool,
) -> Result<Option<TraceParent>, AskError> {
    system
        .in_context(context, first.ask(Start { fail }, SECOND))
        .await
}

/// Waits until both actors of the chain finished what they handled before: a last request,
/// whose trace is not recorded, through both. The reply to an ask comes before the handler's
/// filters run their `after` (which ends its span), and an actor handles the next message only
/// after that; without this, a flush could come before the last `handle` span had ended, and
/// that span would wait for the exporter's next timer.
async fn settled(system: &ActorSystem, first: &ActorRef<First>) {
    let unrecorded: TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        .parse()
        .expect("a traceparent");
    let context = RequestContext::new().with_traceparent(unrecorded);
    start_in(system, first, context, false)
        .await
        .expect("answered");
}

fn of<'a>(spans: &'a [Received], service: &str, kind: i32, name: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|s| s.service() == service && s.kind == kind && s.name.starts_with(name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_chain_is_one_trace_of_send_wait_and_handle_spans_linked_in_order() {
    let mut receiver = Receiver::start().await;
    let (system, tracing, first) = traced_chain(&receiver, "local-chain", 1.0).await;
    let seen = start_in(&system, &first, RequestContext::new(), false)
        .await
        .expect("answered")
        .expect("the leaf's handler sees a traceparent");
    settled(&system, &first).await;
    tracing.flush().await.expect("exported");
    let spans = receiver
        .wait_for(SECOND, |s| {
            of(s, "local-chain", CONSUMER, "handle").len() >= 2
        })
        .await;
    let [send_start] = of(&spans, "local-chain", PRODUCER, "send")
        .into_iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect::<Vec<_>>()[..]
    else {
        panic!("one root send: {spans:#?}")
    };
    let child_of = |parent: &Received, kind: i32| -> Vec<&Received> {
        spans
            .iter()
            .filter(|s| s.kind == kind && s.parent_span_id == parent.span_id)
            .collect()
    };
    let [handle_start] = child_of(send_start, CONSUMER)[..] else {
        panic!("one handler of Start: {spans:#?}")
    };
    let [send_leaf] = child_of(handle_start, PRODUCER)[..] else {
        panic!("one send from Start's handler: {spans:#?}")
    };
    let [handle_leaf] = child_of(send_leaf, CONSUMER)[..] else {
        panic!("one handler of Leaf: {spans:#?}")
    };
    assert!(send_start.name.contains("Start") && handle_start.name.contains("Start"));
    assert!(send_leaf.name.contains("Leaf") && handle_leaf.name.contains("Leaf"));
    // One trace, and what the leaf's handler sees is its own span, recorded.
    for s in [handle_start, send_leaf, handle_leaf] {
        assert_eq!(s.trace_id, send_start.trace_id);
    }
    assert_eq!(seen.trace_id.to_vec(), send_start.trace_id);
    assert_eq!(seen.span_id.to_vec(), handle_leaf.span_id);
    assert!(seen.is_sampled());
    // In order, and each handler's span covers the sends it made.
    assert!(send_start.start_ns <= handle_start.start_ns);
    assert!(handle_start.start_ns <= send_leaf.start_ns && send_leaf.end_ns <= handle_start.end_ns);
    assert!(
        send_leaf.start_ns <= handle_leaf.start_ns && handle_leaf.end_ns <= handle_start.end_ns
    );
    // The process's resource and the spans' attributes.
    assert_eq!(
        handle_leaf.resource.get("rally.member").map(String::as_str),
        Some("local-chain-member")
    );
    assert!(
        handle_leaf
            .attribute("rally.actor.path")
            .is_some_and(|p| !p.is_empty())
    );
    assert!(
        send_leaf
            .attribute("rally.target")
            .is_some_and(|t| !t.is_empty())
    );
    // Each message's time in the mailbox (known for messages that carry a context): a child
    // of its send, from after the send to the handler's start.
    for (send, handle) in [(send_start, handle_start), (send_leaf, handle_leaf)] {
        let [wait] = child_of(send, INTERNAL)[..] else {
            panic!("one wait for {}: {spans:#?}", send.name)
        };
        assert!(wait.name.starts_with("wait "), "{wait:?}");
        // Its name says which message; what else there is to know is on its `handle`.
        assert!(wait.attributes.is_empty(), "{wait:?}");
        assert!(send.start_ns <= wait.start_ns && wait.start_ns <= wait.end_ns);
        assert_eq!(
            wait.end_ns, handle.start_ns,
            "the wait ends where the handler starts"
        );
    }
    eprintln!(
        "OBSERVED a local chain: {}",
        spans
            .iter()
            .map(|s| format!("{} ({} ns)", s.name, s.end_ns - s.start_ns))
            .collect::<Vec<_>>()
            .join(", ")
    );
    drop(receiver);
    system.shutdown().await.expect("stops");
}

/// A request from code outside any actor is where a trace starts: at a ratio of one half,
/// each of 40 requests through the chain is recorded whole (its send the only root, every hop
/// under it) or not at all. The history is what the receiver got, checked request by request:
/// no trace starts at a hop in the middle of a request whose entry was not recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_outside_any_actor_is_recorded_whole_or_not_at_all() {
    let mut receiver = Receiver::start().await;
    let (system, tracing, first) = traced_chain(&receiver, "entry", 0.5).await;
    let mut recorded = Vec::new();
    let mut unrecorded = 0;
    for _ in 0..40 {
        let seen = first
            .ask(Start { fail: false }, SECOND)
            .await
            .expect("answered");
        match seen {
            Some(seen) => {
                assert!(
                    seen.is_sampled(),
                    "a hop that sees a trace sees a recorded one"
                );
                recorded.push(seen.trace_id.to_vec());
            }
            None => unrecorded += 1,
        }
    }
    // At one half, all 40 alike is a chance of 2 in 10^12.
    assert!(
        !recorded.is_empty() && unrecorded > 0,
        "{} recorded, {unrecorded} not",
        recorded.len()
    );
    settled(&system, &first).await;
    tracing.flush().await.expect("exported");
    let spans = receiver
        .wait_for(SECOND, |s| {
            of(s, "entry", CONSUMER, "handle").len() >= 2 * recorded.len()
        })
        .await;
    let mut traces: HashMap<Vec<u8>, Vec<&Received>> = HashMap::new();
    for span in spans.iter().filter(|s| s.service() == "entry") {
        traces.entry(span.trace_id.clone()).or_default().push(span);
    }
    assert_eq!(
        traces.len(),
        recorded.len(),
        "a trace for each recorded request and no other: {traces:#?}"
    );
    for trace in &recorded {
        let spans = &traces[trace];
        // send, wait and handle of Start, then of Leaf.
        assert_eq!(spans.len(), 6, "{spans:#?}");
        let roots: Vec<&&Received> = spans
            .iter()
            .filter(|s| s.parent_span_id.is_empty())
            .collect();
        assert!(
            matches!(roots[..], [root] if root.kind == PRODUCER && root.name.contains("Start")),
            "the entry's send is the only root: {spans:#?}"
        );
    }
    eprintln!(
        "OBSERVED {} of 40 requests recorded whole, {unrecorded} not at all",
        recorded.len()
    );
    drop(receiver);
    system.shutdown().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecorded_trace_exports_nothing_and_tells_the_next_hop_so() {
    let mut receiver = Receiver::start().await;
    let (off_system, off, off_first) = traced_chain(&receiver, "never-sampled", 0.0).await;
    let (on_system, on, on_first) = traced_chain(&receiver, "always-sampled", 1.0).await;
    let mut seen = Vec::new();
    for _ in 0..20 {
        let tp = start_in(&off_system, &off_first, RequestContext::new(), false)
            .await
            .expect("answered")
            .expect("the decision travels with the request");
        seen.push(tp);
    }
    assert!(seen.iter().all(|tp| !tp.is_sampled()), "{seen:?}");
    // A recorded request after them, through the same receiver: once its spans are there,
    // the unrecorded ones would have been too.
    start_in(&on_system, &on_first, RequestContext::new(), false)
        .await
        .expect("answered");
    settled(&on_system, &on_first).await;
    off.flush().await.expect("nothing to export is no error");
    on.flush().await.expect("exported");
    let spans = receiver
        .wait_for(SECOND, |s| {
            of(s, "always-sampled", CONSUMER, "handle").len() >= 2
        })
        .await;
    let unrecorded: Vec<&Received> = spans
        .iter()
        .filter(|s| s.service() == "never-sampled")
        .collect();
    assert!(unrecorded.is_empty(), "{unrecorded:#?}");
    off_system.shutdown().await.expect("stops");
    on_system.shutdown().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_ends_its_span_with_the_error() {
    let mut receiver = Receiver::start().await;
    let (system, tracing, first) = traced_chain(&receiver, "failing", 1.0).await;
    let answer = start_in(&system, &first, RequestContext::new(), true).await;
    assert!(answer.is_err(), "{answer:?}");
    settled(&system, &first).await;
    tracing.flush().await.expect("exported");
    let spans = receiver
        .wait_for(SECOND, |s| of(s, "failing", CONSUMER, "handle").len() >= 2)
        .await;
    for handle in of(&spans, "failing", CONSUMER, "handle") {
        assert_eq!(handle.status, 2, "an error status: {handle:?}");
        assert_eq!(
            handle.attribute("rally.outcome"),
            Some("failed"),
            "{handle:?}"
        );
    }
    system.shutdown().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_tracing_exports_what_is_buffered() {
    let mut receiver = Receiver::start().await;
    let (system, tracing, first) = traced_chain(&receiver, "dropped", 1.0).await;
    start_in(&system, &first, RequestContext::new(), false)
        .await
        .expect("answered");
    settled(&system, &first).await;
    // No flush: the spans are in the batch processor's buffer (its delay is 5 s) until the
    // drop.
    drop(tracing);
    let spans = receiver
        .wait_for(SECOND, |s| of(s, "dropped", CONSUMER, "handle").len() >= 2)
        .await;
    assert_eq!(
        of(&spans, "dropped", PRODUCER, "send").len(),
        2,
        "{spans:#?}"
    );
    system.shutdown().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_is_down_fails_the_flush_never_a_message() {
    // A port with nothing listening: bound, then released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let system = ActorSystem::new("down");
    let tracing = Tracing::builder()
        .endpoint(format!("http://{closed}"))
        .export_timeout(Duration::from_secs(2))
        .install()
        .expect("valid settings");
    system.add_call_filter(tracing.filter());
    let second = system.spawn(Second).expect("spawns");
    let first = system.spawn(First { next: second }).expect("spawns");
    for _ in 0..10 {
        let seen = start_in(&system, &first, RequestContext::new(), false)
            .await
            .expect("answered while the backend is down");
        assert!(seen.is_some_and(|tp| tp.is_sampled()));
    }
    let flushed = tracing.flush().await;
    assert!(
        matches!(flushed, Err(rally::otel::FlushError::Export(_))),
        "{flushed:?}"
    );
    system.shutdown().await.expect("stops");
}

#[tokio::test]
async fn install_refuses_a_ratio_out_of_range_and_an_endpoint_that_is_not_a_uri() {
    for ratio in [-0.1, 1.5, f64::NAN] {
        let refused = Tracing::builder().sampling_ratio(ratio).install();
        assert!(
            matches!(refused, Err(InstallError::SamplingRatio(r)) if r.to_bits() == ratio.to_bits()),
            "{ratio}: {refused:?}"
        );
    }
    let refused = Tracing::builder().endpoint("not a uri").install();
    assert!(
        matches!(refused, Err(InstallError::Exporter(_))),
        "{refused:?}"
    );
}

/// The exporter runs on a thread of its own: tracing installs outside any runtime, and a
/// `Tracing` dropped on a current-thread runtime (`#[tokio::main(flavor = "current_thread")]`,
/// a test's default) exports what it buffered before the drop returns (the export used to
/// need the runtime that installed it, and such a drop lost its spans).
#[test]
fn tracing_installs_outside_any_runtime_and_a_drop_on_a_current_thread_runtime_exports_its_spans() {
    let receiving = tokio::runtime::Runtime::new().expect("a runtime for the receiver");
    let mut receiver = receiving.block_on(Receiver::start());
    let tracing = Tracing::builder()
        .endpoint(receiver.endpoint())
        .service_name("current-thread")
        .sampling_ratio(1.0)
        .install()
        .expect("installs outside any runtime");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(async {
            let system = ActorSystem::new("current-thread");
            system.add_call_filter(tracing.filter());
            let second = system.spawn(Second).expect("spawns");
            let first = system.spawn(First { next: second }).expect("spawns");
            start_in(&system, &first, RequestContext::new(), false)
                .await
                .expect("answered");
            settled(&system, &first).await;
            drop(tracing);
        });
    let spans = receiving.block_on(receiver.wait_for(SECOND, |s| {
        of(s, "current-thread", CONSUMER, "handle").len() >= 2
    }));
    assert_eq!(of(&spans, "current-thread", PRODUCER, "send").len(), 2);
}
