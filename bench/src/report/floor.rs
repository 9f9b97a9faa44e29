//! The floor beside the strategies: the least a fair lock whose waiters
//! sleep can cost on this machine, measured by the same workers, cells and
//! oracle as every strategy.
//!
//! A ticket lock in the cell's shared memory, each waiter asleep on a futex
//! word of its own: a release moves `serving` on and wakes the next
//! ticket's waiter alone. That is the hand-off this library's turnstile and
//! `shm` make (one futex wake-up of the next in line), without a file, a
//! record, an owner, an expiry or a check of anything: what is left is the
//! kernel's wake-up and the scheduler, which no lock that sleeps avoids.
//! It never spins, as none of the strategies does.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::SeqCst;

use crate::pool::MAX_WORKERS;
use crate::sys::{self, Zeroable};

/// Its name in the report, beside the schemes'.
pub const NAME: &str = "floor";

/// Where the floor's locks live, in the report's `place` column.
pub const PLACE: &str = "memory";

#[repr(C)]
struct Slot {
    /// Moved on when this slot's ticket is served: the futex word.
    turn: AtomicU32,
    /// Waiters asleep on `turn` (or about to be): a release that finds none
    /// makes no system call.
    sleepers: AtomicU32,
}

/// One lock; zeroed, it is free, with ticket 0 next to be served.
#[repr(C)]
pub struct FifoFloor {
    next: AtomicU32,
    serving: AtomicU32,
    /// Ticket `t` waits in slot `t % MAX_WORKERS`: no more tickets are out
    /// at once than a cell has workers, so no two waiters share a slot.
    slots: [Slot; MAX_WORKERS],
}

// SAFETY: atomics only.
unsafe impl Zeroable for Slot {}
// SAFETY: atomics and an array of zero-valid slots only.
unsafe impl Zeroable for FifoFloor {}

impl FifoFloor {
    /// Waits for this caller's turn; returns its fence (its ticket, counted
    /// from 1).
    pub fn acquire(&self) -> u64 {
        let ticket = self.next.fetch_add(1, SeqCst);
        let slot = &self.slots[ticket as usize % MAX_WORKERS];
        loop {
            // Read before `serving`: a release that comes after this read
            // moves `turn` on, and the futex then does not sleep.
            let turn = slot.turn.load(SeqCst);
            if self.serving.load(SeqCst) == ticket {
                return u64::from(ticket) + 1;
            }
            // Counted before `serving` is looked at again: a release that
            // serves this ticket after that look sees the sleeper and wakes it.
            slot.sleepers.fetch_add(1, SeqCst);
            if self.serving.load(SeqCst) != ticket {
                sys::futex_wait(&slot.turn, turn, None);
            }
            slot.sleepers.fetch_sub(1, SeqCst);
        }
    }

    /// Serves the next ticket and wakes its waiter, if one sleeps.
    pub fn release(&self) {
        let next = self.serving.load(SeqCst).wrapping_add(1);
        self.serving.store(next, SeqCst);
        let slot = &self.slots[next as usize % MAX_WORKERS];
        slot.turn.fetch_add(1, SeqCst);
        if slot.sleepers.load(SeqCst) != 0 {
            sys::futex_wake(&slot.turn, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::SharedMap;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn tickets_are_served_in_order_and_one_at_a_time() {
        let floor = SharedMap::<FifoFloor>::new();
        let inside = AtomicU32::new(0);
        let overlaps = AtomicU32::new(0);
        let last_fence = AtomicU64::new(0);
        let regressions = AtomicU32::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..2_000 {
                        let fence = floor.acquire();
                        if inside.fetch_add(1, SeqCst) != 0 {
                            overlaps.fetch_add(1, SeqCst);
                        }
                        if last_fence.fetch_max(fence, SeqCst) >= fence {
                            regressions.fetch_add(1, SeqCst);
                        }
                        inside.fetch_sub(1, SeqCst);
                        floor.release();
                    }
                });
            }
        });
        assert_eq!((overlaps.load(SeqCst), regressions.load(SeqCst)), (0, 0));
        assert_eq!(last_fence.load(SeqCst), 16_000, "every ticket was served once");
    }
}
