//! Once built, a forecaster allocates nothing per sample: not on steady samples, spikes,
//! unconfirmed excursions, resets, nor with a windowed error. The counting allocator counts
//! only the allocations of the thread under test: the test harness's own thread allocates
//! at times of its choosing (seen once in CI: 4 allocations that were not the forecaster's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use windrose_model::forecast::{ChangeRule, Excursion, ForecastConfig, Forecaster};

struct Counting;

thread_local! {
    // Const-initialised and without Drop: reading them never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: a thread being torn down may still allocate after its locals are gone.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
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
        let before = allocations();
        let mut sum = 0.0;
        for i in 0..2000 {
            f.observe(sample(i)).unwrap();
            sum += f.forecast().unwrap().value;
        }
        let after = allocations();
        assert!(sum > 0.0);
        if f.config().change.is_some() {
            assert!(f.resets() >= 10, "the steps reset it: {}", f.resets());
        }
        assert_eq!(after - before, 0, "allocations in 2000 samples");
    }
}
