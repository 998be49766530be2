//! A counting global allocator for the benchmarks: wraps the system
//! allocator and counts, process-wide, every allocation (a `realloc` counts
//! as one, for its new size) and the bytes asked for. A bench reads the
//! counters around the code it measures; anything other threads allocate
//! meanwhile (runtime workers, background tasks) is counted too, which is
//! what a whole call costs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct CountingAlloc;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` unchanged; the counters are
// plain atomics that never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count(size: usize) {
    ALLOCS.fetch_add(1, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
}

/// Allocations and bytes allocated so far (or between two readings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allocated {
    pub allocs: u64,
    pub bytes: u64,
}

impl Allocated {
    /// The counters now.
    pub fn now() -> Allocated {
        Allocated {
            allocs: ALLOCS.load(Relaxed),
            bytes: BYTES.load(Relaxed),
        }
    }

    /// What was allocated since `earlier`.
    pub fn since(earlier: Allocated) -> Allocated {
        let now = Allocated::now();
        Allocated {
            allocs: now.allocs - earlier.allocs,
            bytes: now.bytes - earlier.bytes,
        }
    }

    pub fn add(&mut self, other: Allocated) {
        self.allocs += other.allocs;
        self.bytes += other.bytes;
    }

    /// Per-op averages over `ops` operations: (allocations, bytes).
    pub fn per_op(&self, ops: u64) -> (f64, f64) {
        let ops = ops.max(1) as f64;
        (self.allocs as f64 / ops, self.bytes as f64 / ops)
    }
}
