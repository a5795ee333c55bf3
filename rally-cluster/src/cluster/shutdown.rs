//! One call to stop a member: its phases, in order, each bounded by what is left of one
//! deadline (the shape of Akka's coordinated shutdown, for a Rally member).

use std::time::Duration;

/// A phase of [`Cluster::shutdown`](super::Cluster::shutdown), in the order they run.
///
/// # Example
///
/// ```
/// use rally::cluster::ShutdownPhase;
///
/// assert_eq!(ShutdownPhase::Leave.to_string(), "leave the cluster");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ShutdownPhase {
    /// Leave the cluster: singletons here hand over, then the others are told this member is
    /// leaving (they stop routing to it, its virtual actors' identities move).
    Leave,
    /// Wait until the others have removed this member (its event stream ends).
    Removed,
    /// Stop hosting virtual actors: every activation finishes its message, writes nothing
    /// more, runs its `stopped` hook; answers passed on through this member get back.
    VirtualActors,
    /// Close this node's connections, after what is queued on them is written (at most
    /// 2 s: a connection to a member that has gone never drains).
    Node,
    /// Stop every actor of the actor system.
    System,
}

impl std::fmt::Display for ShutdownPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Leave => "leave the cluster",
            Self::Removed => "wait to be removed",
            Self::VirtualActors => "stop hosting virtual actors",
            Self::Node => "close the node's connections",
            Self::System => "stop the actor system",
        })
    }
}

/// Why [`Cluster::shutdown`](super::Cluster::shutdown) did not finish in time. Every phase ran
/// all the same (those after the deadline with the least time they need), so the member is
/// stopped; the error names the first phase that had not finished when its time was up.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::cluster::{ShutdownError, ShutdownPhase};
///
/// let error = ShutdownError::Overran { phase: ShutdownPhase::Removed, after: Duration::from_secs(10) };
/// assert!(error.to_string().contains("wait to be removed"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShutdownError {
    /// `phase` had not finished `after` the shutdown began (its bound).
    #[error("shutdown: {phase} had not finished after {after:?}")]
    Overran {
        /// The phase.
        phase: ShutdownPhase,
        /// The time from the start of the shutdown to its bound.
        after: Duration,
    },
}

/// The longest the node phase waits for its connections' queues to be written: a member's
/// last answers and leave messages take milliseconds on a live connection (one to a peer that
/// is gone is not waited for), and a peer that stopped reading may never take them.
pub(crate) const NODE_FLUSH: Duration = Duration::from_secs(2);

/// The least time a phase that runs after the deadline gets: closing connections and stopping
/// actors that are idle takes milliseconds, and doing it is better than leaving them open.
pub(crate) const LAST_PHASES_MIN: Duration = Duration::from_millis(200);
