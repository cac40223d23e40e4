//! A lock biased towards one thread, its owner: the owner takes and
//! releases it with plain stores, and every other thread pays for both.
//!
//! ## Why
//!
//! A shard of a [`Timer`](crate::Timer) is used almost only by the thread
//! that schedules into it: it schedules, it cancels what it scheduled, and
//! the driver visits once per tick. A mutex costs that thread two atomic
//! read-modify-writes per call, and they serialise its calls: one call's
//! cache misses cannot overlap the next one's. This lock gives the owner a
//! path with no atomic read-modify-write and no fence the processor sees.
//!
//! ## The protocol
//!
//! Two flags and a mutex:
//!
//! - `busy`: the owner is in, or entering, its fast path. Only the owner
//!   writes it.
//! - `revoked`: the owner must take the mutex like everyone else. Written
//!   only under the mutex.
//! - `slow`: the mutex every path but the owner's fast one takes.
//!
//! The owner stores `busy`, passes a *light* barrier and reads `revoked`
//! (acquire). Clear: it holds the lock, and releases it by clearing `busy`
//! (release). Set: it clears `busy` and takes the mutex.
//!
//! Anyone else takes the mutex; if `revoked` is clear, it sets it, passes a
//! *heavy* barrier and waits until `busy` is clear (acquire). The barriers
//! make the two sides Dekker's: of "owner stores `busy`, reads `revoked`"
//! and "other stores `revoked`, reads `busy`", at least one read sees the
//! other's store. So either the owner sees `revoked` and backs off, or the
//! other sees `busy` and waits for the owner's release. Each release
//! (clearing `busy`, clearing `revoked`, unlocking the mutex) is read with
//! acquire by the next holder, so each holder sees the previous one's
//! writes.
//!
//! ## The barriers
//!
//! On Linux the heavy barrier is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`:
//! the kernel runs a full memory barrier on every core running a thread of
//! this process, which orders the owner's store before its read wherever
//! it is in its path. The light barrier is then only a compiler fence. A
//! heavy barrier costs a system call and an interrupt to the other cores
//! (microseconds); the thread that revokes a bias pays it, and the driver
//! pays one per pass for all the shards it visits ([`VisitBatch`]). Where
//! `membarrier` is missing (another system, an old kernel, a sandbox that
//! refuses it), both barriers are `fence(SeqCst)`: still correct, and
//! still one fence fewer than a mutex's two read-modify-writes. The choice
//! is made once per process, before the first biased lock exists.
//!
//! ## Losing and regaining the bias
//!
//! The owner is the first thread to lock through [`lock_home`](BiasedMutex::lock_home);
//! it stays the owner.
//!
//! - A *visit* ([`visit`](BiasedMutex::visit): shutdown) revokes the bias
//!   for its own length and gives it back.
//! - A batch of visits ([`VisitBatch`]: the driver's pass, the figures)
//!   gives it back only to an owner that locked at least [`REBIAS_AFTER`]
//!   times since the previous batch, since each mark costs the next
//!   batch's barrier.
//! - Any other thread ([`lock`](BiasedMutex::lock) on a thread that is not
//!   the owner) leaves it revoked: a thread that shares the shard would
//!   otherwise pay a heavy barrier per call.
//!
//! The owner gets the bias back after [`REBIAS_AFTER`] locks in a row
//! with no other thread's in between. So a heavy barrier is paid at most
//! once per [`REBIAS_AFTER`] of the owner's calls, plus one per single
//! visit.

#![allow(unsafe_code)]

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::{AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard};

/// How many locks in a row the owner takes through the mutex, with no
/// other thread's in between, before it takes its bias back.
#[cfg(not(purgatorio_loom))]
pub(crate) const REBIAS_AFTER: u32 = 1024;
/// Two in the loom models, so that they reach the rebias.
#[cfg(purgatorio_loom)]
pub(crate) const REBIAS_AFTER: u32 = 2;

/// A mutual-exclusion lock whose owner thread takes it without an atomic
/// read-modify-write (see the module docs).
pub(crate) struct BiasedMutex<T> {
    /// The words the owner's fast path reads and writes, alone in their
    /// cache line: a write to a neighbour by another thread would make
    /// every fast path wait for the line.
    words: Words,
    /// The lock of every path but the owner's fast one.
    slow: Mutex<Slow>,
    /// The value.
    value: cell::Cell<T>,
}

// SAFETY: the value is reached only through a guard, and the protocol in
// the module docs gives at most one guard at a time; the value moves
// between threads with the lock, so `T: Send` is what it needs.
unsafe impl<T: Send> Send for BiasedMutex<T> {}
// SAFETY: as for `Send`: `&BiasedMutex<T>` hands out `&mut T` to one thread
// at a time, never `&T` to two at once.
unsafe impl<T: Send> Sync for BiasedMutex<T> {}

/// The owner's words, on a line of their own (128 bytes: two lines on
/// processors that fetch lines in pairs).
#[repr(align(128))]
struct Words {
    /// Set by the owner while it is in, or entering, its fast path.
    busy: AtomicBool,
    /// [`BIASED`], [`REVOKED`], or the number of the [`VisitBatch`] that
    /// marked the lock; the owner takes its fast path only on
    /// [`BIASED`]. Written only under `slow`.
    revoked: AtomicU64,
    /// The owner's thread token; 0 until one claims it. Written once,
    /// under `slow`.
    owner: AtomicUsize,
    /// How many times the owner has locked, by either path; written by
    /// the owner only (a load and a store, no read-modify-write), read by
    /// a batch as a hint.
    locks: AtomicU64,
}

/// `revoked`: the owner has the bias.
const BIASED: u64 = 0;
/// `revoked`: the owner takes the mutex, and nobody is on the fast path.
const REVOKED: u64 = 1;

/// What the slow path's mutex guards.
struct Slow {
    /// The owner's locks through the mutex since another thread's last.
    streak: u32,
    /// The owner's `locks` when the last batch ended its visits here.
    locks_at_batch: u64,
}

/// Which path a guard came in by, and so how it leaves (when dropped).
enum Path<'a> {
    /// The owner's fast path: clear `busy`.
    Owner(&'a AtomicBool),
    /// Through the mutex: unlock it.
    Shared(#[allow(dead_code)] MutexGuard<'a, Slow>),
    /// Through the mutex, on a visit that revoked the bias: give it back,
    /// then unlock.
    Visit(&'a AtomicU64, MutexGuard<'a, Slow>),
}

impl Drop for Path<'_> {
    #[inline]
    fn drop(&mut self) {
        match self {
            Path::Owner(busy) => busy.store(false, Release),
            Path::Shared(_) => {}
            // The mutex, a field, is unlocked after this.
            Path::Visit(revoked, slow) => {
                slow.streak = 0;
                revoked.store(BIASED, Release);
            }
        }
    }
}

/// Exclusive access to a [`BiasedMutex`]'s value until dropped.
pub(crate) struct BiasedGuard<'a, T> {
    /// The access to the value (tracked under loom). First, so that it
    /// ends before `path` lets the next holder in.
    access: cell::Access<T>,
    /// How this guard came in; read by its drop only.
    #[allow(dead_code)]
    path: Path<'a>,
}

/// Visits to several locks that share one heavy barrier: [`mark`](Self::mark)
/// each, pass [`barrier`](Self::barrier) once, then
/// [`visit_in`](BiasedMutex::visit_in) each as often as needed and
/// [`end`](Self::end) each. The driver's pass visits every shard this way,
/// so it pays one heavy barrier per pass, not one per shard.
///
/// A mark stands in `revoked` between the steps, with the mutex free: the
/// owner sees it and takes the mutex; any other thread that finds it
/// cannot know whether the barrier has passed, and revokes as if the lock
/// were biased. Only this batch, after its barrier, knows its own mark
/// was made before a barrier.
#[derive(Debug)]
pub(crate) struct VisitBatch {
    /// This batch's number, never [`BIASED`] or [`REVOKED`], never reused.
    id: u64,
    /// Whether a lock was marked since the last barrier.
    marked: bool,
    /// Whether the barrier has passed since the last mark.
    passed: bool,
}

impl VisitBatch {
    /// A new batch.
    pub(crate) fn new() -> Self {
        // A plain counter: it orders nothing, it only names.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(REVOKED + 1);
        VisitBatch {
            id: NEXT.fetch_add(1, Relaxed),
            marked: false,
            passed: false,
        }
    }

    /// Marks `lock` for a visit of this batch if its owner has the bias
    /// and is not the calling thread.
    pub(crate) fn mark<T>(&mut self, lock: &BiasedMutex<T>) {
        if lock.is_owner() {
            return;
        }
        let _slow = lock.slow.lock();
        if lock.words.revoked.load(Relaxed) == BIASED {
            lock.words.revoked.store(self.id, Relaxed);
            self.marked = true;
            self.passed = false;
        }
    }

    /// The heavy barrier, once for every lock marked since the last one.
    pub(crate) fn barrier(&mut self) {
        if self.marked {
            barrier::heavy();
            self.marked = false;
            self.passed = true;
        }
    }

    /// Ends this batch's visits to `lock`. If this batch's mark still
    /// stands, gives the owner its bias back, but only if it locked at
    /// least [`REBIAS_AFTER`] times since the last batch ended here: each
    /// mark of a biased lock costs the next batch's heavy barrier (an
    /// interrupt on every core running the process), worth it only for an
    /// owner busy enough to save more than that. An owner that is not
    /// takes the mutex, and its bias back after [`REBIAS_AFTER`] locks in
    /// a row, as after any revocation.
    pub(crate) fn end<T>(&self, lock: &BiasedMutex<T>) {
        if lock.is_owner() {
            return;
        }
        let mut slow = lock.slow.lock();
        if lock.words.revoked.load(Relaxed) == self.id {
            // Whatever comes next assumes nobody is on the fast path: make
            // sure, even for a lock this batch marked and never visited.
            if !self.passed {
                barrier::heavy();
            }
            lock.wait_for_owner();
            let locks = lock.words.locks.load(Relaxed);
            let busy = locks.wrapping_sub(slow.locks_at_batch) >= u64::from(REBIAS_AFTER);
            slow.locks_at_batch = locks;
            if busy {
                slow.streak = 0;
            }
            // Release: the owner's fast path reads it with acquire.
            lock.words
                .revoked
                .store(if busy { BIASED } else { REVOKED }, Release);
        }
    }
}

impl<T> BiasedMutex<T> {
    /// An unowned lock around `value`.
    pub(crate) fn new(value: T) -> Self {
        barrier::choose();
        BiasedMutex {
            words: Words {
                busy: AtomicBool::new(false),
                // Until an owner claims it, every path takes the mutex.
                revoked: AtomicU64::new(REVOKED),
                owner: AtomicUsize::new(0),
                locks: AtomicU64::new(0),
            },
            slow: Mutex::new(Slow {
                streak: 0,
                locks_at_batch: 0,
            }),
            value: cell::Cell::new(value),
        }
    }

    /// Whether the calling thread owns the lock.
    #[inline]
    fn is_owner(&self) -> bool {
        self.words.owner.load(Relaxed) == token()
    }

    /// Locks from the calling thread's home: claims the lock for this
    /// thread if nobody owns it yet, then locks as [`lock`](Self::lock).
    #[inline]
    pub(crate) fn lock_home(&self) -> BiasedGuard<'_, T> {
        if self.words.owner.load(Relaxed) == 0 {
            self.claim();
        }
        self.lock()
    }

    /// Locks: the owner by its fast path while it has the bias; any other
    /// thread through the mutex, revoking the bias until the owner takes it
    /// back (see the module docs). Not re-entrant: a thread holding the
    /// guard must not lock again.
    #[inline]
    pub(crate) fn lock(&self) -> BiasedGuard<'_, T> {
        if !self.is_owner() {
            return self.lock_shared();
        }
        // A second guard would alias the first; a mutex would deadlock.
        assert!(
            !self.words.busy.load(Relaxed),
            "a shard's owner locked it while holding it"
        );
        let locks = &self.words.locks;
        locks.store(locks.load(Relaxed).wrapping_add(1), Relaxed);
        self.words.busy.store(true, Relaxed);
        barrier::light();
        if self.words.revoked.load(Acquire) == BIASED {
            return self.guard(Path::Owner(&self.words.busy));
        }
        self.words.busy.store(false, Release);
        self.lock_owner_slow()
    }

    /// Locks for a short visit (shutdown) that gives the bias back when it
    /// leaves if it found it, or found a batch's mark (which the batch then
    /// finds gone, and revokes for itself). On the owner's thread, the
    /// owner's lock.
    pub(crate) fn visit(&self) -> BiasedGuard<'_, T> {
        if self.is_owner() {
            return self.lock();
        }
        let slow = self.slow.lock();
        match self.words.revoked.load(Relaxed) {
            REVOKED => self.guard(Path::Shared(slow)),
            // Biased, or marked by a batch whose barrier may not have
            // passed: revoke here, and give the bias back after.
            _ => {
                self.revoke();
                self.guard(Path::Visit(&self.words.revoked, slow))
            }
        }
    }

    /// Locks for one of `batch`'s visits (see [`VisitBatch`]); the bias
    /// stays revoked (by this batch's mark, or by another thread) until
    /// [`VisitBatch::end`].
    pub(crate) fn visit_in(&self, batch: &VisitBatch) -> BiasedGuard<'_, T> {
        if self.is_owner() {
            return self.lock();
        }
        let slow = self.slow.lock();
        match self.words.revoked.load(Relaxed) {
            REVOKED => {}
            // Marked before the batch's barrier: the owner either saw the
            // mark or is seen in `busy`.
            revoked if revoked == batch.id && batch.passed => self.wait_for_owner(),
            // Biased (the owner took it back since the mark, or was not
            // biased then), or another batch's mark: this batch's mark now,
            // and a barrier of its own after it.
            _ => {
                self.words.revoked.store(batch.id, Relaxed);
                barrier::heavy();
                self.wait_for_owner();
            }
        }
        self.guard(Path::Shared(slow))
    }

    /// Makes the calling thread the owner if nobody is yet, and gives it
    /// the bias.
    #[cold]
    fn claim(&self) {
        let _slow = self.slow.lock();
        if self.words.owner.load(Relaxed) == 0 {
            self.words.owner.store(token(), Relaxed);
            // Release: the owner's fast path reads it with acquire; the
            // value's last writer held the mutex this thread holds.
            self.words.revoked.store(BIASED, Release);
        }
    }

    /// The owner's path while the bias is revoked: the mutex, and the
    /// bias back after [`REBIAS_AFTER`] of these in a row.
    #[cold]
    fn lock_owner_slow(&self) -> BiasedGuard<'_, T> {
        let mut slow = self.slow.lock();
        slow.streak += 1;
        if slow.streak >= REBIAS_AFTER && self.words.revoked.load(Relaxed) != BIASED {
            slow.streak = 0;
            // Nobody else holds the lock (this thread holds the mutex), and
            // whoever takes the mutex next sees the bias and revokes it (a
            // batch whose mark this overwrites revokes it itself).
            self.words.revoked.store(BIASED, Release);
        }
        self.guard(Path::Shared(slow))
    }

    /// A thread other than the owner: the mutex, and the bias revoked.
    #[cold]
    fn lock_shared(&self) -> BiasedGuard<'_, T> {
        let mut slow = self.slow.lock();
        slow.streak = 0;
        if self.words.revoked.load(Relaxed) != REVOKED {
            // Biased, or a batch's mark whose barrier may not have passed.
            self.revoke();
        }
        self.guard(Path::Shared(slow))
    }

    /// Revokes the bias and waits until the owner is out of its fast path.
    /// The caller holds the mutex.
    fn revoke(&self) {
        self.words.revoked.store(REVOKED, Relaxed);
        barrier::heavy();
        self.wait_for_owner();
    }

    /// Waits until the owner is out of its fast path; after a heavy barrier
    /// that followed a store to `revoked`.
    fn wait_for_owner(&self) {
        let mut spins = 0u32;
        // Acquire: the owner's last fast-path release.
        while self.words.busy.load(Acquire) {
            backoff(&mut spins);
        }
    }

    /// A guard that came in by `path`.
    #[inline]
    fn guard<'a>(&'a self, path: Path<'a>) -> BiasedGuard<'a, T> {
        BiasedGuard {
            access: self.value.access(),
            path,
        }
    }
}

impl<T> Deref for BiasedGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (module docs), and the access
        // lives no longer than it.
        unsafe { self.access.get() }
    }
}

impl<T> DerefMut for BiasedGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this borrow unique.
        unsafe { self.access.get_mut() }
    }
}

impl<T> std::fmt::Debug for BiasedMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BiasedMutex")
            .field("owned", &(self.words.owner.load(Relaxed) != 0))
            .field("revoked", &self.words.revoked.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// Waits a little longer each time while the owner finishes its path: a
/// few spins, then the processor to another thread (the owner may have
/// been preempted inside).
fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    #[cfg(not(purgatorio_loom))]
    if *spins < 64 {
        std::hint::spin_loop();
    } else if *spins < 192 {
        std::thread::yield_now();
    } else {
        // An owner preempted, or of a lower real-time priority that a
        // yield would not run: let it have the processor.
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    #[cfg(purgatorio_loom)]
    loom::thread::yield_now();
}

/// The calling thread's token: unique among the process's threads, never 0.
#[inline]
fn token() -> usize {
    #[cfg(not(purgatorio_loom))]
    std::thread_local! {
        static TOKEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    #[cfg(purgatorio_loom)]
    loom::thread_local! {
        static TOKEN: std::cell::Cell<usize> = std::cell::Cell::new(0);
    }
    TOKEN.with(|token| {
        let mut value = token.get();
        if value == 0 {
            value = next_token();
            token.set(value);
        }
        value
    })
}

/// A token never handed out before.
#[cold]
fn next_token() -> usize {
    // A plain counter, not a synchronising atomic: it orders nothing.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    NEXT.fetch_add(1, Relaxed)
}

/// The light and heavy barriers (module docs).
mod barrier {
    #[cfg(not(purgatorio_loom))]
    use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering::Relaxed, Ordering::SeqCst};

    /// Not chosen yet.
    #[cfg(not(purgatorio_loom))]
    const UNKNOWN: u8 = 0;
    /// `membarrier` is registered: light is a compiler fence.
    #[cfg(not(purgatorio_loom))]
    const MEMBARRIER: u8 = 1;
    /// Both are `fence(SeqCst)`.
    #[cfg(not(purgatorio_loom))]
    const FENCES: u8 = 2;

    /// Which barriers this process uses; set once, by [`choose`], before the
    /// first biased lock exists (so every thread that reaches a lock sees
    /// it through the lock's own publication).
    #[cfg(not(purgatorio_loom))]
    static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

    /// Chooses the barriers, once per process.
    pub(super) fn choose() {
        #[cfg(not(purgatorio_loom))]
        {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                let mode = if membarrier::register() {
                    MEMBARRIER
                } else {
                    FENCES
                };
                MODE.store(mode, Relaxed);
            });
        }
    }

    /// The owner's side.
    #[inline]
    pub(super) fn light() {
        #[cfg(not(purgatorio_loom))]
        if MODE.load(Relaxed) == MEMBARRIER {
            compiler_fence(SeqCst);
        } else {
            fence(SeqCst);
        }
        // loom has no asymmetric barrier; a pair of SeqCst fences is what
        // the asymmetric pair guarantees, and loom models that.
        #[cfg(purgatorio_loom)]
        loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Everyone else's side.
    pub(super) fn heavy() {
        #[cfg(not(purgatorio_loom))]
        if MODE.load(Relaxed) == MEMBARRIER {
            membarrier::expedited();
        } else {
            fence(SeqCst);
        }
        #[cfg(purgatorio_loom)]
        loom::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Linux's `membarrier(2)`.
    #[cfg(all(not(purgatorio_loom), any(target_os = "linux", target_os = "android")))]
    mod membarrier {
        /// `MEMBARRIER_CMD_QUERY`: which commands the kernel has.
        const QUERY: libc::c_int = 0;
        /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`: a barrier on every core
        /// running one of this process's threads.
        const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`: this process's
        /// intent to use it (required before it).
        const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        /// `membarrier(cmd, 0, 0)`.
        fn call(cmd: libc::c_int) -> libc::c_long {
            // SAFETY: membarrier takes integers only and touches no memory
            // of ours.
            unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    cmd,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                )
            }
        }

        /// Registers the process for expedited barriers; whether it can use
        /// them.
        pub(super) fn register() -> bool {
            let commands = call(QUERY);
            commands >= 0
                && commands & libc::c_long::from(PRIVATE_EXPEDITED) != 0
                && call(REGISTER_PRIVATE_EXPEDITED) == 0
        }

        /// One expedited barrier.
        pub(super) fn expedited() {
            // Registered (see `register`), so the documented failures
            // (EINVAL, ENOSYS, EPERM) cannot happen unless something (a
            // seccomp filter installed later) took the call away. Without
            // the barrier an owner may be inside while the caller goes on,
            // and unwinding would leave the lock marked revoked with the
            // owner unchecked: stop the process rather than race.
            if call(PRIVATE_EXPEDITED) != 0 {
                use std::io::Write;
                let error = std::io::Error::last_os_error();
                // Not `eprintln!`: it panics if stderr is gone, and an
                // unwind from here is the race the abort prevents.
                let _ = writeln!(
                    std::io::stderr(),
                    "purgatorio: membarrier(PRIVATE_EXPEDITED) failed after registering ({error}); \
                     a shard lock cannot be taken safely, aborting"
                );
                std::process::abort();
            }
        }
    }

    /// No `membarrier` here: the fences are used.
    #[cfg(all(
        not(purgatorio_loom),
        not(any(target_os = "linux", target_os = "android"))
    ))]
    mod membarrier {
        pub(super) fn register() -> bool {
            false
        }
        pub(super) fn expedited() {
            unreachable!("membarrier is never chosen without it")
        }
    }
}

/// The value's cell: the standard one, or loom's, which checks that no two
/// guards reach it at once.
mod cell {
    /// A cell around the value.
    #[cfg(not(purgatorio_loom))]
    pub(super) struct Cell<T>(std::cell::UnsafeCell<T>);
    /// One guard's access to it.
    #[cfg(not(purgatorio_loom))]
    pub(super) struct Access<T>(*mut T);

    #[cfg(not(purgatorio_loom))]
    impl<T> Cell<T> {
        pub(super) fn new(value: T) -> Self {
            Cell(std::cell::UnsafeCell::new(value))
        }
        #[inline]
        pub(super) fn access(&self) -> Access<T> {
            Access(self.0.get())
        }
    }

    #[cfg(not(purgatorio_loom))]
    impl<T> Access<T> {
        /// # Safety
        /// No other access to the value is in use.
        #[inline]
        pub(super) unsafe fn get(&self) -> &T {
            // SAFETY: the caller's.
            unsafe { &*self.0 }
        }
        /// # Safety
        /// No other access to the value is in use.
        #[inline]
        pub(super) unsafe fn get_mut(&mut self) -> &mut T {
            // SAFETY: the caller's.
            unsafe { &mut *self.0 }
        }
    }

    #[cfg(purgatorio_loom)]
    pub(super) struct Cell<T>(loom::cell::UnsafeCell<T>);
    #[cfg(purgatorio_loom)]
    pub(super) struct Access<T>(loom::cell::MutPtr<T>);

    #[cfg(purgatorio_loom)]
    impl<T> Cell<T> {
        pub(super) fn new(value: T) -> Self {
            Cell(loom::cell::UnsafeCell::new(value))
        }
        pub(super) fn access(&self) -> Access<T> {
            Access(self.0.get_mut())
        }
    }

    #[cfg(purgatorio_loom)]
    impl<T> Access<T> {
        /// # Safety
        /// No other access to the value is in use (loom checks it).
        pub(super) unsafe fn get(&self) -> &T {
            // SAFETY: the caller's.
            unsafe { self.0.deref() }
        }
        /// # Safety
        /// No other access to the value is in use (loom checks it).
        pub(super) unsafe fn get_mut(&mut self) -> &mut T {
            // SAFETY: the caller's.
            unsafe { self.0.deref() }
        }
    }
}

#[cfg(all(test, not(purgatorio_loom)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::thread;

    use super::{BiasedMutex, REBIAS_AFTER};

    impl<T> BiasedMutex<T> {
        /// Whether the owner has the bias now.
        fn biased(&self) -> bool {
            self.words.revoked.load(SeqCst) == super::BIASED
        }
    }

    /// Every holder counts itself in and out of `inside`; two at once is
    /// a broken lock.
    fn hold(lock: &BiasedMutex<u64>, guard: &mut u64, inside: &AtomicUsize) {
        assert_eq!(
            inside.fetch_add(1, SeqCst),
            0,
            "two holders at once ({lock:?})"
        );
        let read = *guard;
        std::hint::black_box(read);
        *guard = read + 1;
        assert_eq!(inside.fetch_sub(1, SeqCst), 1);
    }

    #[test]
    fn the_owner_visits_and_a_sharing_thread_never_hold_it_together() {
        let lock = Arc::new(BiasedMutex::new(0u64));
        let inside = Arc::new(AtomicUsize::new(0));
        const OWNER: u64 = 200_000;
        const OTHERS: u64 = 2_000;
        let claimed = Arc::new(std::sync::Barrier::new(2));
        let owner = {
            let (lock, inside) = (Arc::clone(&lock), Arc::clone(&inside));
            let claimed = Arc::clone(&claimed);
            thread::spawn(move || {
                hold(&lock, &mut lock.lock_home(), &inside);
                claimed.wait();
                for _ in 1..OWNER {
                    hold(&lock, &mut lock.lock_home(), &inside);
                }
            })
        };
        claimed.wait();
        let visitor = {
            let (lock, inside) = (Arc::clone(&lock), Arc::clone(&inside));
            thread::spawn(move || {
                for _ in 0..OTHERS {
                    hold(&lock, &mut lock.visit(), &inside);
                }
            })
        };
        let sharer = {
            let (lock, inside) = (Arc::clone(&lock), Arc::clone(&inside));
            thread::spawn(move || {
                for _ in 0..OTHERS {
                    hold(&lock, &mut lock.lock(), &inside);
                }
            })
        };
        for thread in [owner, visitor, sharer] {
            thread.join().unwrap();
        }
        assert_eq!(*lock.visit(), OWNER + 2 * OTHERS);
    }

    #[test]
    fn a_visit_keeps_the_bias_a_sharing_thread_takes_it_and_the_owner_takes_it_back() {
        let lock = Arc::new(BiasedMutex::new(0u64));
        assert!(!lock.biased(), "nobody owns it yet");
        *lock.lock_home() += 1;
        assert!(lock.biased(), "claimed by its first home lock");

        let visiting = Arc::clone(&lock);
        thread::spawn(move || *visiting.visit() += 1)
            .join()
            .unwrap();
        assert!(lock.biased(), "a visit gives the bias back");

        let sharing = Arc::clone(&lock);
        thread::spawn(move || *sharing.lock_home() += 1)
            .join()
            .unwrap();
        assert!(!lock.biased(), "another thread's lock revokes it");

        for _ in 1..REBIAS_AFTER {
            *lock.lock() += 1;
            assert!(!lock.biased());
        }
        *lock.lock() += 1;
        assert!(lock.biased(), "back after {REBIAS_AFTER} locks in a row");
        assert_eq!(*lock.lock(), 3 + u64::from(REBIAS_AFTER));
    }

    #[test]
    fn another_threads_lock_resets_the_owners_streak() {
        let lock = Arc::new(BiasedMutex::new(()));
        drop(lock.lock_home());
        let share = |lock: &Arc<BiasedMutex<()>>| {
            let lock = Arc::clone(lock);
            thread::spawn(move || drop(lock.lock())).join().unwrap();
        };
        share(&lock);
        for _ in 0..REBIAS_AFTER - 1 {
            drop(lock.lock());
        }
        share(&lock);
        drop(lock.lock());
        assert!(!lock.biased(), "the streak started again");
    }
}
