//! The range of every value a testbed takes: capacities, WAN latencies (from the platform, from
//! `windrose testbed set`, from a scenario's timed changes) and the period of mayhem's draws.
//! A value outside is refused up front with an error naming the field and the range, instead of
//! reaching tc (which rejects or saturates it) or the delay line (where a latency of `1e300`
//! panicked and `1e9` held every packet, growing without end).

use crate::TestbedError;
use windrose_model::error::compact;
use windrose_model::platform::{LinkId, Platform};
use windrose_model::ClusterId;

/// Smallest capacity a testbed shapes to, bytes/s (8 kbit/s: below, tc's token bucket holds a
/// single packet for seconds and TCP's timers give up).
pub const MIN_CAPACITY_BYTES_S: f64 = 1e3;
/// Largest capacity, bytes/s (8 Tbit/s; anything from [`crate::plan::UNSHAPED_BYTES_S`] on is
/// left unshaped anyway).
pub const MAX_CAPACITY_BYTES_S: f64 = 1e12;
/// Largest one-way WAN latency, seconds (a geostationary hop is 0.3 s; beyond 10 s TCP's
/// handshake times out before a packet crosses).
pub const MAX_LATENCY_S: f64 = 10.0;
/// Shortest period between mayhem's draws on a testbed, seconds: each draw is a tc command per
/// link, which take milliseconds each.
pub const MIN_MAYHEM_PERIOD_S: f64 = 0.1;
/// Most timed changes (a scenario's `[[change]]`s plus mayhem's draws, one per link) a
/// testbed run replays.
pub const MAX_TIMED_CHANGES: usize = 100_000;

/// The error for `field = value` outside `range`.
pub fn out_of_range(
    field: impl Into<String>,
    value: f64,
    range: impl Into<String>,
) -> TestbedError {
    TestbedError::OutOfRange {
        field: field.into(),
        value: compact(value),
        range: range.into(),
    }
}

/// Checks a capacity, bytes/s; `field` names it in the error (e.g. `bytes_s of wan:0:1`).
pub fn check_capacity(field: &str, bytes_s: f64) -> Result<(), TestbedError> {
    if bytes_s.is_finite() && (MIN_CAPACITY_BYTES_S..=MAX_CAPACITY_BYTES_S).contains(&bytes_s) {
        Ok(())
    } else {
        Err(out_of_range(
            field,
            bytes_s,
            format!(
                "a testbed shapes capacities from {} to {} bytes/s",
                compact(MIN_CAPACITY_BYTES_S),
                compact(MAX_CAPACITY_BYTES_S)
            ),
        ))
    }
}

/// Checks a one-way WAN latency, seconds.
pub fn check_latency(field: &str, latency_s: f64) -> Result<(), TestbedError> {
    if latency_s.is_finite() && (0.0..=MAX_LATENCY_S).contains(&latency_s) {
        Ok(())
    } else {
        Err(out_of_range(
            field,
            latency_s,
            format!(
                "the delay line holds packets from 0 to {} s (one way)",
                compact(MAX_LATENCY_S)
            ),
        ))
    }
}

/// Checks mayhem's period, seconds.
pub fn check_period(field: &str, period_s: f64) -> Result<(), TestbedError> {
    if period_s.is_finite() && period_s >= MIN_MAYHEM_PERIOD_S {
        Ok(())
    } else {
        Err(out_of_range(
            field,
            period_s,
            format!(
                "a testbed redraws its links at most every {} s (each draw is a tc command per link)",
                compact(MIN_MAYHEM_PERIOD_S)
            ),
        ))
    }
}

/// The name of a link as `testbed set` and scenario files write it (`wan:0:1`).
pub fn link_name(link: LinkId) -> String {
    match link {
        LinkId::NodeUp(n) => format!("node_up:{n}"),
        LinkId::NodeDown(n) => format!("node_down:{n}"),
        LinkId::AccessUp(c) => format!("access_up:{c}"),
        LinkId::AccessDown(c) => format!("access_down:{c}"),
        LinkId::Wan { from, to } => format!("wan:{from}:{to}"),
    }
}

/// Checks every capacity and WAN latency of a platform (intra-cluster latencies are not
/// emulated).
pub fn check_platform(platform: &Platform) -> Result<(), TestbedError> {
    for link in platform.links() {
        check_capacity(
            &format!("platform: bytes_s of {}", link_name(link)),
            platform.capacity_bytes_s(link),
        )?;
    }
    let clusters = platform.cluster_count() as u32;
    for a in 0..clusters {
        for b in (0..clusters).filter(|&b| b != a) {
            check_latency(
                &format!("platform: latency_s of wan:{a}:{b}"),
                platform.wan_latency_s(ClusterId(a), ClusterId(b)),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use windrose_model::platform::ClusterSpec;

    #[test]
    fn values_outside_their_range_are_named_with_the_range() {
        let e = check_latency("latency_s", 1e300).unwrap_err().to_string();
        assert_eq!(
            e,
            "latency_s = 1e300 is out of range: the delay line holds packets from 0 to 10 s (one way)"
        );
        assert!(check_latency("latency_s", f64::NAN).is_err());
        assert!(check_latency("latency_s", -0.1).is_err());
        check_latency("latency_s", 0.0).unwrap();
        check_latency("latency_s", 10.0).unwrap();
        let e = check_capacity("bytes_s", 1e-3).unwrap_err().to_string();
        assert!(
            e.contains("bytes_s = 0.001") && e.contains("1000 to 1e12"),
            "{e}"
        );
        assert!(check_capacity("bytes_s", 1e13).is_err());
        check_capacity("bytes_s", 1.25e9).unwrap();
        let e = check_period("mayhem.period_s", 1e-9)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("mayhem.period_s = 1e-9 is out of range"),
            "{e}"
        );
        check_period("mayhem.period_s", 0.559).unwrap();
    }

    #[test]
    fn a_platform_is_checked_link_by_link() {
        let p = |lat: f64| {
            Platform::builder()
                .cluster(ClusterSpec::uniform(2, 1.25e7, 1.25e9, 1e-4))
                .cluster(ClusterSpec::uniform(2, 1.25e7, 1.25e9, 1e-4))
                .wan_all(5e6, lat)
                .build()
                .unwrap()
        };
        check_platform(&p(0.01)).unwrap();
        let e = check_platform(&p(1e9)).unwrap_err().to_string();
        assert!(
            e.starts_with("platform: latency_s of wan:0:1 = 1000000000 is out of range"),
            "{e}"
        );
    }
}
