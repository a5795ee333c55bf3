//! Dispatchers: where actors run, and how long one actor keeps its thread.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

/// Messages an actor handles before it yields its thread, by default.
///
/// Akka's default is 5, tuned for JVM thread pools where a hand-off is cheap relative to a
/// message. Here a hand-off is a tokio task switch; 64 amortises it over a burst while staying
/// under tokio's own cooperative budget of 128 operations, so a busy actor still yields often.
pub const DEFAULT_THROUGHPUT: usize = 64;

/// A named executor for actors, with its scheduling settings.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// let system = rally_actor::ActorSystem::new("doc");
/// assert_eq!(system.default_dispatcher().name(), "default");
/// # }
/// ```
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    handle: Handle,
    throughput: usize,
    throughput_deadline: Option<Duration>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("name", &self.inner.name)
            .field("throughput", &self.inner.throughput)
            .field("throughput_deadline", &self.inner.throughput_deadline)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher running on an existing tokio runtime.
    pub fn on_runtime(
        name: impl Into<String>,
        handle: Handle,
        throughput: usize,
        throughput_deadline: Option<Duration>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: name.into(),
                handle,
                throughput: throughput.max(1),
                throughput_deadline,
            }),
        }
    }

    /// The dispatcher's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Messages an actor handles before yielding its thread.
    pub fn throughput(&self) -> usize {
        self.inner.throughput
    }

    /// The longest an actor keeps its thread while messages remain, if bounded.
    pub fn throughput_deadline(&self) -> Option<Duration> {
        self.inner.throughput_deadline
    }

    /// The runtime the dispatcher's tasks run on.
    pub fn handle(&self) -> &Handle {
        &self.inner.handle
    }

    pub(crate) fn spawn<F>(&self, future: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.handle.spawn(future).abort_handle()
    }
}
