//! Once built, a forecaster allocates nothing per sample: not on steady samples, spikes,
//! unconfirmed excursions, resets, nor with a windowed error. Its own test binary, so the
//! counting allocator sees no other test's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use windrose_model::forecast::{ChangeRule, Excursion, ForecastConfig, Forecaster};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Levels that step every 150 samples, with a spike every 37th sample and some jitter.
fn sample(i: usize) -> f64 {
    let level = [20.0, 80.0, 35.0, 120.0][(i / 150) % 4];
    let jitter = ((i * 7919) % 13) as f64 * 0.01;
    if i % 37 == 36 {
        level * 1.5
    } else {
        level + jitter
    }
}

#[test]
fn observing_allocates_nothing() {
    let configs = [
        ForecastConfig::default(),
        ForecastConfig {
            error_window: Some(40),
            change: Some(ChangeRule {
                consecutive: 3,
                excursion: Excursion::Follow,
                ..ChangeRule::default()
            }),
            ..ForecastConfig::default()
        },
        ForecastConfig {
            change: None,
            ..ForecastConfig::default()
        },
    ];
    for config in configs {
        let mut f = Forecaster::new(config).unwrap();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let mut sum = 0.0;
        for i in 0..2000 {
            f.observe(sample(i)).unwrap();
            sum += f.forecast().unwrap().value;
        }
        let after = ALLOCATIONS.load(Ordering::Relaxed);
        assert!(sum > 0.0);
        if f.config().change.is_some() {
            assert!(f.resets() >= 10, "the steps reset it: {}", f.resets());
        }
        assert_eq!(after - before, 0, "allocations in 2000 samples");
    }
}
