//! Tracing across three member processes over real loopback TCP, exported over OTLP/gRPC to a
//! real receiver (the official `opentelemetry-proto` trace service, in this test process): a
//! request from a client process to grain A (kind `front`, hosted only by member 1), whose
//! handler asks grain B (kind `back`, hosted only by member 2), makes one trace whose spans
//! link client → member 1 → member 2 in the order they happened, each named by its process's
//! `service.name` and `rally.member` and by the grain's kind and identity.
//!
//! Each process is configured as a deployment would be, by environment only for the endpoint
//! and the service name (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`); the member id,
//! known only once the process joined, is set in code.
//!
//! The member process is this test binary, re-run with [`MEMBER_ENV`] set; it reports on stdout
//! one fact per line (`@@ READY <member>`, `@@ UP <member>`, `@@ CHAINED <n> <reply>`,
//! `@@ CHAINERR <n> <error>`, `@@ FLUSHED <ok|error>`) and takes commands on stdin
//! (`chain <n>`: asks `front/f-<n>` to relay to `back/b-<n>`; `flush`).

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use rally::cluster::virtual_actors::{Activation, GrainMessages, VirtualActor, VirtualActors};
use rally::cluster::{Cluster, ClusterConfig, MemberEvent};
use rally::otel::Tracing;
use rally::remote::{RemoteConfig, RemoteMessage, RemoteNode};
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, RequestContext};
use rally_test::harness::{Child, commands, free_ports, run, say, trial};
use rally_test::otlp::{CONSUMER, INTERNAL, PRODUCER, Received, Receiver};
use serde::{Deserialize, Serialize};

/// Set in a member process: its role (`front`, `back` or `client`).
const MEMBER_ENV: &str = "RALLY_OTEL_MEMBER";
/// Bound on every wait: generous, since builds of other sessions share two cores.
const T: Duration = Duration::from_secs(90);
const CLUSTER: &str = "traced";
const SECRET: &[u8] = b"otel multi-process secret";

fn main() -> std::process::ExitCode {
    if let Ok(role) = std::env::var(MEMBER_ENV) {
        member_main(&role);
        return std::process::ExitCode::SUCCESS;
    }
    run(vec![trial(
        "a_chain_client_to_grain_a_to_grain_b_over_three_processes_is_one_trace_linked_in_order",
        a_chain_client_to_grain_a_to_grain_b_over_three_processes_is_one_trace_linked_in_order,
    )])
}

// ---------------------------------------------------------------------------------------
// The member process.

/// Grain A: relays to grain B.
struct Front;
impl Actor for Front {}
impl VirtualActor for Front {
    const KIND: &'static str = "front";
    async fn activate(_: Activation) -> ActorResult<Self> {
        Ok(Self)
    }
    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Relay>();
    }
}

/// Grain B: answers.
struct Back {
    identity: String,
}
impl Actor for Back {}
impl VirtualActor for Back {
    const KIND: &'static str = "back";
    async fn activate(activation: Activation) -> ActorResult<Self> {
        Ok(Self {
            identity: activation.identity().to_owned(),
        })
    }
    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Echo>();
    }
}

/// To grain A: ask grain B `.0` and answer what it said.
#[derive(Debug, Serialize, Deserialize)]
struct Relay(String);
impl Message for Relay {
    type Reply = String;
}
impl RemoteMessage for Relay {
    const MANIFEST: &'static str = "test.otel.Relay";
}

/// To grain B.
#[derive(Debug, Serialize, Deserialize)]
struct Echo;
impl Message for Echo {
    type Reply = String;
}
impl RemoteMessage for Echo {
    const MANIFEST: &'static str = "test.otel.Echo";
}

/// The member's virtual actors, for grain A's handler.
static GRAINS: OnceLock<VirtualActors> = OnceLock::new();

impl Handler<Relay> for Front {
    async fn handle(&mut self, msg: Relay, _: &mut Context<Self>) -> ActorResult<String> {
        let grains = GRAINS.get().expect("set before the member joined");
        let back = grains.get::<Back>(&msg.0)?;
        Ok(format!("via front: {}", back.ask(Echo, T).await?))
    }
}

impl Handler<Echo> for Back {
    async fn handle(&mut self, _: Echo, _: &mut Context<Self>) -> ActorResult<String> {
        Ok(format!("back {}", self.identity))
    }
}

fn member_main(role: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let var = |k: &str| std::env::var(k).expect(k);
        let port: u16 = var("RALLY_OTEL_PORT").parse().expect("a port");
        let seed = var("RALLY_OTEL_SEED");
        let system = ActorSystem::new(CLUSTER);
        let node = RemoteNode::start(
            &system,
            RemoteConfig::builder()
                .listen("127.0.0.1", port)
                .secret(SECRET.to_vec())
                .build()
                .expect("valid"),
        )
        .await
        .expect("the node starts");
        let mut config = ClusterConfig::default();
        config
            .seeds
            .push(format!("rally://{CLUSTER}@{seed}").parse().expect("seed"));
        if role != "client" {
            config.kinds.push(role.to_owned());
        }
        let cluster = Cluster::join(&system, &node, config).expect("joins");
        let me = cluster.self_member().id.to_string();
        // Endpoint and service name from the environment; the member id from the code.
        let tracing = Tracing::builder()
            .member(me.clone())
            .install()
            .expect("tracing installs");
        system.add_call_filter(tracing.filter());
        let mut builder = VirtualActors::builder(&cluster, &system);
        match role {
            "front" => builder.kind::<Front>(),
            "back" => builder.kind::<Back>(),
            _ => &mut builder,
        };
        let grains = builder.start(&node).expect("virtual actors start");
        assert!(GRAINS.set(grains.clone()).is_ok(), "set once");
        say(&format!("READY {me}"));
        // After READY: the test skips the facts before the one it waits for, and the stream
        // starts with the view as it stands, so no `Up` is missed by subscribing late.
        let mut events = cluster.events();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let MemberEvent::Up(member) = event {
                    say(&format!("UP {member}"));
                }
            }
        });

        let mut commands = commands();
        while let Some(command) = commands.recv().await {
            let words: Vec<&str> = command.split_whitespace().collect();
            match words.as_slice() {
                ["chain", n] => {
                    let (n, grains, system) = ((*n).to_owned(), grains.clone(), system.clone());
                    tokio::spawn(async move {
                        let front = grains.get::<Front>(&format!("f-{n}")).expect("valid");
                        // A request entering the cluster here: its trace starts at this send.
                        let reply = system
                            .in_context(
                                RequestContext::new(),
                                front.ask(Relay(format!("b-{n}")), Duration::from_secs(10)),
                            )
                            .await;
                        match reply {
                            Ok(reply) => say(&format!("CHAINED {n} {reply}")),
                            Err(e) => say(&format!("CHAINERR {n} {e}")),
                        }
                    });
                }
                ["flush"] => match tracing.flush().await {
                    Ok(()) => say("FLUSHED ok"),
                    Err(e) => say(&format!("FLUSHED {e}")),
                },
                _ => eprintln!("member: unknown command {command:?}"),
            }
        }
        if let Err(e) = cluster.shutdown(T).await {
            eprintln!("member: {e}");
        }
        drop(tracing);
    });
}

// ---------------------------------------------------------------------------------------
// The test's side.

/// A member process (killed when dropped) and the member it reported it is.
struct Member {
    process: Child,
    member: String,
}

impl Member {
    fn spawn(role: &'static str, port: u16, seed: u16, endpoint: &str) -> Self {
        let mut command = Command::new(std::env::current_exe().expect("this test binary"));
        command
            .env(MEMBER_ENV, role)
            .env("RALLY_OTEL_PORT", port.to_string())
            .env("RALLY_OTEL_SEED", format!("127.0.0.1:{seed}"))
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_SERVICE_NAME", format!("otel-test-{role}"));
        Self {
            process: Child::spawn(role, command),
            member: String::new(),
        }
    }

    /// The arguments of the next fact `word`, skipping others.
    async fn expect(&mut self, word: &str) -> Vec<String> {
        self.process.expect(word, T, |f| f.word == word).await.args
    }
}

async fn a_chain_client_to_grain_a_to_grain_b_over_three_processes_is_one_trace_linked_in_order() {
    let mut receiver = Receiver::start().await;
    let endpoint = receiver.endpoint();
    let ports = free_ports(3);
    let mut members: Vec<Member> = ["front", "back", "client"]
        .into_iter()
        .zip(&ports)
        .map(|(role, port)| Member::spawn(role, *port, ports[0], &endpoint))
        .collect();
    for m in &mut members {
        m.member = m.expect("READY").await.remove(0);
    }
    let all: Vec<String> = members.iter().map(|m| m.member.clone()).collect();
    for m in &mut members {
        let mut up = std::collections::BTreeSet::new();
        while !all.iter().all(|a| up.contains(a)) {
            up.insert(m.expect("UP").await.remove(0));
        }
    }
    // A chain until one is answered: the first asks may be routed on a view that does not
    // have the host of a kind yet. Each attempt uses its own identities.
    let mut answered = None;
    for n in 0..50 {
        members[2].process.send(&format!("chain {n}"));
        let fact = members[2]
            .process
            .expect("an answer or an error", T, |f| {
                f.word == "CHAINED" || f.word == "CHAINERR"
            })
            .await;
        let (word, args) = (fact.word, fact.args);
        assert_eq!(args[0], n.to_string());
        if word == "CHAINED" {
            assert_eq!(args[1..].join(" "), format!("via front: back b-{n}"));
            answered = Some(n);
            break;
        }
        eprintln!("chain {n}: {}", args[1..].join(" "));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let n = answered.expect("a chain answered");
    for m in &mut members {
        m.process.send("flush");
        assert_eq!(
            m.expect("FLUSHED").await,
            ["ok"],
            "{} flushed",
            m.process.name
        );
    }
    let (front_id, back_id) = (format!("f-{n}"), format!("b-{n}"));
    // The client's send to A, then every span of its trace: the handlers' spans come after
    // their sends' (each member flushed after the chain was answered).
    let is_root = |s: &Received| {
        s.service() == "otel-test-client"
            && s.kind == PRODUCER
            && s.attribute("rally.grain.identity") == Some(front_id.as_str())
    };
    let spans = receiver
        .wait_for(T, |spans| {
            spans.iter().find(|s| is_root(s)).is_some_and(|root| {
                spans
                    .iter()
                    .filter(|s| s.trace_id == root.trace_id && s.kind == CONSUMER)
                    .count()
                    >= 2
            })
        })
        .await;
    let send_a = spans.iter().find(|s| is_root(s)).expect("waited for");
    let trace: Vec<&Received> = spans
        .iter()
        .filter(|s| s.trace_id == send_a.trace_id)
        .collect();
    eprintln!(
        "OBSERVED the chain's trace, {} spans:\n  {}",
        trace.len(),
        trace
            .iter()
            .map(|s| format!(
                "{} [{}] kind {} {:?} {:?} span {} parent {}",
                s.name,
                s.service(),
                s.kind,
                s.attribute("rally.grain.kind"),
                s.attribute("rally.grain.identity"),
                hex(&s.span_id),
                hex(&s.parent_span_id)
            ))
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    let child = |parent: &Received, kind: i32| -> &Received {
        let found: Vec<&&Received> = trace
            .iter()
            .filter(|s| s.kind == kind && s.parent_span_id == parent.span_id)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one child of kind {kind} of {}: {trace:#?}",
            parent.name
        );
        found[0]
    };
    // client → A → B, each a child of the one before.
    assert!(
        send_a.parent_span_id.is_empty(),
        "the client's send is the root"
    );
    let handle_a = child(send_a, CONSUMER);
    let send_b = child(handle_a, PRODUCER);
    let handle_b = child(send_b, CONSUMER);
    // Each span made where it should be, and named by its process.
    for (span, member, service) in [
        (send_a, &members[2], "otel-test-client"),
        (handle_a, &members[0], "otel-test-front"),
        (send_b, &members[0], "otel-test-front"),
        (handle_b, &members[1], "otel-test-back"),
    ] {
        assert_eq!(span.service(), service, "{}", span.name);
        assert_eq!(
            span.resource.get("rally.member"),
            Some(&member.member),
            "{}: its member",
            span.name
        );
    }
    // The grains each send went to, and the grain each handler is: by kind and identity,
    // without the path-like target or actor path an actor's spans carry.
    for (send, handle, kind, identity) in [
        (send_a, handle_a, "front", &front_id),
        (send_b, handle_b, "back", &back_id),
    ] {
        for span in [send, handle] {
            assert_eq!(span.attribute("rally.grain.kind"), Some(kind), "{span:?}");
            assert_eq!(
                span.attribute("rally.grain.identity"),
                Some(identity.as_str()),
                "{span:?}"
            );
            assert_eq!(span.attribute("rally.target"), None, "{span:?}");
            assert_eq!(span.attribute("rally.actor.path"), None, "{span:?}");
        }
    }
    // The message types, in the spans' names.
    for (span, message) in [
        (send_a, "Relay"),
        (handle_a, "Relay"),
        (send_b, "Echo"),
        (handle_b, "Echo"),
    ] {
        assert!(span.name.ends_with(message), "{span:?}");
    }
    // In the order they happened (one clock: the processes share the machine's).
    assert!(
        send_a.start_ns <= handle_a.start_ns,
        "A handles after the client sent"
    );
    assert!(
        handle_a.start_ns <= send_b.start_ns && send_b.end_ns <= handle_a.end_ns,
        "A sends while it handles"
    );
    assert!(
        send_b.start_ns <= handle_b.start_ns,
        "B handles after A sent"
    );
    assert!(
        handle_b.end_ns <= handle_a.end_ns,
        "A's handler waits for B's answer"
    );
    // Nothing else in the trace but the two mailbox waits (known for messages that carry a
    // context): children of a send, on the handler's member, ending where the handler starts.
    let mut waits = 0;
    for (send, handle) in [(send_a, handle_a), (send_b, handle_b)] {
        for wait in trace
            .iter()
            .filter(|s| s.kind == INTERNAL && s.parent_span_id == send.span_id)
        {
            assert!(wait.name.starts_with("wait "), "{wait:?}");
            assert_eq!(wait.service(), handle.service());
            assert!(wait.start_ns >= send.start_ns && wait.end_ns == handle.start_ns);
            waits += 1;
        }
    }
    assert_eq!(waits, 2, "{trace:#?}");
    assert_eq!(trace.len(), 6, "{trace:#?}");
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
