//! A request's context: a W3C trace parent and a few string entries that follow a request
//! from actor to actor, across nodes and into virtual actors.
//!
//! A context is set for the sends of a block with [`ActorSystem::in_context`]; a handler
//! reads the one its message came with through [`Context::request_context`], and every message
//! it sends while it handles (with `tell`, `ask`, a grain call, from `pipe`/`pipe_to`) carries
//! the same context on. A message sent outside any context carries none, and costs nothing.
//!
//! [`ActorSystem::in_context`]: crate::ActorSystem::in_context
//! [`Context::request_context`]: crate::Context::request_context

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use crate::filter::Chain;

/// Most entries a context holds.
pub const MAX_CONTEXT_ENTRIES: usize = 32;
/// Most bytes a context's keys and values take together.
pub const MAX_CONTEXT_BYTES: usize = 2048;
/// Longest key, in bytes.
pub const MAX_CONTEXT_KEY_LEN: usize = 64;

/// A W3C trace context `traceparent`: the trace, the parent span and the trace flags.
///
/// # Example
///
/// ```
/// use rally::TraceParent;
///
/// let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// let parent: TraceParent = text.parse().unwrap();
/// assert!(parent.is_sampled());
/// assert_eq!(parent.to_string(), text);
/// assert!("00-00000000000000000000000000000000-00f067aa0ba902b7-01".parse::<TraceParent>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace's id (never all zeros).
    pub trace_id: [u8; 16],
    /// The parent span's id (never all zeros).
    pub span_id: [u8; 8],
    /// The trace flags; bit 0 says the trace is sampled.
    pub flags: u8,
}

impl TraceParent {
    /// Whether the sampled flag is set.
    pub fn is_sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The same trace and flags with another parent span.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::TraceParent;
    ///
    /// let root = TraceParent { trace_id: [1; 16], span_id: [2; 8], flags: 1 };
    /// assert_eq!(root.child([3; 8]).trace_id, root.trace_id);
    /// assert_eq!(root.child([3; 8]).span_id, [3; 8]);
    /// ```
    pub fn child(self, span_id: [u8; 8]) -> Self {
        Self { span_id, ..self }
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.span_id.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceParent({self})")
    }
}

impl FromStr for TraceParent {
    type Err = ContextError;

    fn from_str(text: &str) -> Result<Self, ContextError> {
        let invalid = || ContextError::InvalidTraceParent(text.chars().take(80).collect());
        let parts: Vec<&str> = text.split('-').collect();
        let [version, trace, span, flags] = parts[..] else {
            return Err(invalid());
        };
        // Version 00 has exactly four fields; a later version may add some, which a reader of
        // 00 ignores, but never version ff.
        if version.len() != 2 || version == "ff" {
            return Err(invalid());
        }
        let mut trace_id = [0; 16];
        let mut span_id = [0; 8];
        let mut flag = [0; 1];
        hex(trace, &mut trace_id).ok_or_else(invalid)?;
        hex(span, &mut span_id).ok_or_else(invalid)?;
        hex(flags, &mut flag).ok_or_else(invalid)?;
        let parent = Self {
            trace_id,
            span_id,
            flags: flag[0],
        };
        parent.check().map_err(|_| invalid())?;
        Ok(parent)
    }
}

impl TraceParent {
    /// Refuses the all-zero ids the W3C format declares invalid.
    fn check(&self) -> Result<(), ContextError> {
        if self.trace_id == [0; 16] || self.span_id == [0; 8] {
            return Err(ContextError::InvalidTraceParent(self.to_string()));
        }
        Ok(())
    }
}

/// Decodes lower-case hex into `out`, exactly filling it.
fn hex(text: &str, out: &mut [u8]) -> Option<()> {
    let bytes = text.as_bytes();
    if bytes.len() != out.len() * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(())
}

/// Why a context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// More than [`MAX_CONTEXT_ENTRIES`] entries.
    #[error("a request context holds at most {max} entries")]
    TooManyEntries {
        /// The bound.
        max: usize,
    },
    /// Keys and values over [`MAX_CONTEXT_BYTES`] together.
    #[error("a request context's keys and values take {size} bytes, over the bound of {max}")]
    TooLarge {
        /// What they would take.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// An empty key, or one over [`MAX_CONTEXT_KEY_LEN`] bytes.
    #[error("invalid context key {0:?}: keys are 1 to 64 bytes")]
    InvalidKey(String),
    /// Not a W3C `traceparent`.
    #[error("not a W3C traceparent: {0:?}")]
    InvalidTraceParent(String),
}

/// The context of a request: an optional [`TraceParent`] and a few string entries (a tenant,
/// a user, a correlation id), carried by every message sent on its behalf. Cloning it is a
/// reference count; changing it makes a new one.
///
/// # Example
///
/// ```
/// use rally::{ContextError, RequestContext};
///
/// let context = RequestContext::new().with_entry("tenant", "acme").unwrap();
/// assert_eq!(context.get("tenant"), Some("acme"));
/// assert_eq!(context.get("user"), None);
/// let huge = "x".repeat(4096);
/// assert!(matches!(context.with_entry("blob", huge), Err(ContextError::TooLarge { .. })));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RequestContext(Arc<Inner>);

#[derive(Clone, Default, PartialEq, Eq)]
struct Inner {
    trace: Option<TraceParent>,
    entries: Vec<(Box<str>, Box<str>)>,
}

impl RequestContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same context with `parent` as its trace parent.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{RequestContext, TraceParent};
    ///
    /// let parent = TraceParent { trace_id: [1; 16], span_id: [2; 8], flags: 1 };
    /// assert_eq!(RequestContext::new().with_traceparent(parent).traceparent(), Some(parent));
    /// ```
    pub fn with_traceparent(self, parent: TraceParent) -> Self {
        self.changed(|inner| inner.trace = Some(parent))
    }

    /// The trace parent, if any.
    pub fn traceparent(&self) -> Option<TraceParent> {
        self.0.trace
    }

    /// The same context with `key` set to `value` (replacing an entry of that key).
    ///
    /// # Errors
    ///
    /// [`ContextError`] when the key is empty or too long, or the context would pass
    /// [`MAX_CONTEXT_ENTRIES`] or [`MAX_CONTEXT_BYTES`]; the context is unchanged.
    pub fn with_entry(
        self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, ContextError> {
        let (key, value) = (key.into(), value.into());
        if key.is_empty() || key.len() > MAX_CONTEXT_KEY_LEN {
            return Err(ContextError::InvalidKey(key.chars().take(80).collect()));
        }
        let replaced = self.0.entries.iter().find(|(k, _)| **k == *key);
        let count = self.0.entries.len() + usize::from(replaced.is_none());
        if count > MAX_CONTEXT_ENTRIES {
            return Err(ContextError::TooManyEntries {
                max: MAX_CONTEXT_ENTRIES,
            });
        }
        let size =
            self.size() + key.len() + value.len() - replaced.map_or(0, |(k, v)| k.len() + v.len());
        if size > MAX_CONTEXT_BYTES {
            return Err(ContextError::TooLarge {
                size,
                max: MAX_CONTEXT_BYTES,
            });
        }
        Ok(self.changed(|inner| {
            let entry = (key.into_boxed_str(), value.into_boxed_str());
            match inner.entries.iter_mut().find(|(k, _)| *k == entry.0) {
                Some(slot) => *slot = entry,
                None => inner.entries.push(entry),
            }
        }))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .entries
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    /// The entries, in the order they were first set.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        self.0.entries.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Whether it has no trace parent and no entry.
    pub fn is_empty(&self) -> bool {
        self.0.trace.is_none() && self.0.entries.is_empty()
    }

    /// The bytes its keys and values take together.
    fn size(&self) -> usize {
        self.0.entries.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    fn changed(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.0);
        change(&mut inner);
        Self(Arc::new(inner))
    }

    /// The context of the code running now: the one of the message being handled, or of the
    /// enclosing [`ActorSystem::in_context`](crate::ActorSystem::in_context); `None` elsewhere.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{ActorSystem, RequestContext};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// assert_eq!(RequestContext::current(), None);
    /// let context = RequestContext::new().with_entry("tenant", "acme").unwrap();
    /// let seen = system.in_context(context.clone(), async { RequestContext::current() }).await;
    /// assert_eq!(seen, Some(context));
    /// # }
    /// ```
    pub fn current() -> Option<Self> {
        SCOPE.try_with(|scope| scope.context.clone()).ok().flatten()
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("RequestContext");
        if let Some(trace) = self.0.trace {
            out.field("traceparent", &format_args!("{trace}"));
        }
        out.field("entries", &self.0.entries).finish()
    }
}

/// What the code running now works on behalf of: the context its sends carry and the call
/// filters they pass (see [`crate::CallFilter`]).
#[derive(Clone, Default)]
pub(crate) struct Scope {
    pub(crate) context: Option<RequestContext>,
    pub(crate) filters: Option<Chain>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

impl Scope {
    /// The scope of the code running now, if any.
    pub(crate) fn current() -> Option<Self> {
        SCOPE.try_with(Self::clone).ok()
    }

    /// Reads the scope of the code running now without cloning it.
    pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Self>) -> R) -> R {
        let mut f = Some(f);
        match SCOPE.try_with(|scope| (f.take().expect("called once"))(Some(scope))) {
            Ok(out) => out,
            Err(_) => (f.take().expect("not called when there is no scope"))(None),
        }
    }

    /// Runs `future` in this scope.
    pub(crate) fn run<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        SCOPE.scope(self, future)
    }

    /// Runs `future` in the scope of the code running now, if there is one (what `pipe` uses,
    /// so that the sends of a piped future carry its handler's context).
    pub(crate) fn carry<F>(future: F) -> impl Future<Output = F::Output> + Send + 'static
    where
        F: Future + Send + 'static,
    {
        let scope = Self::current();
        async move {
            match scope {
                Some(scope) => scope.run(future).await,
                None => future.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_what_it_writes_and_refuses_what_is_not_one() {
        let text = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let parent: TraceParent = text.parse().unwrap();
        assert_eq!(parent.to_string(), text);
        assert!(!parent.is_sampled());
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        ] {
            assert!(
                matches!(
                    bad.parse::<TraceParent>(),
                    Err(ContextError::InvalidTraceParent(_))
                ),
                "{bad:?} was taken"
            );
        }
    }

    #[test]
    fn entries_are_bounded_in_count_size_and_key_and_a_refusal_changes_nothing() {
        let mut context = RequestContext::new();
        for i in 0..MAX_CONTEXT_ENTRIES {
            context = context.with_entry(format!("k{i}"), "v").unwrap();
        }
        assert_eq!(
            context.clone().with_entry("one-more", "v"),
            Err(ContextError::TooManyEntries {
                max: MAX_CONTEXT_ENTRIES
            })
        );
        // Replacing an entry is not adding one.
        let replaced = context.clone().with_entry("k0", "w").unwrap();
        assert_eq!(replaced.get("k0"), Some("w"));
        assert_eq!(replaced.entries().len(), MAX_CONTEXT_ENTRIES);
        assert_eq!(context.get("k0"), Some("v"));

        let near = "x".repeat(MAX_CONTEXT_BYTES - 1);
        let full = RequestContext::new().with_entry("a", near.clone()).unwrap();
        assert!(matches!(
            full.clone().with_entry("b", "y"),
            Err(ContextError::TooLarge { size, max }) if size == MAX_CONTEXT_BYTES + 2 && max == MAX_CONTEXT_BYTES
        ));
        // A smaller value for the same key fits again.
        assert!(full.with_entry("a", "short").is_ok());

        assert!(matches!(
            RequestContext::new().with_entry("", "v"),
            Err(ContextError::InvalidKey(_))
        ));
        assert!(matches!(
            RequestContext::new().with_entry("k".repeat(MAX_CONTEXT_KEY_LEN + 1), "v"),
            Err(ContextError::InvalidKey(_))
        ));
    }

    #[tokio::test]
    async fn the_scope_is_seen_inside_and_not_outside() {
        let context = RequestContext::new().with_entry("a", "b").unwrap();
        assert!(Scope::current().is_none());
        let inside = Scope {
            context: Some(context.clone()),
            filters: None,
        }
        .run(async { RequestContext::current() })
        .await;
        assert_eq!(inside, Some(context));
        assert_eq!(RequestContext::current(), None);
    }
}
