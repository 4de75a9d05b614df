//! The forecaster's cost per sample: one `observe` (every predictor updated and scored, the
//! change rule checked) followed by one `forecast`, with the default configuration (17
//! predictors, windows up to 51). Ids `forecast/observe/steady` (noise around a level) and
//! `forecast/observe/steps` (a step every 150 samples and a spike every 37th: excursions and
//! resets included). One criterion iteration is one sample, cycling through 4,096 pre-drawn
//! values after a warm-up of 4,096.
//!
//! Run: `cargo bench -p windrose-model --bench forecast`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use windrose_model::forecast::{ForecastConfig, Forecaster};

fn steady(rng: &mut ChaCha8Rng) -> Vec<f64> {
    (0..4096).map(|_| 20.0 + rng.gen_range(0.0..0.5)).collect()
}

fn steps(rng: &mut ChaCha8Rng) -> Vec<f64> {
    (0..4096)
        .map(|i| {
            let level = [20.0, 80.0, 35.0, 120.0][(i / 150) % 4];
            let x = level + rng.gen_range(0.0..0.5);
            if i % 37 == 36 {
                x * 1.5
            } else {
                x
            }
        })
        .collect()
}

fn observe(c: &mut Criterion) {
    let mut group = c.benchmark_group("forecast/observe");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    for (id, xs) in [("steady", steady(&mut rng)), ("steps", steps(&mut rng))] {
        let mut f = Forecaster::new(ForecastConfig::default()).expect("the default config");
        for &x in &xs {
            f.observe(x).expect("valid samples");
        }
        let mut i = 0;
        group.bench_function(id, |b| {
            b.iter(|| {
                f.observe(black_box(xs[i])).expect("valid samples");
                i = (i + 1) % xs.len();
                black_box(f.forecast())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, observe);
criterion_main!(benches);
