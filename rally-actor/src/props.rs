//! How to make an actor: its instance or factory, name, mailbox and dispatcher.

use crate::{Actor, MailboxConfig};

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
