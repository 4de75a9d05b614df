//! What the commands that join a group or plan a collective share, below both the root
//! commands ([`crate::net_cmds`]) and the group's members ([`crate::group_cmd`]): the group
//! key and the handshake it makes, a scatter's schedule with how its finish times are
//! predicted, and a multicast's parameters with how its trees were planned.

use crate::dlt::speeds;
use crate::error::{bad_input, net_err, OrBadInput};
use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use windrose_model::platform::load_platform;
use windrose_model::NodeId;
use windrose_net::auth::{load_group_key, NoiseHandshake, KEY_ENV, KEY_FILE_ENV};
use windrose_net::bootstrap::{BoxFuture, Established, Handshake, PlainHandshake, Transport};
use windrose_net::group::Group;
use windrose_net::measure;
use windrose_net::multicast::{BitTorrentConfig, MobVariant, MulticastProtocol, MulticastSpec};
use windrose_net::random_payload;
use windrose_net::trees::{balanced_spec, equal_platform, magpie_spec, EQUAL_CAPACITY_BYTES_S};
use windrose_net::wire::Role;
use windrose_net::NetError;
use windrose_trees::dlt::{self, OrderPolicy, Schedule};
use windrose_trees::TreeAlgorithm;

/// The group key (every command that joins a group). Never a command-line value: a file, or
/// the environment.
#[derive(Debug, Args)]
pub struct KeyOpts {
    /// The group key file (32 bytes, raw or as 64 hex digits; mode 0600, see `windrose
    /// keygen`); default: the file in WINDROSE_GROUP_KEY_FILE, else the hex in
    /// WINDROSE_GROUP_KEY, else none (the group is then unauthenticated, with a warning).
    #[arg(long, value_name = "FILE")]
    pub(crate) key_file: Option<PathBuf>,
    /// Encrypt the data path too (AES-256-GCM with each connection's session keys):
    /// needs a group key, and every member must use it or none; it costs throughput (see the
    /// README).
    #[arg(long)]
    pub(crate) encrypt: bool,
}

/// How a scatter is scheduled and its finish times predicted (`scatter`, `local --scatter`,
/// `group start scatter`, whose control request carries them to the member).
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct ScatterOpts {
    /// Seconds each node needs to process the whole load and each tree link to carry it, as
    /// `windrose dlt` reads them (.toml or .csv; see `windrose dlt --help`). The schedule and
    /// its prediction are then in the file's seconds, not calibrated. Default: every node and
    /// link alike, at the speeds of --hash-mb-s and --link-mb-s.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["hash_mb_s", "link_mb_s"])]
    pub(crate) speeds: Option<PathBuf>,
    /// BLAKE3 speed of every node, in MB/s; default: measured on this machine before the run.
    #[arg(long, value_name = "MB/S")]
    pub(crate) hash_mb_s: Option<f64>,
    /// Throughput of every tree link, in MB/s; default: measured by a plain TCP copy on
    /// loopback when every node has a loopback address, else assumed to be 117 (gigabit
    /// Ethernet; the output then says the prediction is not calibrated).
    #[arg(long, value_name = "MB/S")]
    pub(crate) link_mb_s: Option<f64>,
    /// In which order every parent sends its children their shares: optimal (fastest link
    /// first) or given (the tree's order).
    #[arg(long, default_value = "optimal", value_parser = parse_order)]
    pub(crate) order: OrderPolicy,
    /// Send every child its share at once instead of one after the other (one after the other
    /// is what the schedule and its prediction assume).
    #[arg(long)]
    pub(crate) parallel: bool,
}

impl ScatterOpts {
    pub(crate) fn any_given(&self) -> bool {
        self.speeds.is_some()
            || self.hash_mb_s.is_some()
            || self.link_mb_s.is_some()
            || self.parallel
            || self.order != OrderPolicy::Optimal
    }
}

fn parse_order(s: &str) -> Result<OrderPolicy, String> {
    OrderPolicy::ALL
        .into_iter()
        .find(|p| p.name() == s.trim())
        .ok_or_else(|| format!("unknown order {s:?}: expected optimal or given"))
}

/// The handshake of a member: authenticated with the group key from `--key-file` or the
/// environment, else the plain one with a warning that the group is unauthenticated (at
/// once for a node; for a root when it first connects, so bad arguments still fail with one
/// line).
pub(crate) fn handshake_of(opts: &KeyOpts, warn_now: bool) -> anyhow::Result<Arc<dyn Handshake>> {
    Ok(
        match load_group_key(opts.key_file.as_deref()).map_err(net_err)? {
            Some((key, _)) => Arc::new(NoiseHandshake::new(key).with_encryption(opts.encrypt)),
            None if opts.encrypt => {
                return Err(bad_input(format!(
                    "--encrypt needs a group key (--key-file, {KEY_FILE_ENV} or {KEY_ENV}): the \
                     session keys come from the authenticated handshake"
                )))
            }
            None => {
                let plain = Unauthenticated(std::sync::Once::new());
                if warn_now {
                    plain.warn();
                }
                Arc::new(plain)
            }
        },
    )
}

/// The plain handshake, with one warning line that the group is unauthenticated.
struct Unauthenticated(std::sync::Once);

impl Unauthenticated {
    fn warn(&self) {
        self.0.call_once(|| {
            eprintln!(
                "warning: no group key (--key-file, {KEY_FILE_ENV} or {KEY_ENV}): the group is \
                 unauthenticated, anyone who can reach its nodes can join"
            )
        });
    }
}

impl Handshake for Unauthenticated {
    fn dial<'a>(
        &'a self,
        io: &'a mut Transport,
        group: &'a Group,
        me: NodeId,
        peer: NodeId,
        role: Role,
    ) -> BoxFuture<'a, Result<Established, NetError>> {
        self.warn();
        PlainHandshake.dial(io, group, me, peer, role)
    }

    fn accept<'a>(
        &'a self,
        io: &'a mut Transport,
        group: &'a Group,
        me: NodeId,
        remote: std::net::SocketAddr,
    ) -> BoxFuture<'a, Result<Established, NetError>> {
        self.warn();
        PlainHandshake.accept(io, group, me, remote)
    }
}

/// Link throughput assumed for a scatter's prediction when it can be neither given nor
/// measured: gigabit Ethernet's payload rate, in MB/s.
const ASSUMED_LINK_MB_S: f64 = 117.0;
/// Bytes of the plain loopback TCP copy that calibrates link throughput.
const LINK_CALIBRATION_BYTES: usize = 64 << 20;
/// Largest sample hashed to calibrate the BLAKE3 speed (larger than caches: shares are).
const HASH_CALIBRATION_BYTES: usize = 128 << 20;

/// How a scatter's finish times were predicted.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Prediction {
    /// Where the speeds come from, in words.
    pub(crate) basis: String,
    /// True when both speeds were measured on this machine just before the run (not given,
    /// assumed or read from a speeds file).
    pub(crate) calibrated: bool,
    /// BLAKE3 speed assumed for every node, in MB/s (None with --speeds).
    pub(crate) hash_mb_s: Option<f64>,
    /// Throughput assumed for every tree link, in MB/s (None with --speeds).
    pub(crate) link_mb_s: Option<f64>,
    /// When the schedule says every node finishes its share, in seconds after the start.
    pub(crate) predicted_finish_s: f64,
}

pub(crate) fn mb_s(v: f64, what: &str) -> anyhow::Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(bad_input(format!(
            "{what} {v}: must be a positive number of MB/s"
        )))
    }
}

/// True when every member listens on a loopback address (or `localhost`).
pub(crate) fn all_loopback(group: &Group) -> bool {
    group.members().iter().all(|m| {
        m.addr
            .parse::<std::net::SocketAddr>()
            .map(|a| a.ip().is_loopback())
            .unwrap_or_else(|_| m.addr.starts_with("localhost:"))
    })
}

/// The scatter's schedule over `tree` and how its finish times are predicted: from a speeds
/// file, or every node and link alike at given, measured or assumed speeds.
pub(crate) fn scatter_schedule(
    group: &Group,
    data: &Bytes,
    tree: &windrose_trees::Tree,
    kind: TreeAlgorithm,
    sopts: &ScatterOpts,
) -> anyhow::Result<(Schedule, Prediction)> {
    let n = tree.node_count();
    let load = data.len().max(1) as f64;
    let (compute_s, link_s, mut prediction) = if let Some(path) = &sopts.speeds {
        let sp = speeds::load(path, tree, Path::new(&format!("--tree {kind}")))?;
        let p = Prediction {
            basis: format!(
                "from {} (its seconds for the whole load; not calibrated)",
                path.display()
            ),
            calibrated: false,
            hash_mb_s: None,
            link_mb_s: None,
            predicted_finish_s: 0.0,
        };
        (sp.compute_s_per_unit, sp.link_s_per_unit, p)
    } else {
        let (hash, hash_how, hash_measured) = match sopts.hash_mb_s {
            Some(v) => (mb_s(v, "--hash-mb-s")?, "given", false),
            None => {
                let sample = if data.len() >= 8 << 20 {
                    data.slice(..data.len().min(HASH_CALIBRATION_BYTES))
                } else {
                    random_payload(8 << 20, 0)
                };
                let v = measure::blake3_bytes_s(&sample, 2)
                    .context("measuring the BLAKE3 speed: the clock did not advance")?;
                (v / 1e6, "measured here", true)
            }
        };
        let (link, link_how, link_measured) = match sopts.link_mb_s {
            Some(v) => (mb_s(v, "--link-mb-s")?, "given", false),
            None if all_loopback(group) => {
                let v = loopback_copy_bytes_s()
                    .context("measuring loopback throughput with a plain TCP copy")?;
                (v / 1e6, "a plain TCP copy on loopback", true)
            }
            None => (
                ASSUMED_LINK_MB_S,
                "assumed: gigabit Ethernet; give --link-mb-s",
                false,
            ),
        };
        let calibrated = hash_measured && link_measured;
        let p = Prediction {
            basis: format!(
                "BLAKE3 at {hash:.0} MB/s ({hash_how}) on every node, {link:.0} MB/s ({link_how}) \
                 on every link{}",
                if calibrated {
                    "; calibrated"
                } else {
                    "; not calibrated"
                }
            ),
            calibrated,
            hash_mb_s: Some(hash),
            link_mb_s: Some(link),
            predicted_finish_s: 0.0,
        };
        (
            vec![load / (hash * 1e6); n],
            vec![load / (link * 1e6); n],
            p,
        )
    };
    let schedule = dlt::schedule(tree, &compute_s, &link_s, sopts.order)
        .or_bad_input_about(format_args!("scheduling the load on the {kind} tree"))?;
    prediction.predicted_finish_s = schedule.predicted_finish_s;
    Ok((schedule, prediction))
}

/// The plain loopback copy that calibrates link throughput, on a runtime of its own in a
/// thread of its own: callable from a command's main thread and from inside a running member's
/// runtime alike (which `block_on` is not).
fn loopback_copy_bytes_s() -> anyhow::Result<f64> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(rt.block_on(measure::loopback_copy_bytes_s(LINK_CALIBRATION_BYTES))?)
        })
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the loopback copy's thread panicked")))
    })
}

/// `--mob-variant` names which MOB runs: refused with any other protocol, where it would
/// silently mean nothing.
pub(crate) fn check_mob_variant(
    variant: Option<MobVariant>,
    protocol: MulticastProtocol,
) -> anyhow::Result<()> {
    if variant.is_some() && protocol != MulticastProtocol::Mob {
        return Err(bad_input(format!(
            "--mob-variant is only used by MOB (--protocol mob), not {protocol}"
        )));
    }
    Ok(())
}

/// The parameters of `protocol` rooted at `root` over `group` (Balanced plans from
/// `platform`, or from equal capacities without one; MOB runs as `mob`), and a note on the
/// plan.
pub(crate) fn multicast_spec(
    group: &Group,
    root: NodeId,
    protocol: MulticastProtocol,
    platform: Option<&Path>,
    mob: MobVariant,
) -> anyhow::Result<(MulticastSpec, Option<PlanNote>)> {
    Ok(match protocol {
        MulticastProtocol::Mob => (MulticastSpec::Mob(mob.config()), None),
        MulticastProtocol::BitTorrent => {
            (MulticastSpec::BitTorrent(BitTorrentConfig::default()), None)
        }
        MulticastProtocol::Magpie => {
            let spec = magpie_spec(group, root).or_bad_input_about("--protocol magpie")?;
            let note = PlanNote {
                basis: "one tree: binomial inside each cluster, flat between the cluster \
                        coordinators, unshaped"
                    .into(),
                trees: 1,
                planned_mb_s: None,
                from_platform: false,
            };
            (spec, Some(note))
        }
        MulticastProtocol::Balanced => {
            let (platform_model, basis, from_platform) = match platform {
                Some(path) => (
                    load_platform(path).or_bad_input()?,
                    format!("capacities from {}", path.display()),
                    true,
                ),
                None => (
                    equal_platform(group, EQUAL_CAPACITY_BYTES_S, 1e-4)
                        .map_err(|e| bad_input(format!("--protocol balanced: {e}")))?,
                    format!(
                        "no --platform given: planned with equal capacities (every node, access \
                         and WAN link {:.0} MB/s), so the trees only spread the fan-out",
                        EQUAL_CAPACITY_BYTES_S / 1e6
                    ),
                    false,
                ),
            };
            let (spec, rate) = balanced_spec(group, &platform_model, root).map_err(|e| {
                bad_input(match platform {
                    Some(p) => format!("--platform {}: {e}", p.display()),
                    None => format!("--protocol balanced: {e}"),
                })
            })?;
            let trees = match &spec {
                MulticastSpec::Trees { plan, .. } => plan.trees.len(),
                _ => 0,
            };
            let note = PlanNote {
                basis: format!(
                    "Balanced Multicasting: {trees} shaped tree(s), planned rate {:.1} MB/s; {basis}",
                    rate / 1e6
                ),
                trees,
                planned_mb_s: Some(rate / 1e6),
                from_platform,
            };
            (spec, Some(note))
        }
    })
}

/// How a multicast's trees were planned, for the output.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PlanNote {
    /// What the trees are and where their rates come from, in words.
    pub(crate) basis: String,
    /// Trees of the plan (balanced, magpie).
    pub(crate) trees: usize,
    /// Balanced: the planned rate, MB/s.
    pub(crate) planned_mb_s: Option<f64>,
    /// Balanced: true when the capacities came from --platform, false when all links were
    /// assumed alike.
    pub(crate) from_platform: bool,
}
