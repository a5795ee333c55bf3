//! How to make an actor: its instance or factory, name, mailbox and dispatcher.

use std::sync::Arc;

use crate::{Actor, CallFilter, MailboxConfig, TerminationSink};

/// Spawn options for an actor of type `A`.
///
/// An actor spawned from an instance keeps that instance across restarts (its `pre_restart`
/// hook resets what must be reset); one spawned from a factory gets a fresh instance on every
/// restart, as in Akka.
///
/// # Example
///
/// ```
/// use rally::{Actor, MailboxConfig, Overflow, Props};
///
/// #[derive(Default)]
/// struct Worker;
/// impl Actor for Worker {}
///
/// let props = Props::from_factory(Worker::default)
///     .named("worker")
///     .with_mailbox(MailboxConfig::bounded(100, Overflow::Fail));
/// assert_eq!(props.name(), Some("worker"));
/// ```
pub struct Props<A: Actor> {
    pub(crate) source: Source<A>,
    pub(crate) name: Option<String>,
    pub(crate) mailbox: Option<MailboxConfig>,
    pub(crate) dispatcher: Option<String>,
    pub(crate) monitored: Option<bool>,
    pub(crate) watcher: Option<Arc<dyn TerminationSink>>,
    pub(crate) filters: Vec<Arc<dyn CallFilter>>,
    pub(crate) grain: Option<(&'static str, Arc<str>)>,
}

pub(crate) enum Source<A> {
    Instance(Option<A>),
    Factory(Box<dyn FnMut() -> A + Send>),
}

impl<A> Source<A> {
    /// The first instance.
    pub(crate) fn first(&mut self) -> A {
        match self {
            Self::Instance(slot) => slot
                .take()
                .expect("the first instance is taken once, at start"),
            Self::Factory(make) => make(),
        }
    }

    /// Replaces the instance for a restart when there is a factory; keeps it otherwise.
    pub(crate) fn restart(&mut self, actor: &mut A) {
        if let Self::Factory(make) = self {
            *actor = make();
        }
    }
}

impl<A: Actor> Props<A> {
    /// Spawn this instance.
    pub fn new(actor: A) -> Self {
        Self {
            source: Source::Instance(Some(actor)),
            name: None,
            mailbox: None,
            dispatcher: None,
            monitored: None,
            watcher: None,
            filters: Vec::new(),
            grain: None,
        }
    }

    /// Spawn from a factory, called again for every restart.
    pub fn from_factory(factory: impl FnMut() -> A + Send + 'static) -> Self {
        Self {
            source: Source::Factory(Box::new(factory)),
            name: None,
            mailbox: None,
            dispatcher: None,
            monitored: None,
            watcher: None,
            filters: Vec::new(),
            grain: None,
        }
    }

    /// Gives the actor a name: its path becomes `<parent path>/<name>` and it can be looked up.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Uses this mailbox instead of the system default.
    pub fn with_mailbox(mut self, mailbox: MailboxConfig) -> Self {
        self.mailbox = Some(mailbox);
        self
    }

    /// Runs the actor on the named dispatcher.
    pub fn on_dispatcher(mut self, dispatcher: impl Into<String>) -> Self {
        self.dispatcher = Some(dispatcher.into());
        self
    }

    /// Monitors this actor (or not), whatever its dispatcher and the system say.
    pub fn monitored(mut self, on: bool) -> Self {
        self.monitored = Some(on);
        self
    }

    /// Tells `watcher` once the actor has terminated, like
    /// [`ActorRef::watch_with`](crate::ActorRef::watch_with) called before it can run, but
    /// kept by the system until the actor stops: it costs the actor no message, no wake-up and
    /// no watcher table of its own (what an actor spawned by the hundred thousand, a virtual
    /// actor say, notices). It cannot be removed.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use rally::{Actor, ActorId, ActorSystem, Props, Terminated, TerminationSink};
    ///
    /// struct Flag(ActorId, AtomicBool);
    /// impl TerminationSink for Flag {
    ///     fn watcher(&self) -> ActorId {
    ///         self.0
    ///     }
    ///     fn notify(&self, _: Terminated) {
    ///         self.1.store(true, Ordering::SeqCst);
    ///     }
    /// }
    ///
    /// struct Worker;
    /// impl Actor for Worker {}
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let system = ActorSystem::new("doc");
    /// let flag = Arc::new(Flag(system.next_id(), AtomicBool::new(false)));
    /// let worker = system.spawn(Props::new(Worker).watched_by(flag.clone()))?;
    /// worker.stop();
    /// system.shutdown().await?;
    /// assert!(flag.1.load(Ordering::SeqCst));
    /// # Ok(())
    /// # }
    /// ```
    pub fn watched_by(mut self, watcher: Arc<dyn TerminationSink>) -> Self {
        self.watcher = Some(watcher);
        self
    }

    /// Adds a call filter for this actor's messages and sends, after the system's (see
    /// [`CallFilter`] for an example).
    pub fn call_filter(mut self, filter: Arc<dyn CallFilter>) -> Self {
        self.filters.push(filter);
        self
    }

    /// Says that this actor is a life of the virtual actor `identity` of `kind`, for the call
    /// filters ([`Incoming::grain`](crate::Incoming::grain)); `rally::cluster::virtual_actors`
    /// sets it on the activations it spawns. Kept only when the actor has call filters.
    pub fn as_grain(mut self, kind: &'static str, identity: Arc<str>) -> Self {
        self.grain = Some((kind, identity));
        self
    }

    /// The name, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl<A: Actor> From<A> for Props<A> {
    fn from(actor: A) -> Self {
        Self::new(actor)
    }
}

impl<A: Actor> std::fmt::Debug for Props<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Props").finish_non_exhaustive()
    }
}
