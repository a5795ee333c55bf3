//! A request context across nodes over real loopback TCP: it reaches the remote handler and
//! the handler's own remote sends, a remote call filter's rejection reaches the asker with its
//! reason, and a message sent outside any context carries none.

#[path = "support/nodes.rs"]
mod nodes;

use std::sync::Arc;

use nodes::{T, client_node, config};
use rally_actor::{
    Actor, ActorRef, ActorResult, AskError, CallFilter, Context, Handler, Incoming, Kept, Message,
    Props, Rejection, RequestContext, TraceParent,
};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage};
use serde::{Deserialize, Serialize};

/// Answers what context its handler saw; with `next`, asks it on (another node) first.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Seen;
impl Message for Seen {
    type Reply = Option<(String, String)>;
}
impl RemoteMessage for Seen {
    const MANIFEST: &'static str = "context.Seen";
}

struct Hop {
    next: Option<ActorRef<Hop>>,
}
impl Actor for Hop {}
impl Handler<Seen> for Hop {
    async fn handle(
        &mut self,
        _: Seen,
        ctx: &mut Context<Self>,
    ) -> ActorResult<Option<(String, String)>> {
        if let Some(next) = &self.next {
            return Ok(next.ask(Seen, T).await?);
        }
        Ok(ctx.request_context().map(|context| {
            let tenant = context.get("tenant").unwrap_or_default().to_owned();
            let trace = context
                .traceparent()
                .map(|t| t.to_string())
                .unwrap_or_default();
            (tenant, trace)
        }))
    }
}
impl RemoteActor for Hop {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<Seen>();
    }
}

/// Refuses every message whose context has no tenant.
struct NeedsTenant;
impl CallFilter for NeedsTenant {
    fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
        match call.context().and_then(|c| c.get("tenant")) {
            Some(_) => Ok(None),
            None => Err(Rejection::new("no tenant in the request context")),
        }
    }
}

fn parent() -> TraceParent {
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_crosses_two_nodes_and_back_and_nothing_crosses_without_one() {
    // c: the last hop; b: asks c; a: the client.
    let (c_system, c) = client_node("c", config()).await;
    let last = c_system.spawn(Hop { next: None }).unwrap();
    c.expose("last", &last).unwrap();
    let (b_system, b) = client_node("b", config()).await;
    let to_last = b.lookup::<Hop>(c.address(), "last");
    let middle = b_system
        .spawn(Hop {
            next: Some(to_last),
        })
        .unwrap();
    b.expose("middle", &middle).unwrap();
    let (a_system, a) = client_node("a", config()).await;
    let first = a.lookup::<Hop>(b.address(), "middle");

    assert_eq!(first.ask(Seen, T).await, Ok(None));
    let context = RequestContext::new()
        .with_traceparent(parent())
        .with_entry("tenant", "acme")
        .unwrap();
    let seen = a_system.in_context(context, first.ask(Seen, T)).await;
    assert_eq!(seen, Ok(Some(("acme".to_owned(), parent().to_string()))));
    // Nothing lingers on either node: the next request without a context carries none.
    assert_eq!(first.ask(Seen, T).await, Ok(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_filters_rejection_reaches_the_asker_with_its_reason() {
    let (b_system, b) = client_node("b", config()).await;
    let guarded = b_system
        .spawn(Props::new(Hop { next: None }).call_filter(Arc::new(NeedsTenant)))
        .unwrap();
    b.expose("guarded", &guarded).unwrap();
    let (a_system, a) = client_node("a", config()).await;
    let remote = a.lookup::<Hop>(b.address(), "guarded");
    assert_eq!(
        remote.ask(Seen, T).await,
        Err(AskError::Rejected(
            "no tenant in the request context".to_owned()
        ))
    );
    let acme = RequestContext::new().with_entry("tenant", "acme").unwrap();
    let seen = a_system.in_context(acme, remote.ask(Seen, T)).await;
    assert_eq!(seen, Ok(Some(("acme".to_owned(), String::new()))));
}
