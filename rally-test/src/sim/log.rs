//! [`SimLog`]: what the hosts record, each entry stamped with the simulated time.

use super::*;

/// An entry of a [`SimLog`]: what happened, and when (simulated time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged<T> {
    /// Simulated time of the entry.
    pub at: Duration,
    /// What happened.
    pub entry: T,
}

/// A log shared by the hosts of a simulation and the test: each entry stamped with the
/// simulated time (say in the entry which host recorded it). Clones share one log.
///
/// # Example
///
/// ```
/// use rally::sim::{SimLog, HostSimulation};
///
/// let log = SimLog::new();
/// let mut simulation = HostSimulation::new(1);
/// let on_host = log.clone();
/// simulation.host("a", move || {
///     let log = on_host.clone();
///     async move { log.record("a started") }
/// });
/// simulation.run_for(std::time::Duration::from_millis(5)).unwrap();
/// assert_eq!(log.entries()[0].entry, "a started");
/// assert!(log.entries()[0].at <= std::time::Duration::from_millis(5));
/// ```
#[derive(Debug)]
pub struct SimLog<T> {
    entries: Arc<Mutex<Vec<Logged<T>>>>,
}

impl<T> Clone for SimLog<T> {
    fn clone(&self) -> Self {
        Self {
            entries: Arc::clone(&self.entries),
        }
    }
}

impl<T> Default for SimLog<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SimLog<T> {
    /// An empty log.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(rally::sim::SimLog::<u32>::new().entries().is_empty());
    /// ```
    pub fn new() -> Self {
        Self {
            entries: Arc::default(),
        }
    }

    /// Appends `entry`, stamped with the simulated time (zero outside a simulation's host).
    ///
    /// # Example
    ///
    /// See [`SimLog`].
    pub fn record(&self, entry: T) {
        let logged = Logged {
            at: now().unwrap_or_default(),
            entry,
        };
        self.entries.lock().push(logged);
    }

    /// Everything recorded so far, in order.
    ///
    /// # Example
    ///
    /// See [`SimLog`].
    pub fn entries(&self) -> Vec<Logged<T>>
    where
        T: Clone,
    {
        self.entries.lock().clone()
    }
}
