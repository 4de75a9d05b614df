//! Time as an input: [`Time`], nanoseconds since the start of a run.
//!
//! Protocol machines never read a clock. The driver passes `now` with every input: the simulator
//! its virtual time, the runtime the time elapsed since the process joined the run (so two
//! processes' `Time`s are not comparable unless the driver synchronises them). Spans of time are
//! plain [`std::time::Duration`]s.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// An instant of a run: nanoseconds since the run's start.
///
/// A `u64` of nanoseconds covers 584 years; arithmetic saturates rather than wrapping or
/// panicking, so a corrupt timestamp from a peer can never crash a node.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Time(u64);

impl Time {
    /// The start of the run.
    pub const ZERO: Time = Time(0);
    /// The latest representable instant (used as "never").
    pub const MAX: Time = Time(u64::MAX);

    /// The instant `nanos` nanoseconds after the start.
    #[inline]
    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }

    /// The instant `micros` microseconds after the start (saturating).
    #[inline]
    pub const fn from_micros(micros: u64) -> Time {
        Time(micros.saturating_mul(1_000))
    }

    /// The instant `millis` milliseconds after the start (saturating).
    #[inline]
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000_000))
    }

    /// The instant `secs` seconds after the start, rounded to the nearest nanosecond. Negative
    /// and NaN inputs give [`Time::ZERO`], too large ones [`Time::MAX`].
    pub fn from_secs_f64(secs: f64) -> Time {
        // `as` saturates for floats: NaN -> 0, negative -> 0, too large -> u64::MAX.
        Time((secs * 1e9).round() as u64)
    }

    /// Nanoseconds since the start.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the start (exact below 2^53 ns, about 104 days).
    #[inline]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }

    /// `self + span`, or [`Time::MAX`] on overflow.
    #[inline]
    pub fn saturating_add(self, span: Duration) -> Time {
        let nanos = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }

    /// `self + span`, or None on overflow.
    #[inline]
    pub fn checked_add(self, span: Duration) -> Option<Time> {
        let nanos = u64::try_from(span.as_nanos()).ok()?;
        self.0.checked_add(nanos).map(Time)
    }

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    #[inline]
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    /// Saturating: see [`Time::saturating_add`].
    #[inline]
    fn add(self, span: Duration) -> Time {
        self.saturating_add(span)
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    /// Saturating: see [`Time::saturating_since`].
    #[inline]
    fn sub(self, earlier: Time) -> Duration {
        self.saturating_since(earlier)
    }
}

impl fmt::Display for Time {
    /// Seconds with nanosecond precision, e.g. `1.250000000s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Serde form of spans and instants as `f64` seconds (`#[serde(with = "crate::time::secs")]`),
/// the unit of every `..._s` field a user reads in JSON (the simulator's metrics, the CLI).
pub mod secs {
    use super::Time;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// A value written as seconds.
    pub trait Secs: Sized {
        /// Seconds, None for an absent value.
        fn to_secs(&self) -> Option<f64>;
        /// Back from seconds (None: absent); an error for a negative or non-finite span.
        fn from_secs(s: Option<f64>) -> Result<Self, String>;
    }

    fn span(s: f64) -> Result<Duration, String> {
        Duration::try_from_secs_f64(s).map_err(|e| format!("{s} s is not a span of time: {e}"))
    }

    impl Secs for Duration {
        fn to_secs(&self) -> Option<f64> {
            Some(self.as_secs_f64())
        }
        fn from_secs(s: Option<f64>) -> Result<Self, String> {
            span(s.ok_or("seconds expected")?)
        }
    }

    impl Secs for Time {
        fn to_secs(&self) -> Option<f64> {
            Some(self.as_secs_f64())
        }
        fn from_secs(s: Option<f64>) -> Result<Self, String> {
            // Checked as a span so a negative instant is refused rather than clamped.
            span(s.ok_or("seconds expected")?)?;
            Ok(Time::from_secs_f64(s.unwrap_or_default()))
        }
    }

    impl Secs for Option<Duration> {
        fn to_secs(&self) -> Option<f64> {
            self.map(|d| d.as_secs_f64())
        }
        fn from_secs(s: Option<f64>) -> Result<Self, String> {
            s.map(span).transpose()
        }
    }

    /// Serializes `v` as seconds (`null` when absent).
    pub fn serialize<T: Secs, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        match v.to_secs() {
            Some(x) => s.serialize_f64(x),
            None => s.serialize_none(),
        }
    }

    /// Reads seconds (or `null`) back.
    pub fn deserialize<'de, T: Secs, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        T::from_secs(Option::<f64>::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_and_saturation() {
        assert_eq!(Time::from_millis(3).as_nanos(), 3_000_000);
        assert_eq!(Time::from_micros(7).as_nanos(), 7_000);
        assert_eq!(Time::from_secs_f64(1.5).as_nanos(), 1_500_000_000);
        assert_eq!(Time::from_secs_f64(-1.0), Time::ZERO);
        assert_eq!(Time::from_secs_f64(f64::NAN), Time::ZERO);
        assert_eq!(Time::from_secs_f64(1e30), Time::MAX);
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::MAX.checked_add(Duration::from_nanos(1)), None);
        assert_eq!(Time::from_nanos(5) - Time::from_nanos(9), Duration::ZERO);
        assert_eq!(
            Time::from_millis(10) - Time::from_millis(4),
            Duration::from_millis(6)
        );
        assert_eq!(Time::from_millis(1250).to_string(), "1.250000000s");
        assert!((Time::from_millis(1500).as_secs_f64() - 1.5).abs() < 1e-15);
    }
}
