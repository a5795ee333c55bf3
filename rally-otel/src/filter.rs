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
use rally_actor::{CallFilter, Incoming, Kept, Outcome, Outgoing, Rejection, TraceParent};

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
/// A hop whose incoming trace is not recorded passes as it came (its `traceparent` says so
/// downstream, at no cost); one without a trace starts one, recorded at the sampling ratio.
#[derive(Debug)]
pub struct TracingFilter {
    tracer: SdkTracer,
}

impl TracingFilter {
    pub(crate) fn new(tracer: SdkTracer) -> Self {
        Self { tracer }
    }

    /// A span named `name` (replaced by the full name once it is known to be recorded, so an
    /// unrecorded one costs no formatting), child of `parent` or a root.
    fn start(
        &self,
        name: &'static str,
        kind: SpanKind,
        parent: &OtelContext,
        at: SystemTime,
    ) -> Span {
        self.tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(at)
            .start_with_context(&self.tracer, parent)
    }
}

impl CallFilter for TracingFilter {
    fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
        let context = send.context().cloned().unwrap_or_default();
        let parent = context.traceparent();
        if parent.is_some_and(|p| !p.is_sampled()) {
            return Ok(());
        }
        let mut span = self.start(
            "send",
            SpanKind::Producer,
            &parent_context(parent),
            SystemTime::now(),
        );
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
        let context = call.context().cloned().unwrap_or_default();
        let parent = context.traceparent();
        if parent.is_some_and(|p| !p.is_sampled()) {
            return Ok(None);
        }
        let now = SystemTime::now();
        let waited_since = call.waited().and_then(|w| now.checked_sub(w));
        let parent_cx = parent_context(parent);
        // A hop that starts a trace has no parent for its wait: its `handle` span is the
        // root, and starts when the message arrived.
        let handle_start = if parent.is_none() {
            waited_since.unwrap_or(now)
        } else {
            now
        };
        let mut handle = self.start("handle", SpanKind::Consumer, &parent_cx, handle_start);
        if handle.is_recording() {
            let message_type = call.message_type();
            handle.update_name(format!("handle {message_type}"));
            let attributes = handle_attributes(call);
            if let Some(since) = waited_since {
                let wait_parent = if parent.is_none() {
                    parent_context(Some(traceparent_of(handle.span_context())))
                } else {
                    parent_cx
                };
                let mut wait = self.start("wait", SpanKind::Internal, &wait_parent, since);
                wait.update_name(format!("wait {message_type}"));
                wait.set_attributes(attributes.iter().cloned());
                wait.end_with_timestamp(now);
            }
            handle.set_attributes(attributes);
        }
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
    vec![
        KeyValue::new("messaging.system", "rally"),
        KeyValue::new("messaging.operation.type", "process"),
        KeyValue::new(ACTOR_PATH, call.actor_path().to_owned()),
        KeyValue::new(MESSAGE_TYPE, call.message_type()),
    ]
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
