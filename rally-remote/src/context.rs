//! A request context on the wire: written into a frame from a [`RequestContext`], read back
//! from the frame's [`ContextView`].

use bytes::BytesMut;
use rally_actor::{RequestContext, TraceParent};
use rally_wire::{ContextView, WireTrace, write_context};

/// What writes `context`'s block into a frame (see `OutboundEncoder::push_message`).
pub(crate) fn writer(context: &RequestContext) -> impl Fn(&mut BytesMut) + '_ {
    move |out| {
        let trace = context.traceparent().map(|t| WireTrace {
            trace_id: t.trace_id,
            span_id: t.span_id,
            flags: t.flags,
        });
        write_context(out, trace.as_ref(), context.entries());
    }
}

/// The context a frame carried. The wire's bounds are the context's own (a test below pins
/// it), so every entry that decoded fits; an all-zero trace parent, which the W3C format
/// calls invalid, is dropped.
pub(crate) fn read(view: &ContextView<'_>) -> RequestContext {
    let mut context = RequestContext::new();
    if let Some(trace) = view.trace() {
        let parent = TraceParent {
            trace_id: trace.trace_id,
            span_id: trace.span_id,
            flags: trace.flags,
        };
        if parent.trace_id != [0; 16] && parent.span_id != [0; 8] {
            context = context.with_traceparent(parent);
        }
    }
    for (key, value) in view.entries() {
        context = match context.clone().with_entry(key, value) {
            Ok(more) => more,
            Err(_) => context,
        };
    }
    context
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_and_the_context_have_the_same_bounds() {
        assert_eq!(
            rally_wire::MAX_CONTEXT_ENTRIES,
            rally_actor::MAX_CONTEXT_ENTRIES
        );
        assert_eq!(
            rally_wire::MAX_CONTEXT_BYTES,
            rally_actor::MAX_CONTEXT_BYTES
        );
        assert_eq!(
            rally_wire::MAX_CONTEXT_KEY_LEN,
            rally_actor::MAX_CONTEXT_KEY_LEN
        );
    }

    #[test]
    fn a_context_crosses_the_wire_whole() {
        let parent: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap();
        let mut context = RequestContext::new().with_traceparent(parent);
        for i in 0..rally_actor::MAX_CONTEXT_ENTRIES {
            context = context
                .with_entry(format!("key-{i}"), "v".repeat(40))
                .unwrap();
        }
        let mut out = BytesMut::new();
        writer(&context)(&mut out);
        let (view, rest) = ContextView::split(&out).unwrap();
        assert!(rest.is_empty());
        assert_eq!(read(&view), context);
    }
}
