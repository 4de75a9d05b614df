//! `[generated_platform]`: a platform of any size from a seeded model, in a few lines.
//!
//! Writing out a `[platform.wan]` table by hand stops being practical past a handful of sites,
//! and thousands of nodes need no per-node lines anyway (every cluster is uniform). The model:
//!
//! - `sites` clusters of `nodes` nodes each, placed uniformly at random on a square of side
//!   `plane_km`;
//! - the WAN latency between two sites is `wan_base_latency_s + distance × wan_latency_s_per_km`
//!   (the same both ways; 5 µs/km is light in fibre);
//! - every capacity given as a range `[lo, hi]` is drawn uniformly in it: `node_bytes_s` once
//!   per site (uplink and downlink alike), `access_bytes_s` per site and direction,
//!   `wan_bytes_s` per directed pair of sites. A plain number is a fixed value.
//!
//! Draws come from a ChaCha8 generator keyed by the model's own `seed` (not the run seed: the
//! platform is part of the scenario, the run seed varies the weather and the nodes), in a fixed
//! order: per site its position, node capacity, access up and down; then the WAN capacities
//! row by row (from-site major). A value is drawn even when its range is a single number, so
//! fixing one field does not shift the others' draws.

use super::{ScenarioError, Src, Val, R};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use toml::Spanned;
use toml::Value;
use windrose_model::platform::{ClusterSpec, Platform, MAX_PLATFORM_CLUSTERS, MAX_PLATFORM_NODES};
use windrose_model::ClusterId;

/// Default fixed part of a WAN latency, seconds.
pub const DEFAULT_WAN_BASE_LATENCY_S: f64 = 1e-3;
/// Default WAN latency per km of distance, seconds (light in fibre, about 200,000 km/s).
pub const DEFAULT_WAN_LATENCY_S_PER_KM: f64 = 5e-6;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GenDoc {
    seed: Val,
    sites: Val,
    nodes: Val,
    node_bytes_s: Val,
    access_bytes_s: Val,
    intra_latency_s: Val,
    plane_km: Val,
    wan_base_latency_s: Val,
    wan_latency_s_per_km: Val,
    wan_bytes_s: Val,
}

/// A capacity range, bytes/s: `lo == hi` for a fixed value.
#[derive(Copy, Clone, Debug)]
struct Range {
    lo: f64,
    hi: f64,
}

impl Range {
    fn draw(self, rng: &mut ChaCha8Rng) -> f64 {
        let u: f64 = rng.gen();
        (self.lo + (self.hi - self.lo) * u).clamp(self.lo, self.hi)
    }
}

const TABLE: &str = "generated_platform";

fn need<'v>(
    src: &Src<'_>,
    v: &'v Val,
    span: &std::ops::Range<usize>,
    name: &str,
    what: &str,
) -> R<&'v Spanned<Value>> {
    src.need(v, span, &format!("{TABLE}.{name}"), what)
}

fn range(src: &Src<'_>, v: &Spanned<Value>, name: &str) -> R<Range> {
    let key = format!("{TABLE}.{name}");
    let bad = |found: String| {
        src.err(
            &v.span(),
            format!("`{key}` must be a positive, finite number of bytes/s or a range [lo, hi] of them with lo <= hi, found {found}"),
        )
    };
    let num = |x: &Value| match x {
        Value::Float(f) => Some(*f),
        Value::Integer(i) => Some(*i as f64),
        _ => None,
    };
    let ok = |x: f64| x.is_finite() && x > 0.0;
    match v.get_ref() {
        Value::Array(a) => {
            let (lo, hi) = match a.as_slice() {
                [lo, hi] => match (num(lo), num(hi)) {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ => return Err(bad(format!("{a:?}"))),
                },
                _ => return Err(bad(format!("an array of {} values", a.len()))),
            };
            if ok(lo) && ok(hi) && lo <= hi {
                Ok(Range { lo, hi })
            } else {
                Err(bad(format!("[{lo}, {hi}]")))
            }
        }
        x => match num(x) {
            Some(f) if ok(f) => Ok(Range { lo: f, hi: f }),
            Some(f) => Err(bad(format!("{f}"))),
            None => Err(src.type_err(v, &key, "a number of bytes/s or a range [lo, hi]")),
        },
    }
}

/// Builds the platform `[generated_platform]` describes (see the [module docs](self)).
pub(super) fn generate(src: &Src<'_>, g: &Spanned<GenDoc>) -> R<Platform> {
    let span = g.span();
    let d = g.get_ref();
    let key = |name: &str| format!("{TABLE}.{name}");
    let seed = match &d.seed {
        Some(v) => {
            let s = src.int(v, &key("seed"))?;
            u64::try_from(s).map_err(|_| {
                src.err(
                    &v.span(),
                    format!(
                        "`{}` must be a non-negative integer, found {s}",
                        key("seed")
                    ),
                )
            })?
        }
        None => 0,
    };
    let sites_v = need(
        src,
        &d.sites,
        &span,
        "sites",
        "the number of sites (clusters)",
    )?;
    let sites = src.int(sites_v, &key("sites"))?;
    if sites < 1 || sites as u64 > MAX_PLATFORM_CLUSTERS as u64 {
        return Err(src.err(
            &sites_v.span(),
            format!(
                "`{}` is {sites}: expected 1 to {MAX_PLATFORM_CLUSTERS} sites",
                key("sites")
            ),
        ));
    }
    let sites = sites as usize;
    let nodes_v = need(
        src,
        &d.nodes,
        &span,
        "nodes",
        "the number of nodes of every site",
    )?;
    let nodes = src.int(nodes_v, &key("nodes"))?;
    if nodes < 1 {
        return Err(src.err(
            &nodes_v.span(),
            format!(
                "`{}` is {nodes}: every site needs at least one node",
                key("nodes")
            ),
        ));
    }
    let total = (nodes as u64).saturating_mul(sites as u64);
    if total > MAX_PLATFORM_NODES as u64 {
        return Err(src.err(
            &nodes_v.span(),
            format!(
                "`{}`: {sites} sites of {nodes} nodes make {total} nodes, more than the {MAX_PLATFORM_NODES} a platform may have",
                key("nodes")
            ),
        ));
    }
    let node_bytes = range(
        src,
        need(
            src,
            &d.node_bytes_s,
            &span,
            "node_bytes_s",
            "each node's uplink and downlink capacity, bytes/s (or a range)",
        )?,
        "node_bytes_s",
    )?;
    let access_bytes = range(
        src,
        need(
            src,
            &d.access_bytes_s,
            &span,
            "access_bytes_s",
            "each site's access link capacity in each direction, bytes/s (or a range)",
        )?,
        "access_bytes_s",
    )?;
    let intra_v = need(
        src,
        &d.intra_latency_s,
        &span,
        "intra_latency_s",
        "the one-way latency between two nodes of a site, seconds",
    )?;
    let intra = src.time(intra_v, &key("intra_latency_s"))?;
    let wan_bytes = if sites > 1 {
        Some(range(
            src,
            need(
                src,
                &d.wan_bytes_s,
                &span,
                "wan_bytes_s",
                "each directed WAN link's capacity, bytes/s (or a range)",
            )?,
            "wan_bytes_s",
        )?)
    } else {
        d.wan_bytes_s
            .as_ref()
            .map(|v| range(src, v, "wan_bytes_s"))
            .transpose()?
    };
    let plane_km = match &d.plane_km {
        Some(v) => {
            let x = src.f64(v, &key("plane_km"))?;
            if !(x.is_finite() && x >= 0.0) {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`{}` must be a finite, non-negative number of km, found {x}",
                        key("plane_km")
                    ),
                ));
            }
            x
        }
        None if sites > 1 => {
            return Err(src.err(
                &span,
                format!(
                    "`{}` is missing: the side of the square the sites are placed on, km",
                    key("plane_km")
                ),
            ))
        }
        None => 0.0,
    };
    let base = match &d.wan_base_latency_s {
        Some(v) => src.time(v, &key("wan_base_latency_s"))?,
        None => DEFAULT_WAN_BASE_LATENCY_S,
    };
    let per_km = match &d.wan_latency_s_per_km {
        Some(v) => src.time(v, &key("wan_latency_s_per_km"))?,
        None => DEFAULT_WAN_LATENCY_S_PER_KM,
    };

    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut b = Platform::builder();
    let mut pos = Vec::with_capacity(sites);
    for _ in 0..sites {
        let x: f64 = rng.gen::<f64>() * plane_km;
        let y: f64 = rng.gen::<f64>() * plane_km;
        pos.push((x, y));
        let node = node_bytes.draw(&mut rng);
        let up = access_bytes.draw(&mut rng);
        let down = access_bytes.draw(&mut rng);
        b = b.cluster(ClusterSpec {
            nodes: nodes as usize,
            node_uplink_bytes_s: node,
            node_downlink_bytes_s: node,
            access_up_bytes_s: up,
            access_down_bytes_s: down,
            intra_latency_s: intra,
        });
    }
    if let Some(wan) = wan_bytes {
        for a in 0..sites {
            for z in (0..sites).filter(|&z| z != a) {
                let (dx, dy) = (pos[a].0 - pos[z].0, pos[a].1 - pos[z].1);
                let latency = base + dx.hypot(dy) * per_km;
                b = b.wan(
                    ClusterId::from(a),
                    ClusterId::from(z),
                    wan.draw(&mut rng),
                    latency,
                );
            }
        }
    }
    b.build()
        .map_err(|e| src.err(&span, format!("`{TABLE}`: {e}")))
}

/// Rejects a file that gives both a `[platform]` and a `[generated_platform]`.
pub(super) fn both_given(src: &Src<'_>, g: &Spanned<GenDoc>) -> ScenarioError {
    src.err(
        &g.span(),
        format!("`{TABLE}` and `platform` are both given: give one of them"),
    )
}
