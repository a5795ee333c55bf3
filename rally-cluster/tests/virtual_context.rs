//! A request context through virtual actors over real loopback TCP: a client's context reaches
//! a grain on one member and, through that grain's own call, a grain on another member; a
//! kind's call filter rejects what it must, and the caller is told it was not handled.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use rally::cluster::virtual_actors::{
    Activation, AskError, GrainMessages, Handled, Hashed, Placement, VirtualActor, VirtualActors,
};
use rally::cluster::{Cluster, ClusterConfig, MemberStatus};
use rally::remote::{RemoteConfig, RemoteMessage, RemoteNode};
use rally::{
    Actor, ActorResult, ActorSystem, CallFilter, Context, Handler, Incoming, Kept, Message,
    Rejection, RequestContext, TraceParent,
};
use rally_test::eventually;
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(60);

/// Each member's virtual actors, by the owner name its activations see: how a grain calls
/// another from its handler.
static MEMBERS: LazyLock<Mutex<HashMap<String, VirtualActors>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A grain that passes a chain on: asks the first identity of the rest, or answers the
/// context its handler saw.
struct Hop {
    grains: VirtualActors,
    owner: String,
}

impl Actor for Hop {}

impl VirtualActor for Hop {
    const KIND: &'static str = "hop";

    async fn activate(activation: Activation) -> ActorResult<Self> {
        let owner = activation.owner().to_owned();
        let grains = MEMBERS.lock().unwrap()[&owner].clone();
        Ok(Hop { grains, owner })
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Chain>();
    }
}

/// The identities still to visit; the reply is (tenant, traceparent, members visited).
#[derive(Debug, Serialize, Deserialize)]
struct Chain(Vec<String>);
impl Message for Chain {
    type Reply = (String, String, Vec<String>);
}
impl RemoteMessage for Chain {
    const MANIFEST: &'static str = "test.hop.Chain";
}
impl Handler<Chain> for Hop {
    async fn handle(
        &mut self,
        msg: Chain,
        ctx: &mut Context<Self>,
    ) -> ActorResult<(String, String, Vec<String>)> {
        let me = self.owner.clone();
        if let Some((next, rest)) = msg.0.split_first() {
            let grain = self.grains.get::<Hop>(next)?;
            let (tenant, trace, mut path) = grain.ask(Chain(rest.to_vec()), T).await?;
            path.insert(0, me);
            return Ok((tenant, trace, path));
        }
        let context = ctx.request_context().unwrap_or_default();
        Ok((
            context.get("tenant").unwrap_or_default().to_owned(),
            context
                .traceparent()
                .map(|t| t.to_string())
                .unwrap_or_default(),
            vec![me],
        ))
    }
}

/// The virtual actors the filter saw messages for: (kind, identity).
static FILTERED: LazyLock<Mutex<Vec<(String, String)>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// Refuses what comes without a tenant.
struct NeedsTenant;
impl CallFilter for NeedsTenant {
    fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
        if let Some((kind, identity)) = call.grain() {
            FILTERED
                .lock()
                .unwrap()
                .push((kind.to_owned(), identity.to_owned()));
        }
        match call.context().and_then(|c| c.get("tenant")) {
            Some(_) => Ok(None),
            None => Err(Rejection::new("no tenant")),
        }
    }
}

struct Member {
    cluster: Cluster,
    grains: VirtualActors,
    system: ActorSystem,
    _node: RemoteNode,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn member(port: u16, seed: u16, hosts: bool, filtered: bool) -> Member {
    let system = ActorSystem::new("ctx");
    let node = RemoteNode::start(
        &system,
        RemoteConfig::builder()
            .listen("127.0.0.1", port)
            .secret(b"context secret".to_vec())
            .build()
            .unwrap(),
    )
    .await
    .expect("node starts");
    let mut builder = ClusterConfig::builder();
    builder
        .seed(format!("rally://ctx@127.0.0.1:{seed}").parse().unwrap())
        .when_downed(rally::cluster::WhenDowned::Stop);
    if hosts {
        builder.kind("hop");
    }
    let config = builder.build().unwrap();
    let cluster = Cluster::join(&system, &node, config.clone()).expect("joins");
    let mut grains = VirtualActors::builder(&cluster, &system);
    grains.membership(&config);
    if hosts {
        grains.kind::<Hop>();
    }
    if filtered {
        grains.call_filter::<Hop>(Arc::new(NeedsTenant));
    }
    let grains = grains.start(&node).expect("starts");
    let owner = cluster.self_member().id.to_string();
    MEMBERS.lock().unwrap().insert(owner, grains.clone());
    Member {
        cluster,
        grains,
        system,
        _node: node,
    }
}

/// Two hosting members and a client-only one; returns once all see each other up.
async fn cluster(filtered: bool) -> (Member, Member, Member) {
    let ports = [free_port(), free_port(), free_port()];
    let a = member(ports[0], ports[0], true, filtered).await;
    let b = member(ports[1], ports[0], true, filtered).await;
    let client = member(ports[2], ports[0], false, false).await;
    for m in [&a, &b, &client] {
        eventually("three members up", T, async || {
            let seen = m.cluster.members();
            seen.len() == 3 && seen.iter().all(|x| x.status == MemberStatus::Up)
        })
        .await;
    }
    (a, b, client)
}

/// An identity of kind `hop` that member `owner` owns.
fn owned_by(a: &Member, b: &Member, owner: &Member, prefix: &str) -> String {
    let hosts = [a.cluster.self_member().id, b.cluster.self_member().id];
    let owner = owner.cluster.self_member().id;
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|id| Hashed.place("hop", id, &hosts, &hosts[0]).unwrap() == &owner)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_follows_a_call_from_a_client_through_two_members() {
    let (a, b, client) = cluster(false).await;
    let on_a = owned_by(&a, &b, &a, "first");
    let on_b = owned_by(&a, &b, &b, "second");
    let grain = client.grains.get::<Hop>(&on_a).unwrap();
    let chain = || Chain(vec![on_b.clone()]);

    let members = [
        a.cluster.self_member().id.to_string(),
        b.cluster.self_member().id.to_string(),
    ];
    let (tenant, trace, path) = grain.ask(chain(), T).await.unwrap();
    assert_eq!(
        (tenant.as_str(), trace.as_str()),
        ("", ""),
        "no context, none carried"
    );
    assert_eq!(path, members);

    let parent: TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        .parse()
        .unwrap();
    let context = RequestContext::new()
        .with_traceparent(parent)
        .with_entry("tenant", "acme")
        .unwrap();
    let system = client.system.clone();
    let (tenant, trace, path) = system
        .in_context(context, grain.ask(chain(), T))
        .await
        .unwrap();
    assert_eq!(tenant, "acme");
    assert_eq!(trace, parent.to_string());
    assert_eq!(path, members);
    // And nothing lingers in the activations.
    let (tenant, _, _) = grain.ask(chain(), T).await.unwrap();
    assert_eq!(tenant, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kinds_filter_rejects_on_the_hosting_member_and_the_caller_is_told_not_handled() {
    let (a, b, client) = cluster(true).await;
    let on_b = owned_by(&a, &b, &b, "guarded");
    let grain = client.grains.get::<Hop>(&on_b).unwrap();
    let error = grain.ask(Chain(Vec::new()), T).await.unwrap_err();
    assert_eq!(error, AskError::Rejected("no tenant".to_owned()));
    assert_eq!(error.handled(), Handled::No);
    let acme = RequestContext::new().with_entry("tenant", "acme").unwrap();
    let system = client.system.clone();
    let (tenant, _, _) = system
        .in_context(acme, grain.ask(Chain(Vec::new()), T))
        .await
        .unwrap();
    assert_eq!(tenant, "acme");
    // The filter knew which virtual actor each message was for.
    let seen = FILTERED.lock().unwrap().clone();
    assert_eq!(seen, vec![("hop".to_owned(), on_b.clone()); 2]);
}
