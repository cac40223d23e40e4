//! What else ends when a timer shuts down: the crate's own waits that have no
//! entry in the wheel to be drained (a keyed timer's stream of expirations
//! waiting for the next one), told through [`ShutdownHooks`].

use std::sync::Weak;

use crate::sync::Mutex;

/// Something of the crate's to end when its timer shuts down.
pub(crate) trait OnShutdown: Send + Sync {
    /// The timer shut down. Runs once, with no lock of the timer's held.
    fn timer_shut_down(&self);
}

/// The hooks of one timer.
///
/// A hook is held weakly, so a keyed timer dropped long before its timer
/// leaves nothing behind but a dead reference, and those are pruned
/// whenever the list doubles: O(1) amortised per registration.
pub(crate) struct ShutdownHooks {
    /// The hooks; `None` once the timer shut down.
    hooks: Mutex<Option<HookList>>,
}

/// The registered hooks, and the list's length after the last prune.
type HookList = (Vec<Weak<dyn OnShutdown>>, usize);

impl Default for ShutdownHooks {
    fn default() -> Self {
        ShutdownHooks {
            hooks: Mutex::new(Some((Vec::new(), 0))),
        }
    }
}

impl ShutdownHooks {
    /// Registers `hook`; if the timer is already shut down, runs it now
    /// (after the lock).
    pub(crate) fn register(&self, hook: Weak<dyn OnShutdown>) {
        {
            let mut hooks = self.hooks.lock();
            if let Some((list, pruned)) = hooks.as_mut() {
                if list.len() >= 2 * (*pruned).max(8) {
                    list.retain(|hook| hook.strong_count() > 0);
                    *pruned = list.len();
                }
                list.push(hook);
                return;
            }
        }
        if let Some(hook) = hook.upgrade() {
            hook.timer_shut_down();
        }
    }

    /// Runs every live hook once, after the lock; later registrations run
    /// at once.
    pub(crate) fn run(&self) {
        let taken = self.hooks.lock().take();
        for hook in taken.map(|(list, _)| list).unwrap_or_default() {
            if let Some(hook) = hook.upgrade() {
                hook.timer_shut_down();
            }
        }
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Count(AtomicUsize);
    impl OnShutdown for Count {
        fn timer_shut_down(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn hooks_run_once_at_shutdown_and_at_once_after_it() {
        let hooks = ShutdownHooks::default();
        let before = Arc::new(Count(AtomicUsize::new(0)));
        let weak: Weak<dyn OnShutdown> = Arc::downgrade(&before) as Weak<dyn OnShutdown>;
        hooks.register(weak);
        hooks.run();
        hooks.run();
        assert_eq!(before.0.load(Ordering::SeqCst), 1);
        let after = Arc::new(Count(AtomicUsize::new(0)));
        hooks.register(Arc::downgrade(&after) as Weak<dyn OnShutdown>);
        assert_eq!(after.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn dead_hooks_are_pruned_as_the_list_grows() {
        let hooks = ShutdownHooks::default();
        for _ in 0..1000 {
            let gone = Arc::new(Count(AtomicUsize::new(0)));
            hooks.register(Arc::downgrade(&gone) as Weak<dyn OnShutdown>);
        }
        let len = hooks
            .hooks
            .lock()
            .as_ref()
            .map_or(0, |(list, _)| list.len());
        assert!(len <= 16, "{len} dead hooks kept");
    }
}
