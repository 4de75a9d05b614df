//! Forecasters for link measurements, after Wolski's Network Weather Service (NWS).
//!
//! A [`Forecaster`] feeds every sample of one series (an RTT or a throughput) to a family of
//! cheap primary predictors — the last value, the running mean, sliding-window means, medians
//! and trimmed means, exponential smoothing at several gains — scores each one's one-step-ahead
//! error, and reports the forecast of the predictor whose error has been lowest so far (NWS's
//! adaptive choice), with that error as the forecast's error estimate.
//!
//! NWS alone follows a step change slowly: the predictors that won on the old level (long
//! medians, the running mean) keep winning on their long record. A change-point rule
//! ([`ChangeRule`]) restarts every history from the new level once the samples have left the
//! forecast's error band for a few samples in a row, so a step is followed within
//! [`ChangeRule::consecutive`] samples.
//!
//! Cost per sample: O(largest window) (51 by default), no allocation once built: the histories are
//! ring buffers and sorted windows whose capacity is reserved up front.
//!
//! ```
//! use windrose_model::forecast::{ForecastConfig, Forecaster};
//! let mut f = Forecaster::new(ForecastConfig::default()).unwrap();
//! for rtt_ms in [20.4, 20.5, 20.4, 20.6, 20.4, 20.5, 80.4, 80.3, 80.5] {
//!     f.observe(rtt_ms).unwrap();
//! }
//! let next = f.forecast().unwrap();
//! assert!((next.value - 80.4).abs() < 0.5, "{next:?}");
//! assert!(f.observe(f64::NAN).is_err());
//! ```

use crate::error::compact;
use crate::measurements::Series;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The largest window (and error window) a configuration may ask for: a series keeps at most
/// [`crate::measurements::MAX_SAMPLES`] samples, so a longer window would never fill.
pub const MAX_WINDOW: usize = crate::measurements::MAX_SAMPLES;

/// What went wrong feeding or configuring a forecaster.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ForecastError {
    /// A sample that is NaN or infinite (a failed probe must not be averaged in).
    #[error("sample {} is not a finite number", compact(*.value))]
    NotFinite { value: f64 },
    /// A negative sample: RTTs and throughputs are never negative, so it is a measuring bug.
    #[error("sample {} is negative (RTTs and throughputs are >= 0)", compact(*.value))]
    Negative { value: f64 },
    /// A bad sample of a [`Series`], with its position.
    #[error("sample {index} (at {} s) of the series: {source}", compact(*.at_s))]
    InSeries {
        index: usize,
        at_s: f64,
        source: Box<ForecastError>,
    },
    /// A configuration value out of its range.
    #[error("forecast config: {field} {reason}")]
    Config { field: &'static str, reason: String },
}

/// One primary predictor.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Method {
    /// The last sample.
    Last,
    /// The mean of every sample since the start (or the last reset).
    RunningMean,
    /// The mean of the last `window` samples (fewer until the window fills).
    Mean { window: usize },
    /// The median of the last `window` samples (the mean of the two middle ones for an even
    /// count, until the window fills).
    Median { window: usize },
    /// The mean of the last `window` samples without the lowest and highest
    /// [`ForecastConfig::trim`] of them (a quarter each by default: the interquartile mean).
    TrimmedMean { window: usize },
    /// Exponential smoothing: `f <- f + gain * (x - f)`, starting at the first sample.
    Ewma { gain: f64 },
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Method::Last => f.write_str("last"),
            Method::RunningMean => f.write_str("mean"),
            Method::Mean { window } => write!(f, "mean{window}"),
            Method::Median { window } => write!(f, "median{window}"),
            Method::TrimmedMean { window } => write!(f, "trimmed{window}"),
            Method::Ewma { gain } => {
                // Two decimals ("ewma0.10") when that is exact, else every digit needed.
                let two = format!("{gain:.2}");
                if two.parse::<f64>() == Ok(gain) {
                    write!(f, "ewma{two}")
                } else {
                    write!(f, "ewma{gain}")
                }
            }
        }
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Method, String> {
        let bad = || {
            format!(
                "unknown forecast method {s:?} \
                 (expected last, mean, meanN, medianN, trimmedN or ewmaG)"
            )
        };
        match s {
            "last" => return Ok(Method::Last),
            "mean" => return Ok(Method::RunningMean),
            _ => {}
        }
        if let Some(w) = s.strip_prefix("trimmed") {
            return w
                .parse()
                .map(|window| Method::TrimmedMean { window })
                .map_err(|_| bad());
        }
        if let Some(w) = s.strip_prefix("median") {
            return w
                .parse()
                .map(|window| Method::Median { window })
                .map_err(|_| bad());
        }
        if let Some(w) = s.strip_prefix("mean") {
            return w
                .parse()
                .map(|window| Method::Mean { window })
                .map_err(|_| bad());
        }
        if let Some(g) = s.strip_prefix("ewma") {
            return g
                .parse()
                .map(|gain| Method::Ewma { gain })
                .map_err(|_| bad());
        }
        Err(bad())
    }
}

// As its name ("median5"), the form the weather view and config files show.
impl Serialize for Method {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Method {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How a predictor's error is scored.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorMeasure {
    /// Mean squared error; the error estimate is its root (RMSE).
    #[default]
    Mse,
    /// Mean absolute error: less swayed by rare outliers.
    Mae,
}

/// What the forecast does after the first sample that leaves the error band, before the rule
/// has decided whether the level changed (with [`ChangeRule::consecutive`] > 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Excursion {
    /// Forecast the last sample while the excursion lasts if, on this series' earlier
    /// excursions, that has had no larger error (in the config's measure) than keeping the
    /// predictors' forecast; the first excursion is followed. A link with steps learns to follow,
    /// a link with lone spikes learns to hold.
    #[default]
    Learned,
    /// Always forecast the last sample during an excursion.
    Follow,
    /// Keep the predictors' forecast until the change is confirmed (pure NWS plus resets).
    Hold,
}

/// The change-point rule.
///
/// The band around a forecast is `max(sigmas * RMSE, min_band_rel * |forecast|)`, the RMSE being
/// the chosen predictor's. A sample beyond the band around the forecast made for it starts a
/// run; the next samples extend the run while they stay beyond that same band around that same
/// forecast, on the same side. When the run reaches `consecutive` samples the level is taken to
/// have changed: every predictor and error history restarts from the run's samples (those within
/// the band of its last sample, so an old-level excursion that began the run is left out); after a
/// step wider than the band the forecast is on the new level `consecutive` samples later (one
/// sample when the excursion is followed, see [`Excursion`]).
///
/// Detection starts once the chosen predictor has `min_history` scored errors. Right after a
/// reset the band's RMSE is at least the one from before the reset until the new history has
/// `min_history` errors, so the first noisy samples of a new level do not reset it again.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChangeRule {
    /// Half-width of the band in standard errors (RMSE of the chosen predictor). Default 4.
    pub sigmas: f64,
    /// The band's smallest half-width relative to the forecast, so a noise-free series does not
    /// reset on rounding. Default 0.01 (1 %).
    pub min_band_rel: f64,
    /// Out-of-band samples in a row, on the same side, that make a change. Default 2: one lone
    /// spike never resets.
    pub consecutive: usize,
    /// Scored errors needed before the band is trusted. Default 5.
    pub min_history: usize,
    /// The forecast while an excursion is unconfirmed. Default [`Excursion::Learned`].
    pub excursion: Excursion,
}

impl Default for ChangeRule {
    fn default() -> ChangeRule {
        ChangeRule {
            sigmas: 4.0,
            min_band_rel: 0.01,
            consecutive: 2,
            min_history: 5,
            excursion: Excursion::Learned,
        }
    }
}

/// Which predictors run and how the best is chosen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForecastConfig {
    /// Windows of the sliding means. Default 5, 31, 51 (NWS's).
    pub mean_windows: Vec<usize>,
    /// Windows of the sliding medians. Default 5, 31, 51.
    pub median_windows: Vec<usize>,
    /// Windows of the sliding trimmed means. Default 5, 31, 51.
    pub trimmed_windows: Vec<usize>,
    /// The fraction of a trimmed mean's window dropped at each end, in [0, 0.5) (rounded down
    /// to whole samples). Default 0.25.
    pub trim: f64,
    /// Gains of the exponential smoothers, each in (0, 1]. Default 0.05, 0.1, 0.2, 0.3, 0.5,
    /// 0.75.
    pub gains: Vec<f64>,
    /// How errors are scored for the choice. Default MSE.
    pub measure: ErrorMeasure,
    /// Score only the last this many errors (None: every error since the start or last reset).
    pub error_window: Option<usize>,
    /// The change-point rule (None: no resets, plain NWS).
    pub change: Option<ChangeRule>,
}

impl Default for ForecastConfig {
    fn default() -> ForecastConfig {
        ForecastConfig {
            mean_windows: vec![5, 31, 51],
            median_windows: vec![5, 31, 51],
            trimmed_windows: vec![5, 31, 51],
            trim: 0.25,
            gains: vec![0.05, 0.1, 0.2, 0.3, 0.5, 0.75],
            measure: ErrorMeasure::Mse,
            error_window: None,
            change: Some(ChangeRule::default()),
        }
    }
}

impl ForecastConfig {
    /// The predictors this configuration runs, in the order ties are broken (earlier wins).
    pub fn methods(&self) -> Vec<Method> {
        let mut m = vec![Method::Last, Method::RunningMean];
        m.extend(
            self.mean_windows
                .iter()
                .map(|&window| Method::Mean { window }),
        );
        m.extend(
            self.median_windows
                .iter()
                .map(|&window| Method::Median { window }),
        );
        m.extend(
            self.trimmed_windows
                .iter()
                .map(|&window| Method::TrimmedMean { window }),
        );
        m.extend(self.gains.iter().map(|&gain| Method::Ewma { gain }));
        m
    }

    fn check(&self) -> Result<(), ForecastError> {
        let bad = |field, reason: String| Err(ForecastError::Config { field, reason });
        for (field, ws) in [
            ("mean_windows", &self.mean_windows),
            ("median_windows", &self.median_windows),
            ("trimmed_windows", &self.trimmed_windows),
        ] {
            if let Some(&w) = ws.iter().find(|&&w| w == 0 || w > MAX_WINDOW) {
                return bad(
                    field,
                    format!("has window {w}; windows are 1 to {MAX_WINDOW}"),
                );
            }
        }
        if !(self.trim >= 0.0 && self.trim < 0.5) {
            return bad(
                "trim",
                format!("is {}; it is in [0, 0.5)", compact(self.trim)),
            );
        }
        if let Some(&g) = self.gains.iter().find(|g| !(**g > 0.0 && **g <= 1.0)) {
            return bad(
                "gains",
                format!("has gain {}; gains are in (0, 1]", compact(g)),
            );
        }
        if let Some(w) = self.error_window {
            if w == 0 || w > MAX_WINDOW {
                return bad("error_window", format!("is {w}; it is 1 to {MAX_WINDOW}"));
            }
        }
        if let Some(c) = &self.change {
            if !(c.sigmas.is_finite() && c.sigmas > 0.0) {
                return bad(
                    "change.sigmas",
                    format!("is {}; it must be > 0", compact(c.sigmas)),
                );
            }
            if !(c.min_band_rel.is_finite() && c.min_band_rel >= 0.0) {
                return bad(
                    "change.min_band_rel",
                    format!("is {}; it must be >= 0", compact(c.min_band_rel)),
                );
            }
            if c.consecutive == 0 || c.consecutive > MAX_WINDOW {
                return bad(
                    "change.consecutive",
                    format!("is {}; it is 1 to {MAX_WINDOW}", c.consecutive),
                );
            }
        }
        Ok(())
    }
}

/// A forecast of the next sample.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// The forecast value, in the series' unit.
    pub value: f64,
    /// Its error estimate, in the series' unit: the chosen predictor's RMSE (for
    /// [`ErrorMeasure::Mse`]) or MAE so far. During an unconfirmed excursion that is followed, the
    /// distance between the last sample and the predictors' forecast.
    pub error: f64,
    /// How many errors the estimate rests on (0: none yet, the estimate is 0 but unknown).
    pub scored: usize,
    /// The predictor that made it.
    pub method: Method,
}

/// One predictor's state, for a weather view or a comparison.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PredictorView {
    /// Which predictor.
    pub method: Method,
    /// Its forecast of the next sample.
    pub value: f64,
    /// Its mean squared error over the scored samples.
    pub mse: f64,
    /// Its mean absolute error over the scored samples.
    pub mae: f64,
    /// How many errors are scored (since the last reset, within the error window).
    pub scored: usize,
}

/// The forecast after one sample of a [`Series`].
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesForecast {
    /// The sample's time, in seconds since the node's run started.
    pub at_s: f64,
    /// The sample.
    pub observed: f64,
    /// The forecast of the next sample, made after this one.
    pub forecast: Forecast,
}

/// Runs a whole series through a new forecaster: the forecast after each sample.
pub fn forecast_series(
    config: &ForecastConfig,
    series: &Series,
) -> Result<Vec<SeriesForecast>, ForecastError> {
    let mut f = Forecaster::new(config.clone())?;
    let mut out = Vec::with_capacity(series.samples.len());
    for (index, s) in series.samples.iter().enumerate() {
        f.observe(s.value).map_err(|e| ForecastError::InSeries {
            index,
            at_s: s.at_s,
            source: Box::new(e),
        })?;
        out.push(SeriesForecast {
            at_s: s.at_s,
            observed: s.value,
            forecast: f.forecast().expect("a forecast after a sample"),
        });
    }
    Ok(out)
}

/// A fixed-capacity ring of the newest values.
#[derive(Clone, Debug)]
struct Ring {
    buf: Vec<f64>,
    /// The capacity asked for (a Vec may reserve more).
    cap: usize,
    /// Index of the oldest value once full, of the next free slot before.
    head: usize,
}

impl Ring {
    fn new(capacity: usize) -> Ring {
        Ring {
            buf: Vec::with_capacity(capacity),
            cap: capacity,
            head: 0,
        }
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    /// The `i`-th newest value (0: the newest); `i < len`.
    fn back(&self, i: usize) -> f64 {
        let n = self.buf.len();
        let newest = if n < self.cap {
            n - 1
        } else {
            (self.head + n - 1) % n
        };
        self.buf[(newest + n - i) % n]
    }

    /// The newest `n` values (`n <= len`), oldest first, as at most two contiguous slices.
    fn newest(&self, n: usize) -> (&[f64], &[f64]) {
        let len = self.buf.len();
        if len < self.cap {
            (&self.buf[len - n..], &[])
        } else if n <= self.head {
            (&self.buf[self.head - n..self.head], &[])
        } else {
            (&self.buf[len - (n - self.head)..], &self.buf[..self.head])
        }
    }

    fn push(&mut self, x: f64) {
        if self.buf.len() < self.cap {
            self.buf.push(x);
        } else {
            self.buf[self.head] = x;
            self.head = (self.head + 1) % self.buf.len();
        }
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.head = 0;
    }
}

/// The primary predictors' state; `values[i]` is predictor `i`'s forecast of the next sample.
#[derive(Clone, Debug)]
struct Predictors {
    methods: Vec<Method>,
    recent: Ring,
    count: usize,
    running_mean: f64,
    mean_windows: Vec<usize>,
    /// The windows kept sorted (those of the medians and trimmed means, each once)...
    sorted_windows: Vec<usize>,
    /// ... and their last samples, sorted (capacity reserved).
    sorted: Vec<Vec<f64>>,
    /// Each median's and trimmed mean's index into `sorted`.
    median_at: Vec<usize>,
    trimmed_at: Vec<usize>,
    trim: f64,
    gains: Vec<f64>,
    ewma: Vec<f64>,
    values: Vec<f64>,
}

impl Predictors {
    fn new(config: &ForecastConfig) -> Predictors {
        let mut sorted_windows: Vec<usize> = config
            .median_windows
            .iter()
            .chain(&config.trimmed_windows)
            .copied()
            .collect();
        sorted_windows.sort_unstable();
        sorted_windows.dedup();
        let at = |w: &usize| sorted_windows.binary_search(w).expect("a sorted window");
        let median_at = config.median_windows.iter().map(at).collect();
        let trimmed_at = config.trimmed_windows.iter().map(at).collect();
        let widest = config
            .mean_windows
            .iter()
            .chain(&sorted_windows)
            .copied()
            .max()
            .unwrap_or(1);
        let methods = config.methods();
        Predictors {
            values: vec![0.0; methods.len()],
            methods,
            recent: Ring::new(widest),
            count: 0,
            running_mean: 0.0,
            mean_windows: config.mean_windows.clone(),
            sorted: sorted_windows
                .iter()
                .map(|&w| Vec::with_capacity(w))
                .collect(),
            sorted_windows,
            median_at,
            trimmed_at,
            trim: config.trim,
            gains: config.gains.clone(),
            ewma: vec![0.0; config.gains.len()],
        }
    }

    fn clear(&mut self) {
        self.recent.clear();
        self.count = 0;
        self.running_mean = 0.0;
        self.sorted.iter_mut().for_each(Vec::clear);
    }

    fn push(&mut self, x: f64) {
        // The sorted windows first: the sample leaving each window is still in `recent`.
        for (s, &w) in self.sorted.iter_mut().zip(&self.sorted_windows) {
            if self.recent.len() >= w {
                let old = self.recent.back(w - 1);
                let i = s
                    .binary_search_by(|v| v.total_cmp(&old))
                    .expect("the leaving sample is in its sorted window");
                s.remove(i);
            }
            let at = s.partition_point(|v| v.total_cmp(&x).is_lt());
            s.insert(at, x);
        }
        self.recent.push(x);
        self.count += 1;
        // Welford's update: exact on a constant series, no growing sum to lose digits.
        self.running_mean += (x - self.running_mean) / self.count as f64;
        if self.count == 1 {
            self.ewma.iter_mut().for_each(|e| *e = x);
        } else {
            for (e, &g) in self.ewma.iter_mut().zip(&self.gains) {
                *e += g * (x - *e);
            }
        }

        let mut k = 0;
        self.values[k] = x;
        k += 1;
        self.values[k] = self.running_mean;
        k += 1;
        for &w in &self.mean_windows {
            // The mean as the newest sample plus the mean deviation from it: O(w), no running
            // sum to drift, and exact when the window is constant.
            let n = w.min(self.recent.len());
            let (a, b) = self.recent.newest(n);
            let dev: f64 =
                a.iter().map(|&v| v - x).sum::<f64>() + b.iter().map(|&v| v - x).sum::<f64>();
            self.values[k] = x + dev / n as f64;
            k += 1;
        }
        for &j in &self.median_at {
            let s = &self.sorted[j];
            let n = s.len();
            self.values[k] = if n % 2 == 1 {
                s[n / 2]
            } else {
                let (a, b) = (s[n / 2 - 1], s[n / 2]);
                a + (b - a) / 2.0
            };
            k += 1;
        }
        for &j in &self.trimmed_at {
            let s = &self.sorted[j];
            let cut = (s.len() as f64 * self.trim) as usize;
            let kept = &s[cut..s.len() - cut];
            // As the means above: the lowest kept sample plus the mean deviation from it.
            let dev: f64 = kept.iter().map(|&v| v - kept[0]).sum();
            self.values[k] = kept[0] + dev / kept.len() as f64;
            k += 1;
        }
        for &e in &self.ewma {
            self.values[k] = e;
            k += 1;
        }
        debug_assert_eq!(k, self.values.len());
    }
}

/// One predictor's (or one excursion policy's) error record.
#[derive(Clone, Debug)]
struct Tally {
    sum_sq: f64,
    sum_abs: f64,
    /// Errors scored since the last reset (all of them, whatever the window).
    total: usize,
    /// The last errors when a window is set (capacity = the window).
    window: Option<Ring>,
}

impl Tally {
    fn new(window: Option<usize>) -> Tally {
        Tally {
            sum_sq: 0.0,
            sum_abs: 0.0,
            total: 0,
            window: window.map(Ring::new),
        }
    }

    fn add(&mut self, e: f64) {
        if let Some(r) = &mut self.window {
            if r.len() == r.cap {
                // Evict the oldest: the newest is back(0), the oldest back(len - 1).
                let old = r.back(r.len() - 1);
                self.sum_sq -= old * old;
                self.sum_abs -= old.abs();
            }
            r.push(e);
        }
        self.sum_sq += e * e;
        self.sum_abs += e.abs();
        self.total += 1;
    }

    fn scored(&self) -> usize {
        self.window.as_ref().map_or(self.total, Ring::len)
    }

    fn mse(&self) -> f64 {
        match self.scored() {
            0 => 0.0,
            // Clamped: subtracting evicted errors may leave a rounding residue below 0.
            n => (self.sum_sq / n as f64).max(0.0),
        }
    }

    fn mae(&self) -> f64 {
        match self.scored() {
            0 => 0.0,
            n => (self.sum_abs / n as f64).max(0.0),
        }
    }

    fn error(&self, measure: ErrorMeasure) -> f64 {
        match measure {
            ErrorMeasure::Mse => self.mse().sqrt(),
            ErrorMeasure::Mae => self.mae(),
        }
    }

    fn clear(&mut self) {
        self.sum_sq = 0.0;
        self.sum_abs = 0.0;
        self.total = 0;
        if let Some(r) = &mut self.window {
            r.clear();
        }
    }
}

/// An NWS-style adaptive forecaster for one measurement series (see the module docs).
#[derive(Clone, Debug)]
pub struct Forecaster {
    config: ForecastConfig,
    predictors: Predictors,
    tallies: Vec<Tally>,
    /// The chosen predictor (an index into the methods), None before the first sample.
    chosen: Option<usize>,
    /// The out-of-band run so far (same side), at most `consecutive` samples.
    pending: Vec<f64>,
    /// The side of the out-of-band run: +1 above the forecast, -1 below.
    pending_side: f64,
    /// The forecast made for the run's first sample, and the band around it then.
    reference: f64,
    reference_band: f64,
    /// The RMSE the band used before the last reset, kept until the new history is long enough.
    prior_rmse: f64,
    /// Errors, on the sample after each excursion sample, of forecasting the last sample...
    follow: Tally,
    /// ... and of keeping the predictors' forecast.
    hold: Tally,
    resets: usize,
    observed: usize,
}

impl Forecaster {
    /// A forecaster with no samples yet; fails on a configuration value out of range.
    pub fn new(config: ForecastConfig) -> Result<Forecaster, ForecastError> {
        config.check()?;
        let predictors = Predictors::new(&config);
        let n = predictors.methods.len();
        let consecutive = config.change.map_or(0, |c| c.consecutive);
        Ok(Forecaster {
            tallies: (0..n).map(|_| Tally::new(config.error_window)).collect(),
            predictors,
            chosen: None,
            pending: Vec::with_capacity(consecutive),
            pending_side: 0.0,
            reference: 0.0,
            reference_band: 0.0,
            prior_rmse: 0.0,
            follow: Tally::new(None),
            hold: Tally::new(None),
            resets: 0,
            observed: 0,
            config,
        })
    }

    /// The configuration it runs.
    pub fn config(&self) -> &ForecastConfig {
        &self.config
    }

    /// How many samples it has observed.
    pub fn observed(&self) -> usize {
        self.observed
    }

    /// How many times the change-point rule has restarted the histories.
    pub fn resets(&self) -> usize {
        self.resets
    }

    /// Feeds the next sample. A NaN, infinite or negative value is refused and changes nothing.
    pub fn observe(&mut self, value: f64) -> Result<(), ForecastError> {
        if !value.is_finite() {
            return Err(ForecastError::NotFinite { value });
        }
        if value < 0.0 {
            return Err(ForecastError::Negative { value });
        }
        self.observed += 1;
        let Some(chosen) = self.chosen else {
            self.ingest(value);
            return Ok(());
        };
        let forecast = self.predictors.values[chosen];

        // Score the excursion policies on the sample after an excursion sample.
        if let Some(&last) = self.pending.last() {
            self.follow.add(value - last);
            self.hold.add(value - forecast);
        }

        let Some(rule) = self.config.change else {
            self.ingest(value);
            return Ok(());
        };
        let t = &self.tallies[chosen];
        let history = t.total;
        let rmse = if history >= rule.min_history {
            t.mse().sqrt()
        } else {
            t.mse().sqrt().max(self.prior_rmse)
        };
        // A run continues while its samples stay beyond the band around the forecast made
        // before it began: measured from the current forecast instead, a run that the chosen
        // predictor follows (the last value) would end after one sample, and the slow
        // predictors would never restart.
        if !self.pending.is_empty() {
            let d = value - self.reference;
            if !(d.abs() > self.reference_band && d.signum() == self.pending_side) {
                self.pending.clear();
            }
        }
        if self.pending.is_empty() {
            let armed = history >= rule.min_history || self.resets > 0;
            let band = (rule.sigmas * rmse).max(rule.min_band_rel * forecast.abs());
            let d = value - forecast;
            if !(armed && d.abs() > band) {
                self.ingest(value);
                return Ok(());
            }
            self.pending_side = d.signum();
            self.reference = forecast;
            self.reference_band = band;
        }
        self.pending.push(value);
        if self.pending.len() < rule.consecutive {
            self.ingest(value);
            return Ok(());
        }
        // The level changed: restart every history from the run's samples that agree with its
        // last one (within the band), so a noise excursion on the old level that happened to
        // start the run is not carried onto the new level.
        self.prior_rmse = rmse;
        self.resets += 1;
        self.predictors.clear();
        self.tallies.iter_mut().for_each(Tally::clear);
        self.chosen = None;
        let run = std::mem::take(&mut self.pending);
        let band = self.reference_band;
        for &x in run.iter().filter(|&&x| (x - value).abs() <= band) {
            self.ingest(x);
        }
        self.pending = run;
        self.pending.clear();
        Ok(())
    }

    /// Scores every predictor's forecast of `x`, updates them with it, and chooses again.
    fn ingest(&mut self, x: f64) {
        if self.chosen.is_some() {
            for (t, &f) in self.tallies.iter_mut().zip(&self.predictors.values) {
                t.add(x - f);
            }
        }
        self.predictors.push(x);
        // Compared as MSE (not its root) or MAE: the same order, no square roots.
        let score = |t: &Tally| match self.config.measure {
            ErrorMeasure::Mse => t.mse(),
            ErrorMeasure::Mae => t.mae(),
        };
        let (mut best, mut best_score) = (0, f64::INFINITY);
        for (i, t) in self.tallies.iter().enumerate() {
            let e = score(t);
            if e < best_score {
                (best, best_score) = (i, e);
            }
        }
        self.chosen = Some(best);
    }

    /// Whether an unconfirmed excursion is forecast by its last sample.
    fn following(&self) -> bool {
        let Some(rule) = self.config.change else {
            return false;
        };
        if self.pending.is_empty() {
            return false;
        }
        match rule.excursion {
            Excursion::Follow => true,
            Excursion::Hold => false,
            Excursion::Learned => {
                let m = self.config.measure;
                self.follow.error(m) <= self.hold.error(m)
            }
        }
    }

    /// The forecast of the next sample, None before the first sample.
    pub fn forecast(&self) -> Option<Forecast> {
        let chosen = self.chosen?;
        let m = self.config.measure;
        if self.following() {
            let last = *self.pending.last().expect("following an excursion");
            let error = if self.follow.total > 0 {
                self.follow.error(m)
            } else {
                (last - self.predictors.values[chosen]).abs()
            };
            return Some(Forecast {
                value: last,
                error,
                scored: self.follow.total,
                method: Method::Last,
            });
        }
        let t = &self.tallies[chosen];
        Some(Forecast {
            value: self.predictors.values[chosen],
            error: t.error(m),
            scored: t.scored(),
            method: self.predictors.methods[chosen],
        })
    }

    /// Every predictor's forecast and error, in [`ForecastConfig::methods`] order (empty before
    /// the first sample).
    pub fn predictors(&self) -> impl Iterator<Item = PredictorView> + '_ {
        let any = self.chosen.is_some();
        self.predictors
            .methods
            .iter()
            .zip(&self.predictors.values)
            .zip(&self.tallies)
            .filter(move |_| any)
            .map(|((&method, &value), t)| PredictorView {
                method,
                value,
                mse: t.mse(),
                mae: t.mae(),
                scored: t.scored(),
            })
    }
}
