//! The call filter that turns each hop into spans: `send` where a message leaves (its span id
//! becomes the message's `traceparent`), then where it is handled a `wait` span for its time
//! in the mailbox and a `handle` span from the handler's start to its end, whose id the
//! handler's own sends carry on.

use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context as OtelContext, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};
use rally_actor::{
    CallFilter, Incoming, Kept, Outcome, Outgoing, Rejection, RequestContext, Sees, TraceParent,
};

/// Span attribute: where a message to an actor was sent (its path, with its node for a remote
/// one). A send to a virtual actor carries [`GRAIN_KIND`] and [`GRAIN_IDENTITY`] instead.
pub const TARGET: &str = "rally.target";
/// Span attribute: the path of the actor that handled a message (not on a virtual actor's
/// `handle`, which carries [`GRAIN_KIND`] and [`GRAIN_IDENTITY`]).
pub const ACTOR_PATH: &str = "rally.actor.path";
/// Span attribute: the virtual actor's kind (sent to, or handling).
pub const GRAIN_KIND: &str = "rally.grain.kind";
/// Span attribute: the virtual actor's identity (sent to, or handling).
pub const GRAIN_IDENTITY: &str = "rally.grain.identity";
/// Span attribute: how a handler ended when it did not succeed (`failed`, `panicked`, or
/// `rejected` by a later filter).
pub const OUTCOME: &str = "rally.outcome";

/// Makes the spans of every hop it sees; from [`Tracing::filter`](crate::Tracing::filter).
///
/// A trace starts where a request enters the actors: where code outside any actor (a task, a
/// web handler, `main`) sends through a traced system, or where code inside
/// [`ActorSystem::in_context`] sends with a context that has no `traceparent` yet. The
/// decision is made there, once, at the sampling ratio, and every hop the request causes
/// follows it: a recorded one carries its `traceparent`, and a hop of a request that is not
/// recorded makes no span and sends nothing more than it would untraced, so no later hop
/// starts a trace in the middle of it. (A context the request carries anyway takes the "not
/// recorded" decision along.) A message that comes without a context, from an actor whose
/// hop is not recorded or from a system that is not traced, starts nothing.
///
/// [`ActorSystem::in_context`]: rally_actor::ActorSystem::in_context
#[derive(Debug)]
pub struct TracingFilter {
    tracer: SdkTracer,
    roots: RootSampler,
}

/// Whether a new trace is recorded: a draw against the ratio, made here so that the 99 hops
/// in 100 that start no recorded trace (at 1%) never reach the SDK; the SDK's own sampler
/// only follows parents.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RootSampler {
    /// A draw below this is recorded; `u64::MAX` with `all` for 1.0.
    threshold: u64,
    all: bool,
}

impl RootSampler {
    /// Records `ratio` (0.0..=1.0) of the new traces.
    pub(crate) fn new(ratio: f64) -> Self {
        // The ratio of 2^64, saturating at 1.0 (the cast saturates).
        let threshold = (ratio * 18_446_744_073_709_551_616.0) as u64;
        Self {
            threshold,
            all: ratio >= 1.0,
        }
    }

    fn records(self) -> bool {
        self.all || rand::random::<u64>() < self.threshold
    }
}

impl TracingFilter {
    pub(crate) fn new(tracer: SdkTracer, roots: RootSampler) -> Self {
        Self { tracer, roots }
    }

    /// A span named `name` with `attributes`, child of `parent` or a root, from `at` (now
    /// when `None`). Only a recorded request's hops get here (see the type's documentation),
    /// so the name and the attributes are made only for spans that are exported.
    fn start(
        &self,
        name: String,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
        parent: &OtelContext,
        at: Option<SystemTime>,
    ) -> Span {
        let mut builder = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes);
        if let Some(at) = at {
            builder = builder.with_start_time(at);
        }
        builder.start_with_context(&self.tracer, parent)
    }

    /// The `send` span of `send`, child of `parent`.
    fn start_send(&self, send: &Outgoing<'_>, parent: &OtelContext) -> Span {
        self.start(
            span_name("send", send.message_type()),
            SpanKind::Producer,
            attributes("send", send.grain(), (TARGET, || send.target().to_owned())),
            parent,
            None,
        )
    }
}

impl CallFilter for TracingFilter {
    /// A hop of a request that is not recorded carries no context: tracing has nothing to do
    /// there, and the actor handles it as if it had no filter.
    fn sees(&self) -> Sees {
        Sees::InContext
    }

    fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
        let context = send.context().cloned();
        let mut span = match context.as_ref().and_then(RequestContext::traceparent) {
            Some(p) if !p.is_sampled() => return Ok(()),
            Some(p) => self.start_send(send, &parent_context(Some(p))),
            // No context: a hop whose request is not recorded, unless a request enters here.
            None if context.is_none() && !send.is_entry() => return Ok(()),
            // A request enters: from outside any actor, or inside `in_context` without a trace.
            None if self.roots.records() => self.start_send(send, &OtelContext::new()),
            None => {
                // Not recorded: a context carried anyway takes the decision along; none is
                // made where there was none.
                if let Some(context) = context {
                    let unrecorded = TraceParent {
                        trace_id: rand::random(),
                        span_id: rand::random(),
                        flags: 0,
                    };
                    send.set_context(context.with_traceparent(unrecorded));
                }
                return Ok(());
            }
        };
        let traceparent = traceparent_of(span.span_context());
        span.end();
        send.set_context(context.unwrap_or_default().with_traceparent(traceparent));
        Ok(())
    }

    fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
        // Only a hop of a recorded request makes spans (see the type's documentation).
        let Some(parent) = call
            .context()
            .and_then(RequestContext::traceparent)
            .filter(TraceParent::is_sampled)
        else {
            return Ok(None);
        };
        let now = SystemTime::now();
        let parent = parent_context(Some(parent));
        let message_type = call.message_type();
        // The wait names its message and carries no attributes: they would repeat its sibling
        // `handle`'s, and each attribute is copied and encoded again on export.
        if let Some(since) = call.waited().and_then(|w| now.checked_sub(w)) {
            let mut wait = self.start(
                span_name("wait", message_type),
                SpanKind::Internal,
                Vec::new(),
                &parent,
                Some(since),
            );
            wait.end_with_timestamp(now);
        }
        let handle = self.start(
            span_name("handle", message_type),
            SpanKind::Consumer,
            attributes(
                "process",
                call.grain(),
                (ACTOR_PATH, || call.actor_path().to_owned()),
            ),
            &parent,
            Some(now),
        );
        let context = call.context().cloned().unwrap_or_default();
        call.set_context(context.with_traceparent(traceparent_of(handle.span_context())));
        Ok(Some(Box::new(handle)))
    }

    fn after(&self, _call: &Incoming<'_>, outcome: Outcome<'_>, kept: Option<Kept>) {
        let Some(Ok(mut handle)) = kept.map(|k| k.downcast::<Span>()) else {
            return;
        };
        match outcome {
            Outcome::Ok => {}
            Outcome::Failed(reason) => {
                handle.set_attribute(KeyValue::new(OUTCOME, "failed"));
                handle.set_status(Status::error(reason.to_owned()));
            }
            Outcome::Panicked(reason) => {
                handle.set_attribute(KeyValue::new(OUTCOME, "panicked"));
                handle.set_status(Status::error(reason.to_owned()));
            }
            Outcome::Rejected(reason) => {
                handle.set_attribute(KeyValue::new(OUTCOME, "rejected"));
                handle.set_status(Status::error(reason.to_owned()));
            }
            _ => {}
        }
        handle.end();
    }
}

/// The W3C `traceparent` of a span: the one a message carries to its handler.
pub(crate) fn traceparent_of(span: &SpanContext) -> TraceParent {
    TraceParent {
        trace_id: span.trace_id().to_bytes(),
        span_id: span.span_id().to_bytes(),
        flags: span.trace_flags().to_u8(),
    }
}

/// The OpenTelemetry context whose (remote) span is `parent`; the empty one for none.
pub(crate) fn parent_context(parent: Option<TraceParent>) -> OtelContext {
    match parent {
        None => OtelContext::new(),
        Some(p) => OtelContext::new().with_remote_span_context(SpanContext::new(
            TraceId::from_bytes(p.trace_id),
            SpanId::from_bytes(p.span_id),
            TraceFlags::new(p.flags),
            true,
            TraceState::default(),
        )),
    }
}

/// `<verb> <message type>`, a span's name: made in one allocation of its size (`format!`
/// grows its string as it goes, and this runs for every span).
fn span_name(verb: &str, message_type: &str) -> String {
    let mut name = String::with_capacity(verb.len() + 1 + message_type.len());
    name.push_str(verb);
    name.push(' ');
    name.push_str(message_type);
    name
}

/// A span's attributes: the conventions' two (`operation`: `send` or `process`), then whom the
/// message concerns: a virtual actor's kind and identity, or else an actor, named by
/// `actor`'s attribute and value (a `send`'s target, a `handle`'s path; made only when
/// needed). The message's type is in the span's name.
fn attributes(
    operation: &'static str,
    grain: Option<(&'static str, &str)>,
    actor: (&'static str, impl FnOnce() -> String),
) -> Vec<KeyValue> {
    let mut attributes = Vec::with_capacity(4);
    attributes.push(KeyValue::new("messaging.system", "rally"));
    attributes.push(KeyValue::new("messaging.operation.type", operation));
    match grain {
        Some((kind, identity)) => {
            attributes.push(KeyValue::new(GRAIN_KIND, kind));
            attributes.push(KeyValue::new(GRAIN_IDENTITY, identity.to_owned()));
        }
        None => attributes.push(KeyValue::new(actor.0, actor.1())),
    }
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_goes_through_the_opentelemetry_context_unchanged() {
        let tp = TraceParent {
            trace_id: [7; 16],
            span_id: [9; 8],
            flags: 1,
        };
        let cx = parent_context(Some(tp));
        let span = cx.span();
        assert_eq!(traceparent_of(span.span_context()), tp);
        assert!(span.span_context().is_remote());
        assert!(!parent_context(None).has_active_span());
    }

    #[test]
    fn a_span_is_named_by_what_happened_and_the_message_type() {
        assert_eq!(span_name("send", "shop::AddItem"), "send shop::AddItem");
    }
}
