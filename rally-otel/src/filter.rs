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
    CallFilter, Incoming, Kept, Outcome, Outgoing, Rejection, RequestContext, TraceParent,
};

/// Span attribute: the message's type name.
pub const MESSAGE_TYPE: &str = "rally.message.type";
/// Span attribute: where a message was sent (an actor path, or `grain:<kind>/<identity>`).
pub const TARGET: &str = "rally.target";
/// Span attribute: the path of the actor that handled a message.
pub const ACTOR_PATH: &str = "rally.actor.path";
/// Span attribute: the virtual actor's kind (sent to, or handling).
pub const GRAIN_KIND: &str = "rally.grain.kind";
/// Span attribute: the virtual actor's identity (sent to, or handling).
pub const GRAIN_IDENTITY: &str = "rally.grain.identity";
/// Span attribute: how a handler ended when it did not succeed (`failed`, `panicked`, or
/// `rejected` by a later filter).
pub const OUTCOME: &str = "rally.outcome";

/// The prefix of a virtual actor's target in [`Outgoing::target`].
const GRAIN_TARGET: &str = "grain:";

/// Makes the spans of every hop it sees; from [`Tracing::filter`](crate::Tracing::filter).
///
/// A trace starts where a message is handled that came without one (from code that is not
/// traced), or where code sends inside [`ActorSystem::in_context`] with a context that has no
/// `traceparent` yet; it is recorded at the sampling ratio, and every later hop follows that
/// decision. A hop of an unrecorded trace makes no span and passes its context as it came.
/// The decision not to record rides on in a context the message carries anyway, but never
/// makes one where there was none: a message from code that is not traced stays as small as it
/// was, and the next hop decides again.
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

    /// Starts a new trace where `context` (the message's, if any) has none: a recorded root
    /// span named `name`, or `None` when the ratio says no. An unrecorded decision rides on in
    /// a context the message carries anyway (so the hops after it follow it), but makes none
    /// where there was none: the message stays as small as it was.
    fn root(
        &self,
        name: &'static str,
        kind: SpanKind,
        at: Option<SystemTime>,
        context: Option<&RequestContext>,
        set_context: impl FnOnce(RequestContext),
    ) -> Option<Span> {
        if self.roots.records() {
            return Some(self.start(name, kind, &OtelContext::new(), at));
        }
        if let Some(context) = context {
            let unrecorded = TraceParent {
                trace_id: rand::random(),
                span_id: rand::random(),
                flags: 0,
            };
            set_context(context.clone().with_traceparent(unrecorded));
        }
        None
    }

    /// A span named `name` (replaced by the full name once it is known to be recorded, so an
    /// unrecorded one costs no formatting), child of `parent` or a root, from `at` (now when
    /// `None`).
    fn start(
        &self,
        name: &'static str,
        kind: SpanKind,
        parent: &OtelContext,
        at: Option<SystemTime>,
    ) -> Span {
        let mut builder = self.tracer.span_builder(name).with_kind(kind);
        if let Some(at) = at {
            builder = builder.with_start_time(at);
        }
        builder.start_with_context(&self.tracer, parent)
    }
}

impl CallFilter for TracingFilter {
    fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
        // No context: code whose own hop was not recorded (see `before`), or outside any
        // request; the message stays as it is, and the hop that handles it decides.
        let Some(context) = send.context().cloned() else {
            return Ok(());
        };
        let mut span = match context.traceparent() {
            Some(p) if !p.is_sampled() => return Ok(()),
            Some(p) => self.start("send", SpanKind::Producer, &parent_context(Some(p)), None),
            None => {
                let set = |c| send.set_context(c);
                match self.root("send", SpanKind::Producer, None, Some(&context), set) {
                    Some(span) => span,
                    None => return Ok(()),
                }
            }
        };
        if span.is_recording() {
            span.update_name(format!("send {}", send.message_type()));
            span.set_attributes(send_attributes(send.target(), send.message_type()));
        }
        let traceparent = traceparent_of(span.span_context());
        span.end();
        send.set_context(context.with_traceparent(traceparent));
        Ok(())
    }

    fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
        let parent = call.context().and_then(RequestContext::traceparent);
        // The wait span's parent, start and end, when the arrival is known.
        let (mut handle, wait) = match parent {
            // A hop of an unrecorded trace: nothing to make, the context goes on as it came.
            Some(p) if !p.is_sampled() => return Ok(None),
            Some(p) => {
                let now = SystemTime::now();
                let parent = parent_context(Some(p));
                let handle = self.start("handle", SpanKind::Consumer, &parent, Some(now));
                let arrived = call.waited().and_then(|w| now.checked_sub(w));
                (handle, arrived.map(|since| (parent, since, now)))
            }
            // A hop that starts a trace (its message came from code that was not traced): its
            // `handle` span is the root, from the message's arrival when that is known.
            None => {
                let arrived = call.waited().map(|w| {
                    let now = SystemTime::now();
                    (now.checked_sub(w).unwrap_or(now), now)
                });
                let context = call.context().cloned();
                let set = |c| call.set_context(c);
                let at = arrived.map(|(since, _)| since);
                let Some(handle) =
                    self.root("handle", SpanKind::Consumer, at, context.as_ref(), set)
                else {
                    return Ok(None);
                };
                let wait = arrived.map(|(since, now)| {
                    let parent = parent_context(Some(traceparent_of(handle.span_context())));
                    (parent, since, now)
                });
                (handle, wait)
            }
        };
        if handle.is_recording() {
            let message_type = call.message_type();
            handle.update_name(format!("handle {message_type}"));
            let attributes = handle_attributes(call);
            if let Some((parent, since, now)) = wait {
                let mut wait = self.start("wait", SpanKind::Internal, &parent, Some(since));
                wait.update_name(format!("wait {message_type}"));
                wait.set_attributes(attributes.iter().cloned());
                wait.end_with_timestamp(now);
            }
            handle.set_attributes(attributes);
        }
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

fn send_attributes(target: &str, message_type: &'static str) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("messaging.system", "rally"),
        KeyValue::new("messaging.operation.type", "send"),
        KeyValue::new(TARGET, target.to_owned()),
        KeyValue::new(MESSAGE_TYPE, message_type),
    ];
    if let Some((kind, identity)) = target
        .strip_prefix(GRAIN_TARGET)
        .and_then(|grain| grain.split_once('/'))
    {
        attributes.push(KeyValue::new(GRAIN_KIND, kind.to_owned()));
        attributes.push(KeyValue::new(GRAIN_IDENTITY, identity.to_owned()));
    }
    attributes
}

fn handle_attributes(call: &Incoming<'_>) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("messaging.system", "rally"),
        KeyValue::new("messaging.operation.type", "process"),
        KeyValue::new(ACTOR_PATH, call.actor_path().to_owned()),
        KeyValue::new(MESSAGE_TYPE, call.message_type()),
    ];
    if let Some((kind, identity)) = call.grain() {
        attributes.push(KeyValue::new(GRAIN_KIND, kind));
        attributes.push(KeyValue::new(GRAIN_IDENTITY, identity.to_owned()));
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
    fn a_grain_target_names_its_kind_and_identity() {
        let attributes = send_attributes("grain:cart/user-42", "shop::AddItem");
        assert!(attributes.contains(&KeyValue::new(GRAIN_KIND, "cart")));
        assert!(attributes.contains(&KeyValue::new(GRAIN_IDENTITY, "user-42")));
        let attributes = send_attributes("rally://shop@10.0.0.1:4000/user/a", "shop::AddItem");
        assert!(!attributes.iter().any(|kv| kv.key.as_str() == GRAIN_KIND));
    }
}
