//! The locks and atomics every thread-shared structure of the crate uses.
//!
//! In a normal build these are `parking_lot`'s locks and the standard
//! atomics. Built with `--cfg purgatorio_loom` (the loom models, see
//! `docs/guarantees.md`) they are loom's instrumented ones behind the same
//! API, so the models run the crate's own code, not a copy of it.
//!
//! Plain statistics that order nothing (`timer::metrics`, the shard hint)
//! keep the standard atomics in both builds. Thread-locals come from here
//! too: loom's threads are not the operating system's.

#[cfg(not(purgatorio_loom))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(purgatorio_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(purgatorio_loom))]
pub(crate) use std::thread_local;

#[cfg(purgatorio_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(purgatorio_loom)]
pub(crate) use loom::thread_local;
#[cfg(purgatorio_loom)]
pub(crate) use model::{Condvar, Mutex, MutexGuard};

/// Picks watch-list shards and hashes their maps: random per purgatory
/// (HashDoS-resistant) normally, fixed under loom, whose models must run the
/// same code path on every run.
#[cfg(not(purgatorio_loom))]
pub(crate) type HashState = std::collections::hash_map::RandomState;
#[cfg(purgatorio_loom)]
pub(crate) type HashState =
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// loom's `Mutex` and `Condvar` with `parking_lot`'s API: no poisoning, a
/// condvar that waits on `&mut` guard, and `try_lock` giving an `Option`.
#[cfg(purgatorio_loom)]
mod model {
    use std::fmt;
    use std::ops::{Deref, DerefMut};
    use std::sync::{PoisonError, TryLockError};
    use std::time::Instant;

    /// A loom mutex that does not poison.
    #[derive(Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// Its guard; `None` only while a condvar wait holds the real guard.
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(guard) => Some(MutexGuard(Some(guard))),
                Err(TryLockError::Poisoned(poisoned)) => {
                    Some(MutexGuard(Some(poisoned.into_inner())))
                }
                Err(TryLockError::WouldBlock) => None,
            }
        }
    }

    impl<T> fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Mutex")
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_ref().expect("guard held")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_mut().expect("guard held")
        }
    }

    /// A loom condvar. loom has no time: a timed wait is an untimed one,
    /// which explores every order in which the notification can arrive.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    /// Whether a timed wait ran out; never under loom.
    pub(crate) struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            false
        }
    }

    impl Condvar {
        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let held = guard.0.take().expect("guard held");
            guard.0 = Some(self.0.wait(held).unwrap_or_else(PoisonError::into_inner));
        }

        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _until: Instant,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}
