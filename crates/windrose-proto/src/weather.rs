//! The network weather of one node and of its group: what the [`Host`](crate::host::Host)
//! measures on each of its links, forecasts, and shares, and the group's view that a
//! collective's root plans from ([`GroupView`]).
//!
//! # What is measured, and where
//!
//! - **Round trips**, actively: the link prober's pings (on their own lane in the TCP driver),
//!   one NWS [`Forecaster`] per link.
//! - **Bandwidth**, passively, at the sender, from the data the collectives move anyway: the
//!   [`SendMeter`] of a link follows the bytes handed to the transport and the sends that
//!   complete. While bytes are outstanding without a break (a *busy period*), the rate at
//!   which sends complete is the rate the link drains them: the same idea as TCP BBR's delivery
//!   rate. The sender measures, not the receiver, because a receiver cannot tell a slow link
//!   from a sender starved by a slow link upstream (every link below a slow one would read
//!   slow); a starved sender has nothing outstanding, so it takes no sample. The first
//!   completion of a busy period only starts the clock, so the link's latency is not counted
//!   as transfer time. Small messages (below [`WeatherConfig::min_metered_bytes`]) are not
//!   metered: they say little about bandwidth and would cost an event each. What "complete"
//!   means is the driver's: in the simulator the last byte arrived; over TCP the frame was
//!   written into the kernel; in the MPI driver the MPI library's send request completed.
//! - **Buffers between the meter and the link.** Over TCP a write completes when the kernel
//!   took it, so the first bytes of a busy period complete at memory speed until the
//!   sender's socket buffer and the receiver's fill: on loopback one link once read
//!   217,688 MB/s. The driver therefore tells the host how many bytes can sit between a
//!   completed send and the link for each connection ([`Weather::set_buffered`]: our
//!   `SO_SNDBUF` or the kernel's autotuning bound, plus the peer's receive buffer bound), and
//!   the meter discards that many completed bytes at the start of every busy period before it
//!   starts the clock ([`SendMeter`]). Once that many bytes have completed the buffers are
//!   full, and a write completes only when the link has drained as many: from then on the
//!   completions follow the link. An upper bound is the safe side: too large costs samples
//!   (a busy period must be longer than the buffers plus [`WeatherConfig::sample_bytes`]),
//!   too small lets memory speed in. We chose this over acknowledgements from the receiver
//!   because it needs no new message and keeps the sender measuring (see above); the cost is
//!   that a link is measured only by transfers several megabytes long. The driver also feeds
//!   each completion at the time it happened (the writer's clock), not when its loop got to
//!   it: a burst of completions read in one go would otherwise look simultaneous.
//! - **Compute speed**, passively, from the node's own computes: the host times every
//!   `Output::Compute` from its issue (or the end of the node's previous compute) to its
//!   `ComputeDone`, and a forecaster per node follows the bytes per second
//!   ([`Weather::observe_compute`]). Shared with the row; the scatter's root plans from it
//!   ([`crate::scatter_plan`]).
//! - A bandwidth forecast not refreshed for [`WeatherConfig::bandwidth_ttl`] is forgotten: a
//!   link the trees stopped using (because it was slow) must be tried again some day, and an
//!   old figure is no better than the guess. Trying costs a slow collective, so the default is
//!   long (5 minutes): measured in the simulator, a 30 s TTL made a series of broadcasts every
//!   12 s go back to a link ten times slower once every three broadcasts.
//!
//! # Shared with the group
//!
//! Every [`WeatherConfig::gossip`] period the host sends its row (its links' forecasts,
//! [`LinkEntry`]) to every live member as a session message; each host keeps the latest row of
//! every member, with its compute speed forecast. [`GroupView`] joins them: a link's round trip is the mean of its two ends'
//! forecasts (each measured its own pings), its bandwidth the lower of the two ends' (data
//! flows one way; the sender measured it). Links nobody measured take [`Guesses`]: the median
//! of the measured links of the same class (inside a cluster, between clusters), else fixed
//! defaults; a member whose compute nobody measured, the median of the measured members.
//!
//! # One WAN path, many member pairs
//!
//! Between two sites (the group file's clusters) every member pair shares one WAN path, so a
//! step on that path is learnt from the first pair that measures it, not pair by pair (a
//! root would otherwise move its tree to the next pair between the same sites, as slow, up to
//! once per pair). Each shared bandwidth carries its age ([`LinkEntry::mb_s_age_ms`]), so the
//! view knows when every pair was last measured; the pair measured last between two sites is
//! their reference, and an older pair whose figure is more than [`SITE_STEP`] away from it
//! is out of date: it takes the median of the up-to-date pairs between those sites (the site
//! pair's estimate, which unmeasured pairs take too) until it is measured again, when its own
//! figure wins. Readings closer than the factor keep their own figures (pairs differ, and a
//! tree's flows sharing the path read less each). Pairs inside a site share no path and are
//! never carried over. The view is a pure function of the rows and their ages, so the
//! simulator's hosts and the TCP driver's (both through [`Weather::view`]) plan alike.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;
use windrose_model::forecast::{Forecast, ForecastConfig, ForecastError, Forecaster};
use windrose_model::{ClusterId, CostUnit, DenseCostMatrix, NodeId};

/// How a node measures, forecasts and shares its links' weather.
#[derive(Clone, Debug, PartialEq)]
pub struct WeatherConfig {
    /// The forecasters of every series (round trips and bandwidths).
    pub forecast: ForecastConfig,
    /// Bytes a busy period must complete (after its first send) before they make one
    /// bandwidth sample.
    pub sample_bytes: u64,
    /// Sends smaller than this are not metered.
    pub min_metered_bytes: u64,
    /// A bandwidth forecast older than this is forgotten.
    pub bandwidth_ttl: Duration,
    /// Send this node's row to the group this often (None: never). Rides on the host's
    /// heartbeat tick, so it is rounded up to whole heartbeat periods; a host without
    /// heartbeats (the MPI driver's) sends it, when due, to the initiator of each collective
    /// it ends instead (the member that plans).
    pub gossip: Option<Duration>,
    /// What links nobody measured are taken to be when a tree is planned.
    pub guesses: Guesses,
    /// Bytes the transport holds between a completed send and the link, for links the driver
    /// gave no figure of ([`Weather::set_buffered`]); 0 where a completion means arrival (the
    /// simulator).
    pub buffered_bytes: u64,
}

impl Default for WeatherConfig {
    /// 1 MiB samples of messages of 8 KiB and more, forgotten after 5 minutes, no gossip.
    fn default() -> Self {
        WeatherConfig {
            forecast: ForecastConfig::default(),
            sample_bytes: 1 << 20,
            min_metered_bytes: 8 << 10,
            bandwidth_ttl: Duration::from_secs(300),
            gossip: None,
            guesses: Guesses::default(),
            buffered_bytes: 0,
        }
    }
}

impl WeatherConfig {
    /// Checks the values, with the field named.
    pub fn validate(&self) -> Result<(), ForecastError> {
        Forecaster::new(self.forecast.clone())?;
        if self.sample_bytes == 0 {
            return Err(ForecastError::Config {
                field: "sample_bytes",
                reason: "must be positive".into(),
            });
        }
        if self.bandwidth_ttl.is_zero() || self.gossip.is_some_and(|g| g.is_zero()) {
            return Err(ForecastError::Config {
                field: "bandwidth_ttl and gossip",
                reason: "must be positive".into(),
            });
        }
        Ok(())
    }
}

/// The sender's meter of one link: bytes outstanding and the current busy period.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SendMeter {
    outstanding: u64,
    /// Time of the busy period's clock start (or of the last sample), once started.
    window_start: Option<Time>,
    /// Bytes completed since `window_start`.
    window_bytes: u64,
    /// Bytes the transport can hold between a completed send and the link (see the module
    /// docs): discarded at the start of every busy period.
    buffered: u64,
    /// Bytes completed in this busy period before its clock started.
    discarded: u64,
}

impl SendMeter {
    /// A meter for a transport that holds up to `buffered` bytes past a completed send.
    pub fn with_buffer(buffered: u64) -> SendMeter {
        SendMeter {
            buffered,
            ..SendMeter::default()
        }
    }

    /// The transport now holds up to `buffered` bytes past a completed send.
    pub fn set_buffered(&mut self, buffered: u64) {
        self.buffered = buffered;
    }

    /// `bytes` were handed to the transport.
    pub fn sent(&mut self, bytes: u64) {
        self.outstanding += bytes;
    }

    /// A send of `bytes` completed at `now`: returns a rate (bytes per second) when the busy
    /// period has completed `sample_bytes` since its clock started. The clock starts at the
    /// completion that takes the busy period past the buffered bytes (with none buffered: its
    /// first completion, whose bytes also paid the latency).
    pub fn completed(&mut self, now: Time, bytes: u64, sample_bytes: u64) -> Option<f64> {
        self.outstanding = self.outstanding.saturating_sub(bytes);
        let mut sample = None;
        match self.window_start {
            None => {
                self.discarded = self.discarded.saturating_add(bytes);
                if self.discarded > self.buffered {
                    self.window_start = Some(now);
                    self.window_bytes = 0;
                }
            }
            Some(start) => {
                self.window_bytes += bytes;
                let secs = now.saturating_since(start).as_secs_f64();
                if self.window_bytes >= sample_bytes && secs > 0.0 {
                    sample = Some(self.window_bytes as f64 / secs);
                    self.window_start = Some(now);
                    self.window_bytes = 0;
                }
            }
        }
        if self.outstanding == 0 {
            // The link went idle: what follows is a new busy period.
            self.window_start = None;
            self.window_bytes = 0;
            self.discarded = 0;
        }
        sample
    }

    /// The peer is gone: nothing outstanding will complete.
    pub fn reset(&mut self) {
        *self = SendMeter::with_buffer(self.buffered);
    }
}

/// One forecast series of a link: the forecaster and its last sample.
#[derive(Clone, Debug)]
struct Series {
    forecaster: Forecaster,
    last: Option<f64>,
    /// When the last sample came.
    at: Time,
}

impl Series {
    fn observe(&mut self, now: Time, value: f64) -> Option<Forecast> {
        self.forecaster.observe(value).ok()?;
        self.last = Some(value);
        self.at = now;
        self.forecaster.forecast()
    }
}

#[derive(Clone, Debug)]
struct Link {
    rtt: Series,
    bandwidth: Series,
    meter: SendMeter,
}

/// One link as a member shares it: its forecasts, in the units users read.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkEntry {
    /// The other end.
    pub peer: NodeId,
    /// Round-trip forecast, milliseconds, and its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<(f64, f64)>,
    /// Bandwidth forecast from this end's sends, MB/s (10^6 bytes), and its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mb_s: Option<(f64, f64)>,
    /// How long before the row was made the bandwidth's last sample came, ms: lets the view
    /// tell which of two links between the same sites was measured last (absent from older
    /// versions' rows: taken as fresh when the row arrives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mb_s_age_ms: Option<f64>,
}

/// What the host knows of one link's weather.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkWeather {
    /// The other end.
    pub peer: NodeId,
    /// Round trips measured so far.
    pub samples: usize,
    /// The last one, in milliseconds.
    pub last_ms: Option<f64>,
    /// The forecast of the next one (milliseconds) and its error estimate.
    pub forecast: Option<Forecast>,
    /// Change points detected in the round trips (the forecasters restarted from a new level).
    pub resets: usize,
    /// Bandwidth samples so far (from this node's sends).
    #[serde(default)]
    pub bandwidth_samples: usize,
    /// The last one, MB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_mb_s: Option<f64>,
    /// The bandwidth forecast (MB/s) and its error, while not older than the TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Forecast>,
}

/// A node's weather service: its links' series and meters, its compute speed, and the rows
/// the group shared.
#[derive(Clone, Debug)]
pub struct Weather {
    me: NodeId,
    config: WeatherConfig,
    fresh: Forecaster,
    links: BTreeMap<NodeId, Link>,
    rows: BTreeMap<NodeId, (Time, Vec<LinkEntry>)>,
    last_gossip: Option<Time>,
    /// This node's compute speed, MB/s.
    compute: Series,
    /// The compute speeds (forecast, error; MB/s) the members shared.
    computes: BTreeMap<NodeId, (f64, f64)>,
    /// Per link, the driver's figure of the bytes its transport buffers.
    buffered: BTreeMap<NodeId, u64>,
    /// Moves whenever something the view is made of changed (a forecast, a row, a compute
    /// speed): see [`Weather::generation`].
    generation: u64,
}

/// One member's shared weather: its links' forecasts and its compute speed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// Its links.
    pub links: Vec<LinkEntry>,
    /// Its compute speed forecast, MB/s, and the forecast's error.
    pub compute_mb_s: Option<(f64, f64)>,
}

impl Weather {
    /// The service of `me`. Errors name the bad field of `config`.
    pub fn new(me: NodeId, config: WeatherConfig) -> Result<Weather, ForecastError> {
        config.validate()?;
        let fresh = Forecaster::new(config.forecast.clone())?;
        Ok(Weather {
            me,
            config,
            compute: Series {
                forecaster: fresh.clone(),
                last: None,
                at: Time::ZERO,
            },
            fresh,
            links: BTreeMap::new(),
            rows: BTreeMap::new(),
            last_gossip: None,
            computes: BTreeMap::new(),
            buffered: BTreeMap::new(),
            generation: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &WeatherConfig {
        &self.config
    }

    /// A counter that moves whenever a forecast, a shared row or a compute speed changed:
    /// [`Weather::view`] at two instants with the same generation is the same view, unless
    /// one of this node's bandwidth forecasts aged past the TTL in between
    /// ([`Weather::expires_between`]). Lets a caller keep a view instead of rebuilding it
    /// (O(members^2)) on every send completion.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True when one of this node's bandwidth forecasts is fresh at `from` and older than
    /// the TTL at `to` (so the view at `to` lacks it).
    pub fn expires_between(&self, from: Time, to: Time) -> bool {
        let ttl = self.config.bandwidth_ttl;
        let fresh = |t: Time, at: Time| t.saturating_since(at) < ttl;
        self.links.values().any(|l| {
            let at = l.bandwidth.at;
            l.bandwidth.last.is_some() && fresh(from, at) && !fresh(to, at)
        })
    }

    fn link(&mut self, peer: NodeId) -> &mut Link {
        let fresh = &self.fresh;
        let buffered = self
            .buffered
            .get(&peer)
            .copied()
            .unwrap_or(self.config.buffered_bytes);
        self.links.entry(peer).or_insert_with(|| Link {
            rtt: Series {
                forecaster: fresh.clone(),
                last: None,
                at: Time::ZERO,
            },
            bandwidth: Series {
                forecaster: fresh.clone(),
                last: None,
                at: Time::ZERO,
            },
            meter: SendMeter::with_buffer(buffered),
        })
    }

    /// The transport to `peer` holds up to `bytes` between a completed send and the link (the
    /// driver's figure for its connection; see the module docs).
    pub fn set_buffered(&mut self, peer: NodeId, bytes: u64) {
        self.buffered.insert(peer, bytes);
        self.link(peer).meter.set_buffered(bytes);
    }

    /// This node computed `bytes` in `elapsed`: the new forecast of its compute speed (MB/s).
    /// Computes of fewer than [`WeatherConfig::sample_bytes`], or that took no time (an
    /// instant compute model), say nothing of the speed: a small share's time is mostly the
    /// fixed cost of handing it to the application (on loopback, shares of a few hundred
    /// kilobytes read 5 MB/s on a 1300 MB/s machine, and the next plan starved the member).
    pub fn observe_compute(
        &mut self,
        now: Time,
        bytes: u64,
        elapsed: Duration,
    ) -> Option<Forecast> {
        if bytes < self.config.sample_bytes || elapsed.is_zero() {
            return None;
        }
        let mb_s = bytes as f64 / elapsed.as_secs_f64() / 1e6;
        self.generation += 1;
        self.compute.observe(now, mb_s)
    }

    /// This node's compute speed forecast (MB/s) and its error, once measured.
    pub fn compute(&self) -> Option<Forecast> {
        self.compute.last.and(self.compute.forecaster.forecast())
    }

    /// A round trip to `peer` was measured: its new forecast (ms).
    pub fn observe_rtt(&mut self, now: Time, peer: NodeId, rtt: Duration) -> Option<Forecast> {
        let ms = rtt.as_secs_f64() * 1e3;
        self.generation += 1;
        self.link(peer).rtt.observe(now, ms)
    }

    /// True when a send of `bytes` is worth metering.
    pub fn meters(&self, bytes: u64) -> bool {
        bytes >= self.config.min_metered_bytes
    }

    /// A metered send of `bytes` to `peer` was handed to the transport.
    pub fn sent(&mut self, peer: NodeId, bytes: u64) {
        self.link(peer).meter.sent(bytes);
    }

    /// A metered send completed: the new bandwidth forecast (MB/s) when it made a sample.
    pub fn completed(&mut self, now: Time, peer: NodeId, bytes: u64) -> Option<Forecast> {
        let sample_bytes = self.config.sample_bytes;
        let link = self.link(peer);
        let rate = link.meter.completed(now, bytes, sample_bytes)?;
        let forecast = link.bandwidth.observe(now, rate / 1e6);
        self.generation += 1;
        forecast
    }

    /// This node's own bandwidth forecast of its link to `peer` (MB/s, from its sends), while
    /// not older than the TTL: what a running broadcast compares a child's pace with.
    pub fn sent_mb_s(&self, now: Time, peer: NodeId) -> Option<f64> {
        let l = self.links.get(&peer)?;
        self.bandwidth_of(now, l).map(|f| f.value)
    }

    /// A step of the link to `peer` found by a collective from its own sends (a running
    /// broadcast whose child's rate fell [`SLOWED_BY`](crate::tree_broadcast::SLOWED_BY)
    /// below this node's forecast): the link's bandwidth series restarts at `mb_s` (MB/s),
    /// which is the new forecast.
    ///
    /// Restarted, not fed as one more sample: the forecaster's own change-point rule wants
    /// two samples out of band in a row, and a broadcast that leaves the link after its first
    /// slow sample never gives a second. Fed as one sample, 0.47 MB/s after a run at 5 moved
    /// the forecast only to 4.08 (issue 16's series at 16 MiB): within [`SITE_STEP`] of the
    /// site pair's other figures, so the next plan took another pair between the same sites,
    /// as slow, for 34.4 s.
    pub fn observe_bandwidth(&mut self, now: Time, peer: NodeId, mb_s: f64) -> Option<Forecast> {
        if !(mb_s.is_finite() && mb_s > 0.0) {
            return None;
        }
        self.generation += 1;
        let fresh = self.fresh.clone();
        let series = &mut self.link(peer).bandwidth;
        series.forecaster = fresh;
        series.observe(now, mb_s)
    }

    /// `peer` is gone: its sends will not complete.
    pub fn peer_lost(&mut self, peer: NodeId) {
        if let Some(l) = self.links.get_mut(&peer) {
            l.meter.reset();
        }
    }

    fn bandwidth_of(&self, now: Time, l: &Link) -> Option<Forecast> {
        let fresh = l.bandwidth.last.is_some()
            && now.saturating_since(l.bandwidth.at) < self.config.bandwidth_ttl;
        if fresh {
            l.bandwidth.forecaster.forecast()
        } else {
            None
        }
    }

    /// Every link measured so far, by peer.
    pub fn links(&self, now: Time) -> Vec<LinkWeather> {
        self.links
            .iter()
            .map(|(&peer, l)| LinkWeather {
                peer,
                samples: l.rtt.forecaster.observed(),
                last_ms: l.rtt.last,
                forecast: l.rtt.forecaster.forecast(),
                resets: l.rtt.forecaster.resets(),
                bandwidth_samples: l.bandwidth.forecaster.observed(),
                last_mb_s: l.bandwidth.last,
                bandwidth: self.bandwidth_of(now, l),
            })
            .collect()
    }

    /// This node's row, as it is shared.
    pub fn row(&self, now: Time) -> Vec<LinkEntry> {
        self.links
            .iter()
            .map(|(&peer, l)| {
                let mb_s = self.bandwidth_of(now, l).map(|f| (f.value, f.error));
                LinkEntry {
                    peer,
                    rtt_ms: l.rtt.forecaster.forecast().map(|f| (f.value, f.error)),
                    mb_s,
                    mb_s_age_ms: mb_s
                        .map(|_| now.saturating_since(l.bandwidth.at).as_secs_f64() * 1e3),
                }
            })
            .filter(|e| e.rtt_ms.is_some() || e.mb_s.is_some())
            .collect()
    }

    /// The row to gossip now, if the period has come and there is something to say.
    pub fn gossip_due(&mut self, now: Time) -> Option<Row> {
        let period = self.config.gossip?;
        if self
            .last_gossip
            .is_some_and(|t| now.saturating_since(t) < period)
        {
            return None;
        }
        let row = Row {
            links: self.row(now),
            compute_mb_s: self.compute().map(|f| (f.value, f.error)),
        };
        if row.links.is_empty() && row.compute_mb_s.is_none() {
            return None;
        }
        self.last_gossip = Some(now);
        Some(row)
    }

    /// A member's compute speed arrived with its row: kept and returned, unless it is not a
    /// positive finite number with a finite non-negative error (then dropped).
    pub fn take_compute(
        &mut self,
        from: NodeId,
        compute_mb_s: Option<(f64, f64)>,
    ) -> Option<(f64, f64)> {
        let (v, e) = compute_mb_s?;
        if !(v.is_finite() && v > 0.0 && e.is_finite() && e >= 0.0) {
            return None;
        }
        self.computes.insert(from, (v, e));
        self.generation += 1;
        Some((v, e))
    }

    /// A member's row arrived. Entries that are not finite and non-negative are dropped (a
    /// buggy or hostile member cannot poison the view with NaN).
    pub fn take_row(&mut self, now: Time, from: NodeId, mut row: Vec<LinkEntry>) {
        let ok = |v: Option<(f64, f64)>| {
            v.is_none_or(|(x, e)| x.is_finite() && x >= 0.0 && e.is_finite() && e >= 0.0)
        };
        let age_ok = |a: Option<f64>| a.is_none_or(|a| a.is_finite() && a >= 0.0);
        row.retain(|e| e.peer != from && ok(e.rtt_ms) && ok(e.mb_s) && age_ok(e.mb_s_age_ms));
        self.rows.insert(from, (now, row));
        self.generation += 1;
    }

    /// The group's view: this node's own row and every row shared with it, over `members`.
    pub fn view(&self, now: Time, members: &[(NodeId, ClusterId)]) -> GroupView {
        let n = members
            .iter()
            .map(|(m, _)| m.index() + 1)
            .max()
            .unwrap_or(0);
        let mut view = GroupView {
            n,
            clusters: vec![None; n],
            rtt: vec![Vec::new(); n * n],
            mb_s: vec![Vec::new(); n * n],
            compute_mb_s: vec![None; n],
        };
        for &(m, c) in members {
            view.clusters[m.index()] = Some(c);
        }
        let own = self.compute().map(|f| (self.me, f.value));
        for (m, v) in self.computes.iter().map(|(m, (v, _))| (*m, *v)).chain(own) {
            if m.index() < n {
                view.compute_mb_s[m.index()] = Some(v);
            }
        }
        let own = self.row(now);
        let rows = std::iter::once((self.me, now, &own))
            .chain(self.rows.iter().map(|(f, (at, r))| (*f, *at, r)));
        for (from, received, row) in rows {
            for e in row {
                if from.index() >= n || e.peer.index() >= n {
                    continue;
                }
                let (a, b) = (from.index(), e.peer.index());
                let (lo, hi) = (a.min(b), a.max(b));
                if let Some((v, _)) = e.rtt_ms {
                    view.rtt[lo * n + hi].push(v);
                }
                if let Some((v, _)) = e.mb_s {
                    // This node's own samples at their exact time (so the view does not move
                    // with `now` by a rounding: see [`Weather::generation`]); a shared one in
                    // nanoseconds, so a fractional age is not rounded to a later time.
                    let own = (from == self.me)
                        .then(|| self.links.get(&e.peer).map(|l| l.bandwidth.at))
                        .flatten();
                    let at = own.unwrap_or_else(|| {
                        let age = e.mb_s_age_ms.map_or(0, |a| (a * 1e6) as u64);
                        Time::from_nanos(received.as_nanos().saturating_sub(age))
                    });
                    view.mb_s[lo * n + hi].push((v, at));
                }
            }
        }
        view
    }
}

/// What a link nobody measured is taken to be.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Guesses {
    /// Round trip inside a cluster, ms.
    pub intra_rtt_ms: f64,
    /// Round trip between clusters, ms.
    pub inter_rtt_ms: f64,
    /// Bandwidth inside a cluster, MB/s.
    pub intra_mb_s: f64,
    /// Bandwidth between clusters, MB/s.
    pub inter_mb_s: f64,
    /// Compute speed of a member, MB/s (the default application's BLAKE3 on one core).
    #[serde(default = "default_compute_mb_s")]
    pub compute_mb_s: f64,
}

fn default_compute_mb_s() -> f64 {
    1000.0
}

impl Default for Guesses {
    /// 0.2 ms and 117 MB/s (a gigabit LAN) inside a cluster; 20 ms and 10 MB/s between;
    /// members compute 1000 MB/s.
    fn default() -> Self {
        Guesses {
            intra_rtt_ms: 0.2,
            inter_rtt_ms: 20.0,
            intra_mb_s: 117.0,
            inter_mb_s: 10.0,
            compute_mb_s: default_compute_mb_s(),
        }
    }
}

/// The group's links as one node knows them: the forecasts of both ends of every link.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupView {
    n: usize,
    clusters: Vec<Option<ClusterId>>,
    /// Per unordered pair (lo * n + hi): the round-trip forecasts of its ends.
    rtt: Vec<Vec<f64>>,
    /// Per unordered pair: the bandwidth forecasts of its ends, with when their last samples
    /// came (on this node's clock).
    mb_s: Vec<Vec<(f64, Time)>>,
    /// Per member: its compute speed forecast, MB/s.
    compute_mb_s: Vec<Option<f64>>,
}

/// The median of `v` (the mean of the middle two for an even count), None when empty.
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

impl GroupView {
    fn pair(&self, a: NodeId, b: NodeId) -> Option<usize> {
        let (a, b) = (a.index(), b.index());
        (a < self.n && b < self.n && a != b).then(|| a.min(b) * self.n + a.max(b))
    }

    /// The link's round trip (ms): the mean of its ends' forecasts, if any end measured it.
    pub fn rtt_ms(&self, a: NodeId, b: NodeId) -> Option<f64> {
        let v = &self.rtt[self.pair(a, b)?];
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The link's bandwidth (MB/s): the lower of its ends' forecasts, if any end sent on it.
    pub fn mb_s(&self, a: NodeId, b: NodeId) -> Option<f64> {
        self.mb_s_at(a, b).map(|(v, _)| v)
    }

    /// [`GroupView::mb_s`] and when the newer of its ends' last samples came.
    pub fn mb_s_at(&self, a: NodeId, b: NodeId) -> Option<(f64, Time)> {
        self.mb_s[self.pair(a, b)?]
            .iter()
            .copied()
            .reduce(|(v, t), (w, u)| (v.min(w), t.max(u)))
    }

    /// The member's compute speed (MB/s), as it measured it.
    pub fn compute_mb_s(&self, node: NodeId) -> Option<f64> {
        self.compute_mb_s.get(node.index()).copied().flatten()
    }

    fn same_cluster(&self, a: usize, b: usize) -> bool {
        self.clusters[a].is_some() && self.clusters[a] == self.clusters[b]
    }

    /// The guesses for unmeasured links: the median of the measured links of each class,
    /// falling back to `defaults` for a class with none.
    pub fn guesses(&self, defaults: Guesses) -> Guesses {
        let (mut ir, mut xr, mut ib, mut xb) = (vec![], vec![], vec![], vec![]);
        for a in 0..self.n {
            for b in a + 1..self.n {
                let (na, nb) = (NodeId(a as u32), NodeId(b as u32));
                let intra = self.same_cluster(a, b);
                if let Some(r) = self.rtt_ms(na, nb) {
                    if intra {
                        ir.push(r)
                    } else {
                        xr.push(r)
                    }
                }
                if let Some(w) = self.mb_s(na, nb) {
                    if intra {
                        ib.push(w)
                    } else {
                        xb.push(w)
                    }
                }
            }
        }
        Guesses {
            intra_rtt_ms: median(ir).unwrap_or(defaults.intra_rtt_ms),
            inter_rtt_ms: median(xr).unwrap_or(defaults.inter_rtt_ms),
            intra_mb_s: median(ib).unwrap_or(defaults.intra_mb_s),
            inter_mb_s: median(xb).unwrap_or(defaults.inter_mb_s),
            compute_mb_s: median(self.compute_mb_s.iter().flatten().copied().collect())
                .unwrap_or(defaults.compute_mb_s),
        }
    }

    /// Per pair of clusters (lo, hi): what the measured links between them say of the links
    /// nobody measured, and which measurements are out of date ([`Site`]).
    fn sites(&self) -> BTreeMap<(ClusterId, ClusterId), Site> {
        type Acc = (Vec<f64>, Vec<(f64, Time)>);
        let mut acc: BTreeMap<(ClusterId, ClusterId), Acc> = BTreeMap::new();
        for a in 0..self.n {
            for b in a + 1..self.n {
                let (Some(ca), Some(cb)) = (self.clusters[a], self.clusters[b]) else {
                    continue;
                };
                let (na, nb) = (NodeId(a as u32), NodeId(b as u32));
                let e = acc.entry((ca.min(cb), ca.max(cb))).or_default();
                if let Some(r) = self.rtt_ms(na, nb) {
                    e.0.push(r);
                }
                if let Some(w) = self.mb_s_at(na, nb) {
                    e.1.push(w);
                }
            }
        }
        acc.into_iter()
            .map(|((ca, cb), (r, w))| {
                // Inside a cluster the pairs share no one path: no step is carried over.
                let newest = (ca != cb)
                    .then(|| {
                        w.iter().copied().reduce(|x, y| match y.1.cmp(&x.1) {
                            std::cmp::Ordering::Greater => y,
                            std::cmp::Ordering::Less => x,
                            // Two samples at one instant: the slower is the safer plan.
                            std::cmp::Ordering::Equal => {
                                if y.0 < x.0 {
                                    y
                                } else {
                                    x
                                }
                            }
                        })
                    })
                    .flatten();
                let site = Site {
                    rtt_ms: median(r),
                    mb_s: None,
                    newest,
                };
                let current = w
                    .iter()
                    .filter(|&&(v, t)| !site.supersedes(v, t))
                    .map(|&(v, _)| v)
                    .collect();
                let mb_s = median(current);
                ((ca, cb), Site { mb_s, ..site })
            })
            .collect()
    }

    /// Every link's round trip and bandwidth as a root plans with them: a link nobody
    /// measured takes the median of the measured links between the same two clusters (or
    /// inside the same one), else [`GroupView::guesses`] of `defaults` (for the bandwidth
    /// between clusters: `defaults` itself).
    pub fn links(&self, defaults: Guesses) -> LinkTable {
        let est = self.estimator(defaults);
        LinkTable::from_fn(self.clusters.clone(), |a, b| {
            let (na, nb) = (NodeId(a as u32), NodeId(b as u32));
            (est.rtt_ms(na, nb), est.mb_s(na, nb).0)
        })
    }

    /// [`LinkTable::transfer_costs`] of [`GroupView::links`].
    pub fn transfer_costs(&self, bytes: u64, segment: u64, defaults: Guesses) -> DenseCostMatrix {
        self.links(defaults).transfer_costs(bytes, segment)
    }
}

/// Every link of a group with a round trip and a bandwidth (measured, forecast or guessed):
/// what a root plans from ([`GroupView::links`]; the simulator builds one from its platform).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkTable {
    n: usize,
    clusters: Vec<Option<ClusterId>>,
    /// Per unordered pair (lo * n + hi): (round trip ms, MB/s).
    links: Vec<(f64, f64)>,
}

impl LinkTable {
    /// The table of `clusters.len()` nodes (None: not a member) whose link between `a < b`
    /// is `link(a, b)` = (round trip ms, MB/s).
    pub fn from_fn(
        clusters: Vec<Option<ClusterId>>,
        mut link: impl FnMut(usize, usize) -> (f64, f64),
    ) -> LinkTable {
        let n = clusters.len();
        let mut links = vec![(0.0, f64::INFINITY); n * n];
        for a in 0..n {
            for b in a + 1..n {
                links[a * n + b] = link(a, b);
            }
        }
        LinkTable { n, clusters, links }
    }

    /// Size of the per-node tables (largest member id + 1).
    pub fn node_count(&self) -> usize {
        self.n
    }

    /// The cluster of node `a` (None: not a member).
    pub fn cluster(&self, a: NodeId) -> Option<ClusterId> {
        self.clusters.get(a.index()).copied().flatten()
    }

    /// The link between `a` and `b`: (round trip ms, MB/s); (0, infinite) from a node to
    /// itself.
    pub fn link(&self, a: NodeId, b: NodeId) -> (f64, f64) {
        let (a, b) = (a.index(), b.index());
        self.links[a.min(b) * self.n + a.max(b)]
    }

    /// What a broadcast of `bytes` over these links is bound by: bandwidth when moving the
    /// bytes over the median link between sites (the median link, with one site) takes
    /// longer than its one-way latency (the alpha-beta model's crossover), else latency.
    pub fn bound(&self, bytes: u64) -> crate::planner::Bound {
        let (mut inter, mut all) = (Vec::new(), Vec::new());
        for a in 0..self.n {
            for b in a + 1..self.n {
                let (ca, cb) = (self.clusters[a], self.clusters[b]);
                if ca.is_none() || cb.is_none() {
                    continue;
                }
                let (rtt, mb_s) = self.links[a * self.n + b];
                let l = (bytes as f64 / (mb_s * 1e3), rtt / 2.0);
                all.push(l);
                if ca != cb {
                    inter.push(l);
                }
            }
        }
        let links = if inter.is_empty() { all } else { inter };
        let ms = median(links.iter().map(|l| l.0).collect()).unwrap_or(0.0);
        let latency = median(links.iter().map(|l| l.1).collect()).unwrap_or(0.0);
        if ms > latency {
            crate::planner::Bound::Bandwidth
        } else {
            crate::planner::Bound::Latency
        }
    }

    /// The time `bytes` take at each link's bandwidth, in ms, as a symmetric matrix: what one
    /// more copy crossing the same path adds to a link's cost in the planner's sharing-aware
    /// swaps ([`PlanRequest::bytes_ms`](crate::planner::PlanRequest::bytes_ms)), since `k`
    /// copies at once each get a `k`-th of the bandwidth.
    pub fn bytes_ms(&self, bytes: u64) -> DenseCostMatrix {
        let n = self.n;
        DenseCostMatrix::from_fn(CostUnit::LatencyMs, n, |a, b| {
            bytes as f64 / (self.links[a * n + b].1 * 1e3)
        })
    }

    /// What each link adds to a pipelined broadcast of `bytes` in segments of `segment`
    /// bytes, in ms, as a symmetric cost matrix: its one-way latency (half the round trip),
    /// one segment at its bandwidth (filling the pipeline), and the rest of the bytes at its
    /// bandwidth *beyond what the fastest link would take* (`(bytes - segment) * (1/bw -
    /// 1/bw_max)`). A pipelined hop on a fast link costs little more than its latency, while a
    /// narrow link holds up everything below it: summed along a root-to-leaf path (a tree's
    /// cost), this ranks trees by their slow and narrow links without charging every hop the
    /// whole message (store and forward), which made deep trees look far worse than they run.
    pub fn transfer_costs(&self, bytes: u64, segment: u64) -> DenseCostMatrix {
        let n = self.n;
        let fastest = self
            .links
            .iter()
            .enumerate()
            .filter(|(i, _)| i / n < i % n)
            .map(|(_, l)| l.1)
            .fold(1e-6f64, f64::max);
        let segment = segment.min(bytes) as f64;
        let rest = bytes as f64 - segment;
        DenseCostMatrix::from_fn(CostUnit::LatencyMs, n, |a, b| {
            let (rtt, mb_s) = self.links[a * n + b];
            let excess = (1.0 / mb_s - 1.0 / fastest).max(0.0);
            rtt / 2.0 + (segment / mb_s + rest * excess) / 1e3
        })
    }
}

/// Where a figure of the view comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// A forecast from measurements (of the link itself, or of the member).
    Measured,
    /// A guess: the median of measured links between the same sites (or members), else the
    /// configured default.
    Guessed,
    /// Given by the caller.
    Given,
}

/// Figures for every link and member of a view, measured or guessed once per plan: see
/// [`GroupView::estimator`].
#[derive(Clone, Debug)]
pub struct Estimator<'a> {
    view: Cow<'a, GroupView>,
    defaults: Guesses,
    guesses: Guesses,
    sites: BTreeMap<(ClusterId, ClusterId), Site>,
}

/// A bandwidth measured between two sites that differs from the newest measurement between
/// the same two sites by more than this factor (either way) is out of date: the sites' WAN
/// path changed since, and the newest stands for every pair between them until the pair is
/// measured again. Above the factor by which a tree's own flows sharing one WAN path (two or
/// three of them) lower each other's readings, so sharing alone carries nothing over; below
/// the steps worth planning around (issue 16's series: 5 to 0.5 MB/s).
pub const SITE_STEP: f64 = 3.0;

/// What the measured links between one pair of sites (or inside one site) say.
#[derive(Copy, Clone, Debug, Default)]
struct Site {
    /// The median round trip of the measured links.
    rtt_ms: Option<f64>,
    /// The median bandwidth of the measured links that are not out of date.
    mb_s: Option<f64>,
    /// Between two sites: the bandwidth measured last, and when.
    newest: Option<(f64, Time)>,
}

impl Site {
    /// True when a pair's bandwidth `v` last sampled at `t` is out of date ([`SITE_STEP`]).
    fn supersedes(&self, v: f64, t: Time) -> bool {
        self.newest
            .is_some_and(|(w, at)| at > t && v.max(w) > SITE_STEP * v.min(w).max(f64::MIN_POSITIVE))
    }
}

impl GroupView {
    /// What every link and member is taken to be, from [`GroupView::guesses`] of `defaults`
    /// and the sites' medians.
    pub fn estimator(&self, defaults: Guesses) -> Estimator<'_> {
        Estimator {
            view: Cow::Borrowed(self),
            defaults,
            guesses: self.guesses(defaults),
            sites: self.sites(),
        }
    }

    /// [`GroupView::estimator`] that owns the view: one a caller can keep across calls.
    pub fn into_estimator(self, defaults: Guesses) -> Estimator<'static> {
        Estimator {
            guesses: self.guesses(defaults),
            sites: self.sites(),
            defaults,
            view: Cow::Owned(self),
        }
    }
}

impl Estimator<'_> {
    fn site(&self, a: NodeId, b: NodeId) -> Site {
        let v = &self.view;
        let c = |x: NodeId| v.clusters.get(x.index()).copied().flatten();
        match (c(a), c(b)) {
            (Some(ca), Some(cb)) => self
                .sites
                .get(&(ca.min(cb), ca.max(cb)))
                .copied()
                .unwrap_or_default(),
            _ => Site::default(),
        }
    }

    fn intra(&self, a: NodeId, b: NodeId) -> bool {
        a.index() < self.view.n
            && b.index() < self.view.n
            && self.view.same_cluster(a.index(), b.index())
    }

    /// The link's round trip, ms: measured, else its sites' median, else the class's guess.
    pub fn rtt_ms(&self, a: NodeId, b: NodeId) -> f64 {
        let g = &self.guesses;
        self.view
            .rtt_ms(a, b)
            .or(self.site(a, b).rtt_ms)
            .unwrap_or(if self.intra(a, b) {
                g.intra_rtt_ms
            } else {
                g.inter_rtt_ms
            })
    }

    /// The link's bandwidth, MB/s (at least 1e-6), and whether it was measured: its own
    /// forecast, unless a newer measurement between the same two sites moved past
    /// [`SITE_STEP`] from it (a WAN path's step is learnt for every pair it carries from the
    /// first pair that measures it; the pair's own figure wins again once measured after
    /// it); else the median of the up-to-date measured links between the same sites (or
    /// inside the same one).
    pub fn mb_s(&self, a: NodeId, b: NodeId) -> (f64, Basis) {
        let site = self.site(a, b);
        if let Some((v, t)) = self.view.mb_s_at(a, b) {
            match site.mb_s {
                Some(s) if site.supersedes(v, t) => return (s.max(1e-6), Basis::Guessed),
                _ => return (v.max(1e-6), Basis::Measured),
            }
        }
        // Bandwidth unknown between two sites nobody measured: the configured default, not
        // the median of other sites' links, so a path nobody has tried looks as good as a
        // fresh one and gets tried (one slow site pair must not make every untried pair look
        // slow).
        let v = site.mb_s.unwrap_or(if self.intra(a, b) {
            self.guesses.intra_mb_s
        } else {
            self.defaults.inter_mb_s
        });
        (v.max(1e-6), Basis::Guessed)
    }

    /// The member's compute speed, MB/s, and whether it was measured (else the median of the
    /// measured members, else the default).
    pub fn compute_mb_s(&self, node: NodeId) -> (f64, Basis) {
        match self.view.compute_mb_s(node) {
            Some(v) => (v, Basis::Measured),
            None => (self.guesses.compute_mb_s, Basis::Guessed),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The sites' bandwidth estimate: a step measured on one pair between two sites moves
    //! every pair between them, and nothing else.
    use super::*;
    use windrose_model::LinkCosts;

    /// Clusters 0 {0, 1}, 1 {2, 3}, 2 {4, 5}.
    fn members() -> Vec<(NodeId, ClusterId)> {
        (0..6).map(|i| (NodeId(i), ClusterId(i / 2))).collect()
    }

    fn secs(s: u64) -> Time {
        Time::from_millis(1000 * s)
    }

    /// Node 9's service (no links of its own) with `rows`: (when received, from, [(peer,
    /// MB/s, age ms)]).
    /// A row's bandwidths: (peer, MB/s, age ms).
    type Links<'a> = &'a [(u32, f64, f64)];

    fn view(rows: &[(u64, u32, Links)], now: u64) -> GroupView {
        let mut w = Weather::new(NodeId(9), WeatherConfig::default()).unwrap();
        for &(at, from, links) in rows {
            let row = links
                .iter()
                .map(|&(peer, v, age)| LinkEntry {
                    peer: NodeId(peer),
                    rtt_ms: None,
                    mb_s: Some((v, 0.0)),
                    mb_s_age_ms: Some(age),
                })
                .collect();
            w.take_row(secs(at), NodeId(from), row);
        }
        w.view(secs(now), &members())
    }

    fn bw(v: &GroupView, a: u32, b: u32) -> (f64, Basis) {
        v.estimator(Guesses::default()).mb_s(NodeId(a), NodeId(b))
    }

    /// Every pair between clusters 0 and 1 measured at 5 MB/s at 1 s (rows of 0 and 1), the
    /// pair 0 - 4 at 3 MB/s and 0 - 1 at 100 MB/s.
    const BEFORE: [(u32, f64, f64); 4] =
        [(2, 5.0, 0.0), (3, 5.0, 0.0), (4, 3.0, 0.0), (1, 100.0, 0.0)];
    const BEFORE_1: [(u32, f64, f64); 2] = [(2, 5.0, 0.0), (3, 5.0, 0.0)];

    #[test]
    fn a_step_on_one_pair_moves_every_pair_between_the_same_two_sites() {
        // At 10 s, member 2 reports 0 - 2 at 0.5 MB/s, sampled 1 s before.
        let v = view(
            &[
                (1, 0, &BEFORE),
                (1, 1, &BEFORE_1),
                (10, 2, &[(0, 0.5, 1000.0)]),
            ],
            11,
        );
        assert_eq!(bw(&v, 0, 2), (0.5, Basis::Measured));
        for (a, b) in [(0, 3), (1, 2), (1, 3)] {
            assert_eq!(bw(&v, a, b), (0.5, Basis::Guessed), "{a} - {b}");
        }
        // Another site pair and the pairs inside a site are untouched.
        assert_eq!(bw(&v, 0, 4), (3.0, Basis::Measured));
        assert_eq!(bw(&v, 0, 1), (100.0, Basis::Measured));
        // Untried pairs between sites 1 and 2 keep the default: nobody measured that path.
        assert_eq!(bw(&v, 2, 4).0, Guesses::default().inter_mb_s);
        // And the plan's costs follow: every 0 - 1 site pair now costs the same.
        let c = v.transfer_costs(4 << 20, 256 << 10, Guesses::default());
        let slow = c.cost(NodeId(0), NodeId(2));
        for (a, b) in [(0, 3), (1, 2), (1, 3)] {
            assert_eq!(c.cost(NodeId(a), NodeId(b)), slow);
        }
    }

    #[test]
    fn a_step_a_broadcast_found_is_the_forecast_at_once_and_moves_its_site_pair() {
        // Node 0 (site 0) measured its link to 2 (site 1) at 5 MB/s, twenty samples of 1 MiB;
        // node 1 shared 1 - 3 at 5 MB/s.
        let mut w = Weather::new(NodeId(0), WeatherConfig::default()).unwrap();
        let mib = 1u64 << 20;
        w.sent(NodeId(2), 21 * mib);
        let mut last = None;
        for k in 0..=20u64 {
            last = w.completed(Time::from_nanos(k * 209_715_200), NodeId(2), mib);
        }
        assert!((last.unwrap().value - 5.0).abs() < 1e-9, "{last:?}");
        w.take_row(secs(4), NodeId(1), vec![entry(3, 5.0, 0.0)]);
        // At 10 s a running broadcast finds 0 - 2 at 0.5 MB/s and leaves it.
        let g = w.generation();
        let fc = w.observe_bandwidth(secs(10), NodeId(2), 0.5).unwrap();
        assert!(w.generation() > g);
        // One sample is the forecast: the next plan must not take the link at ~4 MB/s.
        assert_eq!(fc.value, 0.5);
        assert_eq!(w.sent_mb_s(secs(10), NodeId(2)), Some(0.5));
        // And every pair between sites 0 and 1 follows it, 1 - 3's older 5 MB/s too.
        let v = w.view(secs(11), &members());
        for (a, b) in [(0, 2), (0, 3), (1, 2), (1, 3)] {
            assert_eq!(bw(&v, a, b).0, 0.5, "{a} - {b}");
        }
        // A sample that is no number changes nothing.
        assert_eq!(w.observe_bandwidth(secs(12), NodeId(2), f64::NAN), None);
        assert_eq!(w.sent_mb_s(secs(12), NodeId(2)), Some(0.5));
    }

    fn entry(peer: u32, mb_s: f64, age_ms: f64) -> LinkEntry {
        LinkEntry {
            peer: NodeId(peer),
            rtt_ms: None,
            mb_s: Some((mb_s, 0.0)),
            mb_s_age_ms: Some(age_ms),
        }
    }

    #[test]
    fn the_view_moves_only_with_the_generation_or_a_forecast_past_its_ttl() {
        let mut w = Weather::new(NodeId(0), WeatherConfig::default()).unwrap();
        let g0 = w.generation();
        w.observe_bandwidth(secs(1), NodeId(2), 5.0).unwrap();
        w.take_row(secs(2), NodeId(1), vec![entry(3, 4.0, 500.0)]);
        let g = w.generation();
        assert!(g > g0);
        // Same generation, no TTL crossed: the same view at any later instant.
        let ttl = w.config().bandwidth_ttl;
        let v = w.view(secs(3), &members());
        let later = secs(1) + (ttl - Duration::from_millis(1));
        assert!(!w.expires_between(secs(3), later));
        assert_eq!(w.view(later, &members()), v);
        // Past the TTL of 0 - 2's forecast: the view lost it, and the host is told.
        let past = secs(1) + ttl;
        assert!(w.expires_between(secs(3), past));
        assert_ne!(w.view(past, &members()), v);
        assert_eq!(w.generation(), g);
        // Anything the view is made of moves the generation.
        w.observe_rtt(secs(4), NodeId(1), Duration::from_millis(1));
        assert!(w.generation() > g);
        let g = w.generation();
        w.take_compute(NodeId(1), Some((100.0, 1.0)));
        assert!(w.generation() > g);
    }

    #[test]
    fn a_step_inside_a_site_carries_over_to_no_other_pair() {
        // Site 1's pair 2 - 3 reads 1 MB/s after 0 - 1 read 100: different paths.
        let v = view(&[(1, 0, &BEFORE), (10, 2, &[(3, 1.0, 0.0)])], 11);
        assert_eq!(bw(&v, 0, 1), (100.0, Basis::Measured));
        assert_eq!(bw(&v, 2, 3), (1.0, Basis::Measured));
        assert_eq!(bw(&v, 0, 2), (5.0, Basis::Measured));
    }

    #[test]
    fn an_older_pair_figure_does_not_mask_a_newer_site_step_and_a_fresher_one_wins() {
        // 1 - 3 was measured at 5 MB/s at 1 s; 0 - 2's step at 10 s is newer: 1 - 3 follows
        // it, though its own figure is still within its TTL.
        let step: Links = &[(0, 0.5, 0.0)];
        let v = view(&[(1, 1, &BEFORE_1), (10, 2, step)], 11);
        assert_eq!(bw(&v, 1, 3), (0.5, Basis::Guessed));
        // 1 - 3 measured again after the step, at 0.4 (within the step factor of 0.5): its
        // own figure.
        let again: Links = &[(1, 0.4, 0.0)];
        let v = view(&[(1, 1, &BEFORE_1), (10, 2, step), (12, 3, again)], 13);
        assert_eq!(bw(&v, 1, 3), (0.4, Basis::Measured));
        assert_eq!(bw(&v, 0, 2), (0.5, Basis::Measured));
        // The age a row carries decides, not when it arrived: a figure sampled before the
        // step (20 s old on arrival at 12 s) is out of date.
        let stale: Links = &[(1, 5.0, 20_000.0)];
        let v = view(&[(10, 2, step), (12, 3, stale)], 13);
        assert_eq!(bw(&v, 1, 3), (0.5, Basis::Guessed));
    }

    #[test]
    fn readings_within_the_step_factor_keep_their_own_figures() {
        // 2.5 MB/s after 5 (two flows sharing the path read half each): no step.
        let v = view(
            &[
                (1, 0, &BEFORE),
                (1, 1, &BEFORE_1),
                (10, 2, &[(0, 2.5, 0.0)]),
            ],
            11,
        );
        assert_eq!(bw(&v, 0, 2), (2.5, Basis::Measured));
        assert_eq!(bw(&v, 0, 3), (5.0, Basis::Measured));
        assert_eq!(bw(&v, 1, 2), (5.0, Basis::Measured));
    }

    #[test]
    fn readings_sampled_at_one_instant_are_both_current_whatever_the_rows_order() {
        let (slow, fast): (Links, Links) = (&[(0, 0.5, 0.0)], &[(1, 40.0, 0.0)]);
        let v = view(&[(10, 2, slow), (10, 3, fast)], 11);
        // Neither is newer: both keep their figures, the unmeasured pairs take their median.
        assert_eq!(bw(&v, 0, 2), (0.5, Basis::Measured));
        assert_eq!(bw(&v, 1, 3), (40.0, Basis::Measured));
        assert_eq!(bw(&v, 0, 3), (20.25, Basis::Guessed));
        let w = view(&[(10, 3, fast), (10, 2, slow)], 11);
        assert_eq!(w, v);
    }
}
