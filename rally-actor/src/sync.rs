//! Locks that stay usable after a panic: [`Mutex`], [`RwLock`] and [`Condvar`], the one way
//! Rally's crates take a blocking lock.
//!
//! # Why poison-tolerant
//!
//! The standard library poisons a lock when a thread panics while holding it, and from then on
//! every `lock()` returns an error that most code answers with a second panic. In Rally a panic
//! under a lock can only come from code the runtime calls on a user's behalf (a serializer, a
//! hook, a callback) or from a bug, and the data under Rally's locks is changed by whole
//! operations, so it stays consistent: one failed message must not turn every later lock into a
//! panic and take the node down with it. These wrappers therefore hand out the guard whether or
//! not the lock was poisoned; the guards are the standard library's. Where user code can run,
//! Rally still calls it outside the lock where it can.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use rally::sync::Mutex;
//!
//! let counter = Arc::new(Mutex::new(0_u32));
//! let shared = counter.clone();
//! // A thread that panics while it holds the lock...
//! let failed = std::thread::spawn(move || {
//!     let _guard = shared.lock();
//!     panic!("a user callback failed");
//! })
//! .join();
//! assert!(failed.is_err());
//! // ...leaves it usable for everyone else.
//! *counter.lock() += 1;
//! assert_eq!(*counter.lock(), 1);
//! ```

use std::sync::PoisonError;
use std::time::Duration;

pub use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult};

/// A mutual-exclusion lock whose [`lock`](Mutex::lock) ignores poisoning (the module docs say
/// why).
///
/// # Example
///
/// ```
/// use rally::sync::Mutex;
///
/// let names = Mutex::new(Vec::new());
/// names.lock().push("ping");
/// assert_eq!(names.into_inner(), ["ping"]);
/// ```
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    ///
    /// # Example
    ///
    /// ```
    /// static TOTAL: rally::sync::Mutex<u64> = rally::sync::Mutex::new(0);
    /// *TOTAL.lock() += 2;
    /// ```
    pub const fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    /// The value, taking the mutex apart.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(rally::sync::Mutex::new(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Blocks until the lock is free and returns its guard, also after a panic of an earlier
    /// holder.
    ///
    /// # Example
    ///
    /// ```
    /// let mutex = rally::sync::Mutex::new(1);
    /// *mutex.lock() += 1;
    /// assert_eq!(*mutex.lock(), 2);
    /// ```
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The guard if the lock is free now, `None` if someone holds it (a poisoned lock is free).
    ///
    /// # Example
    ///
    /// ```
    /// let mutex = rally::sync::Mutex::new(1);
    /// let held = mutex.lock();
    /// assert!(mutex.try_lock().is_none());
    /// drop(held);
    /// assert!(mutex.try_lock().is_some());
    /// ```
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The value through a unique reference: no locking needed.
    ///
    /// # Example
    ///
    /// ```
    /// let mut mutex = rally::sync::Mutex::new(1);
    /// *mutex.get_mut() = 5;
    /// assert_eq!(*mutex.lock(), 5);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

/// A reader-writer lock whose [`read`](RwLock::read) and [`write`](RwLock::write) ignore
/// poisoning (the module docs say why).
///
/// # Example
///
/// ```
/// use rally::sync::RwLock;
///
/// let table = RwLock::new(vec![1, 2]);
/// table.write().push(3);
/// assert_eq!(table.read().len(), 3);
/// ```
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

impl<T> RwLock<T> {
    /// A new unlocked lock holding `value`.
    ///
    /// # Example
    ///
    /// ```
    /// let lock = rally::sync::RwLock::new("a");
    /// assert_eq!(*lock.read(), "a");
    /// ```
    pub const fn new(value: T) -> Self {
        Self(std::sync::RwLock::new(value))
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Shared access: blocks while a writer holds the lock.
    ///
    /// # Example
    ///
    /// ```
    /// let lock = rally::sync::RwLock::new(1);
    /// let (a, b) = (lock.read(), lock.read());
    /// assert_eq!(*a + *b, 2);
    /// ```
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access: blocks while anyone else holds the lock.
    ///
    /// # Example
    ///
    /// ```
    /// let lock = rally::sync::RwLock::new(1);
    /// *lock.write() = 2;
    /// assert_eq!(*lock.read(), 2);
    /// ```
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A condition variable for [`Mutex`]'s guards whose waits ignore poisoning.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use rally::sync::{Condvar, Mutex};
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let other = pair.clone();
/// std::thread::spawn(move || {
///     *other.0.lock() = true;
///     other.1.notify_one();
/// });
/// let mut ready = pair.0.lock();
/// while !*ready {
///     ready = pair.1.wait_timeout(ready, Duration::from_secs(5)).0;
/// }
/// ```
#[derive(Debug, Default)]
pub struct Condvar(std::sync::Condvar);

impl Condvar {
    /// A new condition variable.
    ///
    /// # Example
    ///
    /// ```
    /// let ready = rally::sync::Condvar::new();
    /// ready.notify_all();
    /// ```
    pub const fn new() -> Self {
        Self(std::sync::Condvar::new())
    }

    /// Releases `guard`, waits for a notification (or a spurious wake-up), and takes the lock
    /// again.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rally::sync::{Condvar, Mutex};
    ///
    /// let pair = Arc::new((Mutex::new(0), Condvar::new()));
    /// let other = pair.clone();
    /// std::thread::spawn(move || {
    ///     *other.0.lock() = 1;
    ///     other.1.notify_all();
    /// });
    /// let mut value = pair.0.lock();
    /// while *value == 0 {
    ///     value = pair.1.wait(value);
    /// }
    /// ```
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases `guard`, waits for a notification or `timeout`, and takes the lock again.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::sync::{Condvar, Mutex};
    ///
    /// let (lock, ready) = (Mutex::new(()), Condvar::new());
    /// let (_guard, waited) = ready.wait_timeout(lock.lock(), Duration::from_millis(1));
    /// assert!(waited.timed_out());
    /// ```
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.0
            .wait_timeout(guard, timeout)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes one waiter.
    ///
    /// # Example
    ///
    /// ```
    /// rally::sync::Condvar::new().notify_one();
    /// ```
    pub fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiter.
    ///
    /// # Example
    ///
    /// ```
    /// rally::sync::Condvar::new().notify_all();
    /// ```
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// The same [`Mutex`] over loom's, for the loom models of the concurrency cores.
#[cfg(loom)]
pub(crate) mod model {
    use std::sync::PoisonError;

    pub(crate) use loom::sync::MutexGuard;

    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Mutex, RwLock};

    #[test]
    fn a_panic_under_the_write_lock_leaves_it_usable() {
        let lock = Arc::new(RwLock::new(1));
        let shared = lock.clone();
        let failed = std::thread::spawn(move || {
            let mut guard = shared.write();
            *guard = 2;
            panic!("fails while writing");
        })
        .join();
        assert!(failed.is_err());
        assert_eq!(*lock.read(), 2);
        *lock.write() = 3;
        assert_eq!(*lock.read(), 3);
    }

    #[test]
    fn a_poisoned_mutex_still_gives_its_value() {
        let lock = Arc::new(Mutex::new(vec![1]));
        let shared = lock.clone();
        let _ = std::thread::spawn(move || {
            shared.lock().push(2);
            panic!("fails while holding it");
        })
        .join();
        let mut lock = Arc::try_unwrap(lock).expect("the thread has ended and dropped its clone");
        lock.get_mut().push(3);
        assert_eq!(lock.into_inner(), [1, 2, 3]);
    }
}
