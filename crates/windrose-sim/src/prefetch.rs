//! A hint to the processor to start loading a line it will read soon.
//!
//! Past N = 4,096 nodes nearly every per-connection or per-node read of an event misses the
//! cache (issue 20): the simulator's state is hundreds of megabytes read at random. Those
//! misses mostly come one after the other, each read waiting for the previous one. Where a
//! loop knows which entries it reads next (the connections of a solve's region, the next
//! event's node), asking for them a few iterations ahead lets the misses overlap. A prefetch
//! never faults, changes no value and no order, so results stay the same to the bit.

/// Asks for the cache line of `items[i]` (nothing if `i` is out of range, or off x86-64).
#[inline(always)]
pub(crate) fn prefetch<T>(items: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(item) = items.get(i) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that reads nothing architecturally and cannot fault; the
        // address comes from a live reference, and SSE is part of the x86-64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (items, i);
}
