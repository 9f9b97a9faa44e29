//! A log-linear histogram of nanosecond durations, in shared memory: each
//! power of two is split into 32 buckets (about 3% resolution), up to 2^40 ns
//! (18 minutes). A worker records into its own histogram without locks or
//! allocation (it may be a forked child); the parent merges them afterwards.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::Zeroable;

const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
const MAX_EXP: u32 = 40;
pub const BUCKETS: usize = (MAX_EXP as usize - SUB_BITS as usize + 2) * SUB;

fn index(ns: u64) -> usize {
    if ns < 2 * SUB as u64 {
        return ns as usize;
    }
    let exp = (63 - ns.leading_zeros()).min(MAX_EXP);
    let shift = exp - SUB_BITS;
    let sub = ((ns >> shift) as usize).min(2 * SUB - 1) - SUB;
    ((exp - SUB_BITS + 1) as usize * SUB + sub).min(BUCKETS - 1)
}

/// The middle of a bucket, in nanoseconds.
fn value(index: usize) -> u64 {
    if index < 2 * SUB {
        return index as u64;
    }
    let exp = (index / SUB) as u32 + SUB_BITS - 1;
    let shift = exp - SUB_BITS;
    let low = ((SUB + index % SUB) as u64) << shift;
    low + (1u64 << shift) / 2
}

/// Counts per bucket, written by one worker.
#[repr(C)]
pub struct SharedHist([AtomicU64; BUCKETS]);

// SAFETY: atomics only.
unsafe impl Zeroable for SharedHist {}

impl SharedHist {
    pub fn record(&self, ns: u64) {
        self.0[index(ns)].fetch_add(1, Ordering::Relaxed);
    }
}

/// A merged histogram.
#[derive(Clone, Debug)]
pub struct Hist {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Hist {
    fn default() -> Hist {
        Hist { counts: vec![0; BUCKETS], total: 0 }
    }
}

impl Hist {
    pub fn add(&mut self, shared: &SharedHist) {
        for (count, cell) in self.counts.iter_mut().zip(shared.0.iter()) {
            let n = cell.load(Ordering::Relaxed);
            *count += n;
            self.total += n;
        }
    }

    pub fn merge(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    pub fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.total += 1;
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile in nanoseconds (the bucket's middle); `None` if empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(value(i));
            }
        }
        None
    }

    /// The cumulative distribution: (nanoseconds, fraction at or below), one
    /// point per non-empty bucket.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let mut seen = 0;
        let mut out = Vec::new();
        for (i, &count) in self.counts.iter().enumerate() {
            if count > 0 {
                seen += count;
                out.push((value(i), seen as f64 / self.total as f64));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, 123_456_789, 1 << 39]) {
            let i = index(ns);
            assert!(i >= last, "index goes back at {ns}");
            last = i;
            let v = value(i) as f64;
            assert!((v - ns as f64).abs() <= ns as f64 * 0.04 + 1.0, "{ns} -> bucket {i} = {v}");
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_known_set() {
        let mut h = Hist::default();
        for ns in 1..=1000u64 {
            h.record(ns * 1000);
        }
        let p50 = h.quantile(0.5).unwrap() as f64;
        assert!((p50 - 500_000.0).abs() < 20_000.0, "{p50}");
        let p99 = h.quantile(0.99).unwrap() as f64;
        assert!((p99 - 990_000.0).abs() < 40_000.0, "{p99}");
        assert_eq!(h.cdf().last().unwrap().1, 1.0);
        assert_eq!(Hist::default().quantile(0.5), None);
    }
}
