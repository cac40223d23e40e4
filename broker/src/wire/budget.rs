//! The request-bytes budget (Kafka's `queued.max.request.bytes`): every
//! byte read from any connection is charged to it until its request is
//! answered.
//!
//! The budget is two pools, so that large frames that stop arriving cannot
//! starve small requests (a Metadata, a heartbeat):
//!
//! | pool | size | who charges it |
//! |---|---|---|
//! | bulk | 7/8 of the budget | every frame |
//! | reserve | 1/8 of the budget ([`RESERVE_DIVISOR`]) | only bytes of frames no larger than the reserve, once the bulk pool is spent |
//!
//! Large frames in progress may thus hold at most the bulk pool between
//! them; whatever they do, small requests still find the reserve. Each
//! pool is a tokio [`Semaphore`] (fair: first come, first charged), and a
//! [`Charge`] holds permits of both.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The reserve is this fraction (1/n) of the budget.
pub const RESERVE_DIVISOR: usize = 8;

/// The request-bytes budget shared by every connection.
#[derive(Clone, Debug)]
pub struct Budget {
    /// What every frame charges.
    bulk: Arc<Semaphore>,
    /// What only small frames charge, once `bulk` is spent.
    reserve: Arc<Semaphore>,
    /// The reserve's size, bytes: the largest frame that may charge it.
    reserve_bytes: usize,
}

/// Bytes charged to the [`Budget`], given back when dropped.
#[derive(Debug, Default)]
pub struct Charge {
    /// Permits of the bulk pool.
    bulk: Option<OwnedSemaphorePermit>,
    /// Permits of the reserve.
    reserve: Option<OwnedSemaphorePermit>,
}

impl Budget {
    /// A budget of `bytes` (at most [`Semaphore::MAX_PERMITS`]), one
    /// [`RESERVE_DIVISOR`]th of it kept for small frames.
    pub fn new(bytes: usize) -> Budget {
        let bytes = bytes.min(Semaphore::MAX_PERMITS);
        let reserve_bytes = bytes / RESERVE_DIVISOR;
        Budget {
            bulk: Arc::new(Semaphore::new(bytes - reserve_bytes)),
            reserve: Arc::new(Semaphore::new(reserve_bytes)),
            reserve_bytes,
        }
    }

    /// Bytes of the budget not charged now (both pools).
    pub fn available(&self) -> usize {
        self.bulk.available_permits() + self.reserve.available_permits()
    }

    /// Whether a frame of `length` bytes may charge the reserve.
    pub fn is_small(&self, length: usize) -> bool {
        length <= self.reserve_bytes
    }

    /// Charges `n` bytes (at most `u32::MAX`) of a frame, waiting while the
    /// pools it may charge are spent: the bulk pool, and for a `small`
    /// frame the reserve too. Cancel-safe: dropped while waiting, it
    /// charges nothing.
    pub async fn charge(&self, n: u32, small: bool) -> Charge {
        let bulk = Arc::clone(&self.bulk);
        if !small {
            return Charge::bulk(bulk.acquire_many_owned(n).await);
        }
        if let Ok(permit) = Arc::clone(&bulk).try_acquire_many_owned(n) {
            return Charge::bulk(Ok(permit));
        }
        let reserve = Arc::clone(&self.reserve);
        tokio::select! {
            biased;
            permit = reserve.acquire_many_owned(n) => Charge::reserve(permit),
            permit = bulk.acquire_many_owned(n) => Charge::bulk(permit),
        }
    }
}

impl Charge {
    /// A charge of bulk permits (none if the pool was closed, which it
    /// never is).
    fn bulk(permit: Result<OwnedSemaphorePermit, tokio::sync::AcquireError>) -> Charge {
        Charge {
            bulk: permit.ok(),
            reserve: None,
        }
    }

    /// A charge of reserve permits.
    fn reserve(permit: Result<OwnedSemaphorePermit, tokio::sync::AcquireError>) -> Charge {
        Charge {
            bulk: None,
            reserve: permit.ok(),
        }
    }

    /// Bytes charged.
    pub fn bytes(&self) -> usize {
        self.bulk.as_ref().map_or(0, |p| p.num_permits())
            + self.reserve.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Adds `other` to this charge.
    pub fn merge(&mut self, other: Charge) {
        fn join(mine: &mut Option<OwnedSemaphorePermit>, theirs: Option<OwnedSemaphorePermit>) {
            match (mine.as_mut(), theirs) {
                (Some(mine), Some(theirs)) => mine.merge(theirs),
                (None, theirs) => *mine = theirs,
                (_, None) => {}
            }
        }
        join(&mut self.bulk, other.bulk);
        join(&mut self.reserve, other.reserve);
    }

    /// Splits `n` bytes off (the reserve's first, so that it is given back
    /// first), or all of it if it holds no more.
    pub fn split(&mut self, n: usize) -> Charge {
        if n >= self.bytes() {
            return std::mem::take(self);
        }
        let from_reserve = self.reserve.as_ref().map_or(0, |p| p.num_permits()).min(n);
        let reserve = take_part(&mut self.reserve, from_reserve);
        let bulk = take_part(&mut self.bulk, n - from_reserve);
        Charge { bulk, reserve }
    }
}

/// `n` permits taken off `permit` (all of it if it holds no more).
fn take_part(permit: &mut Option<OwnedSemaphorePermit>, n: usize) -> Option<OwnedSemaphorePermit> {
    if n == 0 {
        return None;
    }
    match permit.as_mut() {
        Some(p) if p.num_permits() > n => p.split(n),
        _ => permit.take(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_frames_leave_the_reserve_to_small_ones() {
        let budget = Budget::new(800);
        assert!(budget.is_small(100) && !budget.is_small(101));
        let large = budget.charge(700, false).await;
        assert_eq!(budget.available(), 100);
        // The bulk pool is spent: a large frame waits, a small one does not.
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(1), budget.charge(1, false));
        assert!(waiting.await.is_err(), "a large frame charged the reserve");
        let mut small = budget.charge(60, true).await;
        assert_eq!((small.bytes(), budget.available()), (60, 40));
        small.merge(budget.charge(40, true).await);
        let part = small.split(30);
        assert_eq!((part.bytes(), small.bytes()), (30, 70));
        drop((large, part, small));
        assert_eq!(budget.available(), 800);
    }
}
