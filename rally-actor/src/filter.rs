//! Call filters: code that runs around every handled message and on every send, registered for
//! a whole system ([`ActorSystem::add_call_filter`]), for one actor ([`Props::call_filter`]) or
//! for a kind of virtual actor. Tracing (`rally::otel`) is one.
//!
//! [`ActorSystem::add_call_filter`]: crate::ActorSystem::add_call_filter
//! [`Props::call_filter`]: crate::Props::call_filter

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::ActorId;
use crate::request_context::{RequestContext, Scope};
use crate::sync::Mutex;

/// What a filter keeps from [`CallFilter::before`] to [`CallFilter::after`] (a span, a timer).
pub type Kept = Box<dyn Any + Send>;

/// The filters an actor's messages pass, in order: the system's, then the actor's own. A
/// thin pointer: it sits in every actor's context.
pub(crate) type Chain = Arc<Filters>;

/// A chain's filters, and whether any of them sees every message ([`Sees::Every`]).
pub(crate) struct Filters {
    list: Vec<Arc<dyn CallFilter>>,
    every: bool,
}

impl Filters {
    /// Whether a message without a request context, or a send without one from an actor,
    /// must pass the chain: only when some filter sees every message.
    pub(crate) fn sees_every_message(&self) -> bool {
        self.every
    }
}

impl std::ops::Deref for Filters {
    type Target = [Arc<dyn CallFilter>];

    fn deref(&self) -> &Self::Target {
        &self.list
    }
}

/// Which messages a filter's hooks run for ([`CallFilter::sees`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sees {
    /// Every message handled and sent (the default: what an authorization filter needs).
    Every,
    /// Only the messages that carry a request context, and the sends where a request enters
    /// ([`Outgoing::is_entry`]): what a filter that follows requests needs, as tracing does. An
    /// actor whose filters all see only these handles a message without a context on the plain
    /// path, as if it had no filter.
    InContext,
}

/// Code that runs before and after an actor handles a message, and when code sends one.
///
/// Filters run in order: the system's first (in the order they were added), then the actor's
/// or the virtual-actor kind's; `after` runs in the reverse order, for the filters whose
/// `before` ran. A filter that rejects a message stops it: the handler does not run, and the
/// asker gets `AskError::Rejected` with the filter's reason (a `tell` goes to dead letters).
/// Hooks are synchronous and run on the actor's task: keep them short.
///
/// # Example
///
/// A filter that refuses messages without a tenant, and sees what it admitted:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use rally::{Actor, ActorResult, ActorSystem, AskError, CallFilter, Context, Handler, Incoming, Kept, Message, Props, Rejection, RequestContext};
///
/// #[derive(Default)]
/// struct NeedsTenant { admitted: AtomicUsize }
/// impl CallFilter for NeedsTenant {
///     fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
///         match call.context().and_then(|c| c.get("tenant")) {
///             Some(_) => { self.admitted.fetch_add(1, Ordering::Relaxed); Ok(None) }
///             None => Err(Rejection::new("no tenant")),
///         }
///     }
/// }
///
/// struct Ping;
/// impl Message for Ping { type Reply = String; }
/// struct Echo;
/// impl Actor for Echo {}
/// impl Handler<Ping> for Echo {
///     async fn handle(&mut self, _: Ping, ctx: &mut Context<Self>) -> ActorResult<String> {
///         Ok(ctx.request_context().and_then(|c| c.get("tenant").map(str::to_owned)).unwrap_or_default())
///     }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let filter = Arc::new(NeedsTenant::default());
/// let echo = system.spawn(Props::new(Echo).call_filter(filter.clone())).unwrap();
/// let second = Duration::from_secs(1);
/// assert!(matches!(echo.ask(Ping, second).await, Err(AskError::Rejected(why)) if why == "no tenant"));
/// let acme = RequestContext::new().with_entry("tenant", "acme").unwrap();
/// let answer = system.in_context(acme, echo.ask(Ping, second)).await;
/// assert_eq!(answer, Ok("acme".to_owned()));
/// assert_eq!(filter.admitted.load(Ordering::Relaxed), 1);
/// # }
/// ```
pub trait CallFilter: Send + Sync + 'static {
    /// Before a message is handled: may replace the context the handler sees (and its sends
    /// carry), and may keep a value until [`after`](Self::after).
    ///
    /// # Errors
    ///
    /// A [`Rejection`] stops the message: not handled, the asker told why.
    fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
        let _ = call;
        Ok(None)
    }

    /// After the handler returned (or panicked, or a later filter rejected the message), with
    /// what `before` kept.
    fn after(&self, call: &Incoming<'_>, outcome: Outcome<'_>, kept: Option<Kept>) {
        let _ = (call, outcome, kept);
    }

    /// When code that runs on an actor with this filter (or inside
    /// [`ActorSystem::in_context`](crate::ActorSystem::in_context) of a system with it) sends a
    /// message, or code outside any actor sends one through a system with it
    /// ([`Outgoing::is_entry`]): may replace the context the message carries.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] stops the send: `tell` returns `SendError::Rejected`, `ask`
    /// `AskError::Rejected`; nothing left.
    fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
        let _ = send;
        Ok(())
    }

    /// Which messages the hooks run for; fixed for the filter's life (read when it is added).
    fn sees(&self) -> Sees {
        Sees::Every
    }
}

/// A message about to be handled, as a [`CallFilter`] sees it.
#[derive(Debug)]
pub struct Incoming<'a> {
    pub(crate) actor: &'a str,
    pub(crate) id: ActorId,
    pub(crate) message_type: &'static str,
    pub(crate) context: Option<RequestContext>,
    pub(crate) waited: Option<Duration>,
    pub(crate) grain: Option<(&'static str, &'a str)>,
}

impl Incoming<'_> {
    /// For a life of a virtual actor, its kind and identity.
    pub fn grain(&self) -> Option<(&'static str, &str)> {
        self.grain
    }

    /// The handling actor's path.
    pub fn actor_path(&self) -> &str {
        self.actor
    }

    /// The handling actor's id.
    pub fn actor_id(&self) -> ActorId {
        self.id
    }

    /// The message's type name.
    pub fn message_type(&self) -> &'static str {
        self.message_type
    }

    /// The context the message came with, or the one an earlier filter set.
    pub fn context(&self) -> Option<&RequestContext> {
        self.context.as_ref()
    }

    /// Replaces the context the handler sees and its sends carry.
    pub fn set_context(&mut self, context: RequestContext) {
        self.context = Some(context);
    }

    /// How long the message waited between its arrival (its send, or its decoding for one from
    /// another node) and this handler; known for messages that carry a context.
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }
}

/// A message about to be sent, as a [`CallFilter`] sees it.
pub struct Outgoing<'a> {
    /// Names the target; called the first time a filter asks (most sends are never asked).
    pub(crate) name_target: &'a dyn Fn() -> Box<str>,
    pub(crate) target: std::cell::OnceCell<Box<str>>,
    pub(crate) message_type: &'static str,
    pub(crate) context: Option<RequestContext>,
    pub(crate) entry: bool,
    pub(crate) grain: Option<(&'static str, &'a str)>,
}

impl std::fmt::Debug for Outgoing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("target", &self.target())
            .field("message_type", &self.message_type)
            .field("context", &self.context)
            .field("entry", &self.entry)
            .field("grain", &self.grain)
            .finish()
    }
}

impl<'a> Outgoing<'a> {
    /// A message to the target `name_target` names (and `grain`, for a virtual actor) carrying
    /// `context`; `entry`: see [`is_entry`](Self::is_entry).
    fn new(
        name_target: &'a dyn Fn() -> Box<str>,
        grain: Option<(&'static str, &'a str)>,
        message_type: &'static str,
        context: Option<RequestContext>,
        entry: bool,
    ) -> Self {
        Self {
            name_target,
            target: std::cell::OnceCell::new(),
            message_type,
            context,
            entry,
            grain,
        }
    }

    /// Where it goes: an actor's path (with its node for a remote one), or
    /// `grain:<kind>/<identity>` for a virtual actor. (Named when first asked for.)
    pub fn target(&self) -> &str {
        self.target.get_or_init(|| (self.name_target)())
    }

    /// For a message to a virtual actor, its kind and identity (the parts of its
    /// [`target`](Self::target), without naming it).
    pub fn grain(&self) -> Option<(&'static str, &str)> {
        self.grain
    }

    /// The message's type name.
    pub fn message_type(&self) -> &'static str {
        self.message_type
    }

    /// The context it will carry.
    pub fn context(&self) -> Option<&RequestContext> {
        self.context.as_ref()
    }

    /// Replaces the context it will carry.
    pub fn set_context(&mut self, context: RequestContext) {
        self.context = Some(context);
    }

    /// Whether code outside any actor and outside
    /// [`ActorSystem::in_context`](crate::ActorSystem::in_context) sends it: a request enters
    /// the system here (the hook is the system's, see [`EntryFilters`]).
    pub fn is_entry(&self) -> bool {
        self.entry
    }
}

/// What became of a message a filter admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome<'a> {
    /// The handler returned `Ok` (or deferred its reply).
    Ok,
    /// The handler returned an error.
    Failed(&'a str),
    /// The handler panicked.
    Panicked(&'a str),
    /// A later filter rejected the message; the handler did not run.
    Rejected(&'a str),
}

/// A filter's refusal of a message, with the reason the sender is told.
///
/// # Example
///
/// ```
/// use rally::Rejection;
///
/// assert_eq!(Rejection::new("over quota").reason(), "over quota");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(String);

impl Rejection {
    /// A rejection for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }

    /// Why.
    pub fn reason(&self) -> &str {
        &self.0
    }

    pub(crate) fn into_reason(self) -> String {
        self.0
    }
}

/// The call filters of an actor system, as its send paths pass them: the filters of the code
/// running now when it runs on an actor (or inside
/// [`ActorSystem::in_context`](crate::ActorSystem::in_context)), and the system's own when code
/// outside any actor sends through it: that is where a request enters the system, and where a
/// filter such as tracing decides whether to follow it. From
/// [`ActorSystem::entry_filters`](crate::ActorSystem::entry_filters); cheap to clone.
#[derive(Clone, Default)]
pub struct EntryFilters(Arc<SystemChain>);

#[derive(Default)]
struct SystemChain {
    /// Whether there are any: a send from outside any actor looks at `chain` only then.
    filtered: AtomicBool,
    chain: Mutex<Option<Chain>>,
}

impl std::fmt::Debug for EntryFilters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryFilters")
            .field("filters", &self.chain().map_or(0, |chain| chain.len()))
            .finish()
    }
}

impl EntryFilters {
    /// The system's filters, if any.
    pub(crate) fn chain(&self) -> Option<Chain> {
        if !self.0.filtered.load(Ordering::Acquire) {
            return None;
        }
        self.0.chain.lock().clone()
    }

    /// Adds `filter` after those there are.
    pub(crate) fn add(&self, filter: Arc<dyn CallFilter>) {
        let mut chain = self.0.chain.lock();
        *chain = joined(chain.as_ref(), vec![filter]);
        self.0.filtered.store(true, Ordering::Release);
    }

    /// The context a message sent now to `target` carries, after the call filters'
    /// [`on_send`](CallFilter::on_send): those of the code running now, or this system's for
    /// code outside any actor ([`Outgoing::is_entry`]). `Ok(None)` when there is nothing to
    /// carry; `target` is called only when a filter asks for it. For transports and virtual actors
    /// that send on their own path; `ActorRef`'s sends call it.
    ///
    /// # Errors
    ///
    /// The [`Rejection`] of a filter's `on_send`.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{ActorSystem, RequestContext};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let entry = system.entry_filters();
    /// assert_eq!(entry.context_for_send(|| "grain:Account/42", "Deposit"), Ok(None));
    /// let context = RequestContext::new().with_entry("tenant", "acme").unwrap();
    /// let carried = system
    ///     .in_context(context.clone(), async { entry.context_for_send(|| "grain:Account/42", "Deposit") })
    ///     .await;
    /// assert_eq!(carried, Ok(Some(context)));
    /// # }
    /// ```
    pub fn context_for_send<T: AsRef<str>>(
        &self,
        target: impl Fn() -> T,
        message_type: &'static str,
    ) -> Result<Option<RequestContext>, Rejection> {
        context_for_send(Some(self), target, None, message_type)
    }

    /// [`context_for_send`](Self::context_for_send) for a message to the virtual actor `kind`
    /// `identity`: the filters see its [`Outgoing::grain`], and `grain:<kind>/<identity>` as
    /// its target.
    ///
    /// # Errors
    ///
    /// The [`Rejection`] of a filter's `on_send`.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{ActorSystem, RequestContext};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let entry = system.entry_filters();
    /// assert_eq!(entry.context_for_grain_send("Account", "42", "Deposit"), Ok(None));
    /// let context = RequestContext::new().with_entry("tenant", "acme").unwrap();
    /// let carried = system
    ///     .in_context(context.clone(), async { entry.context_for_grain_send("Account", "42", "Deposit") })
    ///     .await;
    /// assert_eq!(carried, Ok(Some(context)));
    /// # }
    /// ```
    pub fn context_for_grain_send(
        &self,
        kind: &'static str,
        identity: &str,
        message_type: &'static str,
    ) -> Result<Option<RequestContext>, Rejection> {
        context_for_send(
            Some(self),
            || format!("grain:{kind}/{identity}"),
            Some((kind, identity)),
            message_type,
        )
    }
}

/// [`EntryFilters::context_for_send`], for a target that may not know its system's filters.
pub(crate) fn context_for_send<T: AsRef<str>>(
    entry: Option<&EntryFilters>,
    target: impl Fn() -> T,
    grain: Option<(&'static str, &str)>,
    message_type: &'static str,
) -> Result<Option<RequestContext>, Rejection> {
    let name_target = || -> Box<str> { target().as_ref().into() };
    Scope::with_current(|scope| match scope {
        Some(scope) => match &scope.filters {
            Some(filters) if scope.context.is_some() || filters.sees_every_message() => {
                let context = scope.context.clone();
                on_send(
                    filters,
                    Outgoing::new(&name_target, grain, message_type, context, false),
                )
            }
            _ => Ok(scope.context.clone()),
        },
        None => match entry.and_then(EntryFilters::chain) {
            Some(filters) => on_send(
                &filters,
                Outgoing::new(&name_target, grain, message_type, None, true),
            ),
            None => Ok(None),
        },
    })
}

/// Runs the `on_send` hooks of `filters` in order on `send`; the context it carries after them.
fn on_send(filters: &Chain, mut send: Outgoing<'_>) -> Result<Option<RequestContext>, Rejection> {
    for filter in filters.iter() {
        filter.on_send(&mut send)?;
    }
    Ok(send.context)
}

/// Runs the `before` hooks in order. On a rejection, the `after` hooks of the filters that
/// admitted the message run (told of the rejection) and the rejection comes back. What the
/// filters kept is by position; the buffer is allocated only when one keeps something (a
/// filter that keeps nothing for most messages, as an unsampled trace, costs no allocation).
pub(crate) fn before(
    chain: &Chain,
    call: &mut Incoming<'_>,
) -> Result<Vec<Option<Kept>>, Rejection> {
    let mut kept: Vec<Option<Kept>> = Vec::new();
    for (index, filter) in chain.iter().enumerate() {
        match filter.before(call) {
            Ok(None) => {}
            Ok(Some(value)) => {
                kept.resize_with(index, || None);
                kept.push(Some(value));
            }
            Err(rejection) => {
                after(
                    &chain[..index],
                    call,
                    Outcome::Rejected(rejection.reason()),
                    kept,
                );
                return Err(rejection);
            }
        }
    }
    Ok(kept)
}

/// Runs the `after` hooks of `filters` (those that admitted the message), last first.
pub(crate) fn after(
    filters: &[Arc<dyn CallFilter>],
    call: &Incoming<'_>,
    outcome: Outcome<'_>,
    mut kept: Vec<Option<Kept>>,
) {
    for (index, filter) in filters.iter().enumerate().rev() {
        filter.after(call, outcome, kept.get_mut(index).and_then(Option::take));
    }
}

/// A new chain of `first` then `then` (each actor gets its own `Arc`), or `None` when both
/// are empty.
pub(crate) fn joined(first: Option<&Chain>, then: Vec<Arc<dyn CallFilter>>) -> Option<Chain> {
    if first.is_none() && then.is_empty() {
        return None;
    }
    let list: Vec<Arc<dyn CallFilter>> = first
        .into_iter()
        .flat_map(|chain| chain.iter().cloned())
        .chain(then)
        .collect();
    let every = list.iter().any(|filter| filter.sees() == Sees::Every);
    Some(Arc::new(Filters { list, every }))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::sync::Mutex;
    use crate::{
        Actor, ActorRef, ActorResult, ActorSystem, AskError, Context, Handler, Message, Props,
        SendError,
    };

    const SECOND: Duration = Duration::from_secs(5);

    /// Logs every hook it sees, under its name, and rejects what its rule says.
    struct Logged {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        reject_before: Option<&'static str>,
        reject_send: Option<&'static str>,
    }

    impl Logged {
        fn new(name: &'static str, log: &Arc<Mutex<Vec<String>>>) -> Self {
            Self {
                name,
                log: log.clone(),
                reject_before: None,
                reject_send: None,
            }
        }
    }

    fn short(type_name: &str) -> &str {
        type_name.rsplit("::").next().unwrap_or(type_name)
    }

    impl CallFilter for Logged {
        fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
            let what = short(call.message_type());
            self.log.lock().push(format!("{} before {what}", self.name));
            if self.reject_before == Some(what) {
                return Err(Rejection::new(format!("{} says no", self.name)));
            }
            Ok(Some(Box::new(self.name)))
        }

        fn after(&self, call: &Incoming<'_>, outcome: Outcome<'_>, kept: Option<Kept>) {
            let kept = kept.and_then(|k| k.downcast::<&str>().ok()).map(|k| *k);
            assert_eq!(kept, Some(self.name), "each filter gets back what it kept");
            let outcome = match outcome {
                Outcome::Ok => "ok".to_owned(),
                Outcome::Failed(why) => format!("failed: {why}"),
                Outcome::Panicked(_) => "panicked".to_owned(),
                Outcome::Rejected(why) => format!("rejected: {why}"),
            };
            let what = short(call.message_type());
            self.log
                .lock()
                .push(format!("{} after {what} {outcome}", self.name));
        }

        /// Rejects by its rule the sends of code on an actor or in a context, never an entry.
        fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
            let what = short(send.message_type());
            if send.is_entry() {
                self.log.lock().push(format!("{} entry {what}", self.name));
                return Ok(());
            }
            self.log.lock().push(format!("{} send {what}", self.name));
            if self.reject_send == Some(what) {
                return Err(Rejection::new(format!(
                    "{} will not send {what}",
                    self.name
                )));
            }
            Ok(())
        }
    }

    struct Tenant;
    impl Message for Tenant {
        type Reply = Option<String>;
    }
    struct Fail;
    impl Message for Fail {
        type Reply = ();
    }
    struct Panic;
    impl Message for Panic {
        type Reply = ();
    }

    /// Answers the tenant of its context; asks `next` (when it has one) and answers that.
    struct Hop {
        next: Option<ActorRef<Hop>>,
    }
    impl Actor for Hop {}
    impl Handler<Tenant> for Hop {
        async fn handle(
            &mut self,
            _: Tenant,
            ctx: &mut Context<Self>,
        ) -> ActorResult<Option<String>> {
            if let Some(next) = &self.next {
                return Ok(next.ask(Tenant, SECOND).await?);
            }
            Ok(ctx
                .request_context()
                .and_then(|c| c.get("tenant").map(str::to_owned)))
        }
    }
    impl Handler<Fail> for Hop {
        async fn handle(&mut self, _: Fail, _: &mut Context<Self>) -> ActorResult<()> {
            Err("on purpose".into())
        }
    }
    impl Handler<Panic> for Hop {
        async fn handle(&mut self, _: Panic, _: &mut Context<Self>) -> ActorResult<()> {
            panic!("on purpose")
        }
    }

    fn acme() -> RequestContext {
        RequestContext::new().with_entry("tenant", "acme").unwrap()
    }

    #[tokio::test]
    async fn a_context_follows_a_request_from_actor_to_actor_and_nothing_is_carried_outside_one() {
        let system = ActorSystem::new("filters");
        let last = system.spawn(Hop { next: None }).unwrap();
        let middle = system
            .spawn(Hop {
                next: Some(last.clone()),
            })
            .unwrap();
        let first = system.spawn(Hop { next: Some(middle) }).unwrap();
        assert_eq!(first.ask(Tenant, SECOND).await, Ok(None));
        let answer = system.in_context(acme(), first.ask(Tenant, SECOND)).await;
        assert_eq!(answer, Ok(Some("acme".to_owned())));
        // The next request without a context sees none: nothing lingers in the actors.
        assert_eq!(first.ask(Tenant, SECOND).await, Ok(None));
    }

    /// Logs each send it sees and whether it was an entry.
    #[derive(Default)]
    struct Entries(Mutex<Vec<(String, bool)>>);
    impl CallFilter for Entries {
        fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
            let what = short(send.message_type()).to_owned();
            self.0.lock().push((what, send.is_entry()));
            Ok(())
        }
    }

    /// Where a send went: its grain (kind, identity), if any, and its target.
    type Seen = (Option<(&'static str, String)>, String);

    /// Logs where each send it sees goes.
    #[derive(Default)]
    struct Targets(Mutex<Vec<Seen>>);
    impl CallFilter for Targets {
        fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
            let grain = send.grain().map(|(kind, id)| (kind, id.to_owned()));
            self.0.lock().push((grain, send.target().to_owned()));
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_send_to_a_virtual_actor_shows_its_kind_and_identity_and_one_to_an_actor_none() {
        let system = ActorSystem::new("filters");
        let targets = Arc::new(Targets::default());
        system.add_call_filter(targets.clone());
        let entry = system.entry_filters();
        assert_eq!(
            entry.context_for_grain_send("Account", "42", "Deposit"),
            Ok(None)
        );
        assert_eq!(entry.context_for_send(|| "/user/a", "Deposit"), Ok(None));
        assert_eq!(
            std::mem::take(&mut *targets.0.lock()),
            [
                (
                    Some(("Account", "42".to_owned())),
                    "grain:Account/42".to_owned()
                ),
                (None, "/user/a".to_owned()),
            ]
        );
    }

    #[tokio::test]
    async fn a_send_from_outside_any_actor_is_an_entry_and_one_from_a_handler_or_in_context_is_not()
    {
        let system = ActorSystem::new("filters");
        let entries = Arc::new(Entries::default());
        system.add_call_filter(entries.clone());
        let last = system.spawn(Hop { next: None }).unwrap();
        let first = system
            .spawn(Hop {
                next: Some(last.clone()),
            })
            .unwrap();
        assert_eq!(first.ask(Tenant, SECOND).await, Ok(None));
        let seen = std::mem::take(&mut *entries.0.lock());
        assert_eq!(
            seen,
            [("Tenant".to_owned(), true), ("Tenant".to_owned(), false)],
            "the ask from here enters; the first hop's ask to the last does not"
        );
        let answer = system.in_context(acme(), first.ask(Tenant, SECOND)).await;
        assert_eq!(answer, Ok(Some("acme".to_owned())));
        let seen = std::mem::take(&mut *entries.0.lock());
        assert_eq!(
            seen,
            [("Tenant".to_owned(), false), ("Tenant".to_owned(), false)]
        );
        // A reply delivered from outside any actor (as a transport delivers one from another
        // node to a `Recipient`) is not where a request enters: no filter sees it.
        crate::ReplySink::<Tenant>::send_reply(&last, Ok(Tenant));
        assert!(entries.0.lock().is_empty(), "{:?}", entries.0.lock());
        // A system without filters runs none for a send from outside, and carries nothing.
        let plain = ActorSystem::new("plain");
        let hop = plain.spawn(Hop { next: None }).unwrap();
        assert_eq!(hop.ask(Tenant, SECOND).await, Ok(None));
        assert_eq!(
            plain.entry_filters().context_for_send(|| "x", "T"),
            Ok(None)
        );
        assert!(entries.0.lock().is_empty());
    }

    /// Sees only requests: counts what it handles, logs what it sends.
    #[derive(Default)]
    struct Follows {
        handled: AtomicUsize,
        sends: Entries,
    }
    impl CallFilter for Follows {
        fn before(&self, _: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
            self.handled.fetch_add(1, Ordering::SeqCst);
            Ok(None)
        }
        fn on_send(&self, send: &mut Outgoing<'_>) -> Result<(), Rejection> {
            self.sends.on_send(send)
        }
        fn sees(&self) -> Sees {
            Sees::InContext
        }
    }

    #[tokio::test]
    async fn a_filter_that_sees_requests_only_is_skipped_without_a_context_and_sends_stay_inside() {
        let system = ActorSystem::new("filters");
        let follows = Arc::new(Follows::default());
        system.add_call_filter(follows.clone());
        let last = system.spawn(Hop { next: None }).unwrap();
        let first = system.spawn(Hop { next: Some(last) }).unwrap();
        // The ask from here enters (the filter sees it); the first actor's ask to the last,
        // without a context, passes no hook, and is not taken for an entry: the actor's task
        // runs in its filters' scope even on the plain path.
        assert_eq!(first.ask(Tenant, SECOND).await, Ok(None));
        assert_eq!(follows.handled.load(Ordering::SeqCst), 0);
        assert_eq!(
            std::mem::take(&mut *follows.sends.0.lock()),
            [("Tenant".to_owned(), true)]
        );
        // With a context, every hook runs, at both hops.
        let answer = system.in_context(acme(), first.ask(Tenant, SECOND)).await;
        assert_eq!(answer, Ok(Some("acme".to_owned())));
        assert_eq!(follows.handled.load(Ordering::SeqCst), 2);
        assert_eq!(
            std::mem::take(&mut *follows.sends.0.lock()),
            [("Tenant".to_owned(), false), ("Tenant".to_owned(), false)]
        );
    }

    #[tokio::test]
    async fn filters_run_system_first_then_the_actors_and_after_in_reverse() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let system = ActorSystem::new("filters");
        system.add_call_filter(Arc::new(Logged::new("system", &log)));
        let hop = system
            .spawn(Props::new(Hop { next: None }).call_filter(Arc::new(Logged::new("own", &log))))
            .unwrap();
        assert_eq!(hop.ask(Tenant, SECOND).await, Ok(None));
        assert!(matches!(
            hop.ask(Fail, SECOND).await,
            Err(AskError::Failed(_))
        ));
        assert!(matches!(
            hop.ask(Panic, SECOND).await,
            Err(AskError::Failed(_))
        ));
        let seen = log.lock().clone();
        assert_eq!(
            seen,
            [
                "system entry Tenant",
                "system before Tenant",
                "own before Tenant",
                "own after Tenant ok",
                "system after Tenant ok",
                "system entry Fail",
                "system before Fail",
                "own before Fail",
                "own after Fail failed: on purpose",
                "system after Fail failed: on purpose",
                "system entry Panic",
                "system before Panic",
                "own before Panic",
                "own after Panic panicked",
                "system after Panic panicked",
            ]
        );
    }

    #[tokio::test]
    async fn a_rejection_before_the_handler_reaches_the_asker_and_a_rejected_tell_is_a_dead_letter()
    {
        let log = Arc::new(Mutex::new(Vec::new()));
        let system = ActorSystem::new("filters");
        system.add_call_filter(Arc::new(Logged::new("system", &log)));
        let strict = Logged {
            reject_before: Some("Tenant"),
            ..Logged::new("strict", &log)
        };
        let hop = system
            .spawn(Props::new(Hop { next: None }).call_filter(Arc::new(strict)))
            .unwrap();
        let dead_before = system.dead_letters().count();
        assert_eq!(
            hop.ask(Tenant, SECOND).await,
            Err(AskError::Rejected("strict says no".to_owned()))
        );
        hop.tell(Tenant).unwrap();
        // A later ask is handled after the tell: by then its dead letter is counted.
        let _ = hop.ask(Tenant, SECOND).await;
        assert_eq!(system.dead_letters().count(), dead_before + 1);
        // The handler never ran; the filter before the rejecting one was told.
        assert_eq!(
            log.lock()[..4],
            [
                "system entry Tenant",
                "system before Tenant",
                "strict before Tenant",
                "system after Tenant rejected: strict says no",
            ]
        );
    }

    #[tokio::test]
    async fn a_rejection_on_send_stops_the_message_and_gives_it_back() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let system = ActorSystem::new("filters");
        let handled = Arc::new(AtomicUsize::new(0));
        struct Count(Arc<AtomicUsize>);
        impl CallFilter for Count {
            fn before(&self, _: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(None)
            }
        }
        let last = system
            .spawn(Props::new(Hop { next: None }).call_filter(Arc::new(Count(handled.clone()))))
            .unwrap();
        let gate = Logged {
            reject_send: Some("Tenant"),
            ..Logged::new("gate", &log)
        };
        system.add_call_filter(Arc::new(gate));
        // A send inside the system's context passes its filters' on_send.
        let told = system.in_context(acme(), async { last.tell(Tenant) }).await;
        assert!(
            matches!(told, Err(SendError::Rejected(Tenant, why)) if why == "gate will not send Tenant")
        );
        let asked = system.in_context(acme(), last.ask(Tenant, SECOND)).await;
        assert_eq!(
            asked,
            Err(AskError::Rejected("gate will not send Tenant".to_owned()))
        );
        // A handler's send passes its actor's filters (the system's, added before it started).
        let first = system
            .spawn(Hop {
                next: Some(last.clone()),
            })
            .unwrap();
        assert!(
            matches!(first.ask(Tenant, SECOND).await, Err(AskError::Failed(why)) if why.contains("gate will not send"))
        );
        assert_eq!(
            handled.load(Ordering::SeqCst),
            0,
            "nothing reached the last actor"
        );
        // A send from outside any actor is an entry (which this gate lets through).
        assert_eq!(last.ask(Tenant, SECOND).await, Ok(None));
        assert_eq!(handled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_filter_can_set_the_context_the_handler_sees_and_knows_how_long_a_message_waited() {
        struct Stamp(Arc<Mutex<Option<Duration>>>);
        impl CallFilter for Stamp {
            fn before(&self, call: &mut Incoming<'_>) -> Result<Option<Kept>, Rejection> {
                *self.0.lock() = call.waited();
                let stamped = call.context().cloned().unwrap_or_default();
                call.set_context(stamped.with_entry("tenant", "stamped").unwrap());
                Ok(None)
            }
        }
        let waited = Arc::new(Mutex::new(None));
        let system = ActorSystem::new("filters");
        let hop = system
            .spawn(Props::new(Hop { next: None }).call_filter(Arc::new(Stamp(waited.clone()))))
            .unwrap();
        assert_eq!(
            hop.ask(Tenant, SECOND).await,
            Ok(Some("stamped".to_owned()))
        );
        assert_eq!(
            *waited.lock(),
            None,
            "a message without a context has no arrival time"
        );
        let answer = system.in_context(acme(), hop.ask(Tenant, SECOND)).await;
        assert_eq!(answer, Ok(Some("stamped".to_owned())));
        assert!(waited.lock().is_some());
    }

    /// Defers its reply, pipes a future that asks `next`, and answers from the piped result.
    struct Deferring {
        next: ActorRef<Hop>,
        pending: Option<crate::ReplyTo<Option<String>>>,
    }
    struct Answer(Option<String>);
    impl Message for Answer {
        type Reply = ();
    }
    impl Actor for Deferring {}
    impl Handler<Tenant> for Deferring {
        async fn handle(
            &mut self,
            _: Tenant,
            ctx: &mut Context<Self>,
        ) -> ActorResult<Option<String>> {
            self.pending = ctx.reply_later();
            let next = self.next.clone();
            ctx.pipe(async move { Answer(next.ask(Tenant, SECOND).await.ok().flatten()) });
            ctx.deferred()
        }
    }
    impl Handler<Answer> for Deferring {
        async fn handle(&mut self, answer: Answer, ctx: &mut Context<Self>) -> ActorResult<()> {
            // The piped message came back in the context too.
            let own = ctx
                .request_context()
                .and_then(|c| c.get("tenant").map(str::to_owned));
            assert_eq!(own, answer.0);
            if let Some(reply) = self.pending.take() {
                reply.send(Ok(answer.0));
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn sends_from_a_piped_future_after_reply_later_carry_the_context() {
        let system = ActorSystem::new("filters");
        let next = system.spawn(Hop { next: None }).unwrap();
        let deferring = system
            .spawn(Deferring {
                next,
                pending: None,
            })
            .unwrap();
        let answer = system
            .in_context(acme(), deferring.ask(Tenant, SECOND))
            .await;
        assert_eq!(answer, Ok(Some("acme".to_owned())));
        assert_eq!(deferring.ask(Tenant, SECOND).await, Ok(None));
    }
}
