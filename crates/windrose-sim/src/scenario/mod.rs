//! Scenarios: a platform, what happens to it over time, and a workload, in one TOML file; and
//! [`run_scenario`], which runs one in the simulator.
//!
//! # The file
//!
//! ```toml
//! name = "two-sites"                 # optional (default: the file name)
//! description = "two sites, one WAN link that slows down"  # optional
//! seed = 7                           # optional default run seed (`--seed` wins); 0 if absent
//!
//! [platform]                         # windrose_model::platform: clusters, nodes, WAN tables
//! [[platform.cluster]]
//! nodes = 4
//! node_uplink_bytes_s = 1.25e8
//! node_downlink_bytes_s = 1.25e8
//! access_up_bytes_s = 1.25e9
//! access_down_bytes_s = 1.25e9
//! intra_latency_s = 1e-4
//! [[platform.cluster]]
//! nodes = 4
//! node_uplink_bytes_s = 1.25e8
//! node_downlink_bytes_s = 1.25e8
//! access_up_bytes_s = 1.25e9
//! access_down_bytes_s = 1.25e9
//! intra_latency_s = 1e-4
//! [platform.wan]
//! bytes_s = [[0, 1.25e7], [1.25e7, 0]]
//! latency_s = [[0, 0.02], [0.02, 0]]
//!
//! [[change]]                         # a timed change (any number)
//! at_s = 0.5                         # when, seconds (`at` is accepted too)
//! link = "wan:0:1"                   # which link (see below)
//! fraction = 0.25                    # new capacity: a fraction of the nominal one, or
//! # bytes_s = 3e6                    #   an absolute capacity, bytes/s
//! latency_s = 0.05                   # new latency (WAN, intra and pair links only)
//! both_directions = true             # the reverse link too (wan:1:0 here)
//!
//! [[change]]                         # the latency between two nodes only
//! at_s = 1.0
//! link = "pair:0:5"                  # node 0 <-> node 5: both directions unless
//! latency_s = 2.0                    #   both_directions = false (then 0 -> 5 only)
//!
//! [mayhem]                           # optional: seed 002's "mayhem" weather
//! period_s = 5.0                     # every period ...
//! min_fraction = 0.1                 # ... every link gets a random fraction in [min, max]
//! max_fraction = 1.0                 #     of its nominal capacity, drawn from the run seed
//! links = "all"                      # "all" | "wan" | "inter-cluster" (access + WAN)
//! start_s = 0.0                      # first draw (default 0)
//! # until_s = 60.0                   # last draw no later than this (default: while running)
//!
//! [[fail]]                           # a node crashes (any number)
//! node = 7
//! at_s = 0.2
//!
//! [compute]                          # optional: each node's compute speed, a share of a core
//! core_bytes_s = 1e8                 # bytes/s one whole core computes, simulator (default 1e8)
//! cpu = 1.0                          # every node's share (default: not limited)
//! [[compute.cluster]]                # a cluster's nodes (any number) ...
//! id = 1
//! cpu = 0.5
//! [[compute.node]]                   # ... and single nodes, over their cluster's share
//! id = 7
//! cpu = 0.25
//!
//! [workload]
//! protocol = "broadcast"             # "broadcast" | "scatter"
//! tree = "balanced-path"             # balanced-path binomial magpie mst max-bottleneck flat chain
//! root = 0
//! message_bytes = "8MiB"             # an integer, or a string with a unit (B kB KiB MB MiB GB GiB TB TiB)
//! segment_bytes = "256KiB"           # broadcast; default: the whole message (store-and-forward)
//! repetitions = 2                    # consecutive collectives (default 1)
//! sharing = "max-min"                # "max-min" (default) | "rtt-weighted"
//! tree_costs = "latency"             # what latency trees minimise: "latency" (default) | "transfer"
//! ```
//!
//! Links are named like the validation scenarios: `node_up:N`, `node_down:N`, `access_up:C`,
//! `access_down:C`, `wan:FROM:TO`, plus `intra:C` for a cluster's intra-cluster latency (only
//! `latency_s` may change there) and `pair:A:B` for the latency between two nodes. A change
//! sets a capacity (`bytes_s` or `fraction`, not both), a latency (`latency_s`: `wan:…`,
//! `intra:…` and `pair:…` only), or both. `fraction` is relative to the link's *nominal*
//! capacity, the one the `[platform]` gives.
//!
//! `pair:A:B` (two distinct nodes) is not a link of its own: it sets the one-way latency of
//! the messages between A and B, and of no other messages, in place of their route's sum
//! (`intra` halves and the WAN latency; see
//! [`Platform::set_pair_latency`](windrose_model::platform::Platform::set_pair_latency)). The
//! messages keep their route, so they share its node, access and WAN capacities as before; a
//! pair has no capacity to change. It is A → B and B → A unless `both_directions = false`
//! (A → B only), and it holds until another `pair:` change of the same nodes, whatever
//! `intra:` or `wan:` changes come later. It is what a single process pair of a paper's
//! experiment measures (seed 004's Fig. 5 changes `(04,06)` to 9999 ms); the Hosts' probes
//! between A and B measure it like any other latency. `[[platform.pair]]` sets one from the
//! start.
//!
//! # Node speeds
//!
//! `[compute]` gives each node a share of one CPU core, in one place for both drivers: the
//! simulator charges every `Output::Compute` of every workload at `cpu x core_bytes_s`
//! bytes/s, and `windrose testbed up` runs each node's processes under a CPU quota of `cpu`
//! cores (a node without a share runs unthrottled there and at one core's speed here). A share
//! is a positive number up to [`MAX_CPU`]; a node's own entry wins over its cluster's, which
//! wins over the table's `cpu`. Speed factors are shares too: 1x/2x/4x nodes are e.g.
//! `cpu = 0.0625`, `0.125`, `0.25`.
//!
//! Without `[compute]`, the older per-workload speeds still apply: `workload.compute_bytes_s`
//! (every node's compute speed, bytes/s; default 1e8) and per-node overrides
//! `[[workload.node]]` with `id` and `compute_bytes_s`. They were a scatter's only and now
//! apply to every workload; a broadcast or multicast that gives neither computes instantly,
//! as before. Giving both `[compute]` and these is an error.
//!
//! A scatter workload ([`WorkloadKind::Scatter`]) also takes `send_mode = "sequential" |
//! "parallel"` (default sequential, the divisible-load model).
//!
//! A node that joins (`[[join]]` with `node` and `at_s`, like `[[fail]]`) is absent until
//! `at_s` (failed from the start of every repetition before it, so the others go on without
//! it) and then starts with nothing, as the protocols take a restarted node back: in a tree
//! broadcast it asks the root for the whole message ([`windrose_proto::tree_broadcast::TreeBroadcast::rejoin`];
//! its children re-attached to the root when it was found missing), in a multicast it asks to
//! rejoin and fetches every piece ([`windrose_proto::multicast::build_rejoining`]). A scatter
//! cannot take a node mid-run; a node joins once, and the root cannot join. A join after a
//! repetition's end counts from the next repetition on. A node with a `[[fail]]` before its
//! `[[join]]` is there from the start, fails, and *restarts* at the join: a multicast node
//! then keeps every verified piece it had stored before it failed, what a real node finds in
//! its partial output file (each piece at its offset); a broadcast node starts over.
//!
//! A multicast workload (seed 002) names its kind and protocol, and takes no tree:
//!
//! ```toml
//! [workload]
//! kind = "multicast"                 # "broadcast" | "scatter" | "multicast" | "sort" | "auto" (default: `protocol`)
//! protocol = "mob"                   # "mob" | "bittorrent" | "balanced" | "magpie"
//! root = 0
//! message_bytes = "600MB"
//! piece_bytes = "1MiB"               # default 1 MiB; the last piece may be shorter
//! mob_variant = "windrose"            # mob only: "windrose" (default) or "paper" (see MobConfig)
//! ```
//!
//! It runs through [`crate::multicast`]: every node of the platform gets a machine, Balanced
//! Multicasting plans from the platform as it is when the repetition starts, and the
//! [`Report`]'s `multicast` entries give each repetition's per-node completion, throughput, WAN
//! payload and fraction of the bound at its start (`windrose bound` gives the bound over the
//! scenario's changes).
//!
//! # Sort workloads
//!
//! A sort workload (issue 19) sorts generated records (100 bytes, 10-byte keys, the sort
//! benchmark's format) spread over every node, with HeteroSort or the sample sort, through one
//! `windrose_proto` Host per node as the runtime runs them (the session, the sort's machine,
//! an application that hands the node's records to it):
//!
//! ```toml
//! [workload]
//! kind = "sort"
//! protocol = "heterosort"            # "heterosort" | "sample-sort"
//! slicing = "speeds"                 # heterosort: "speeds" (default; "speed" too) | "equal" | "splitters"
//! backups = 1                        # heterosort: copies of each member's input (default 1)
//! rows = 4                           # heterosort: the torus's rows (default: the squarest)
//! root = 0                           # the member that starts it (default 0)
//! records_per_node = 10000           # records on every node, or
//! # total_bytes = "16MB"             #   bytes of records spread evenly (whole records)
//! record_seed = 19                   # the records' seed (default: the run seed)
//! keys = "uniform"                   # "uniform" | "skewed" (skew = 4) | "duplicates" (distinct_keys = N)
//! ```
//!
//! Node speeds come from `[compute]` (a node given none computes at one core's
//! [`DEFAULT_CORE_BYTES_S`]); HeteroSort's speed slices and splitters are weighted by them.
//! Node `i`'s records are the generator's records after node `i - 1`'s. The run starts the
//! sort at time 0 at `root` and asks every member to leave once the sort is over (the Hosts
//! heartbeat until then), so the run ends at most 50 ms of simulated time after it.
//! [`Report::sort`] gives each member's finish time, the records it held before and after,
//! the bytes it sent, and the check: the members' ranges in id order (snake order for
//! HeteroSort, rank order for the sample sort) hold exactly the input's records (count and
//! order-independent checksum) and are globally sorted. A sort runs once (`repetitions` is 1);
//! `[[change]]` and `[mayhem]` apply as for the other workloads; `[[fail]]` needs HeteroSort
//! with at least one backup (its recovery restores a failed member's records); `[[join]]` is
//! refused.
//!
//! # Auto workloads
//!
//! A `kind = "auto"` workload (issue 16 point 4) broadcasts `message_bytes` from `root` with
//! the protocol the automatic choice picks ([`crate::auto::choose_on`], the choice `windrose
//! send` makes): from the view a perfect prober has of the platform, it predicts the tree
//! broadcast over the planner's tree, MOB and Balanced Multicasting planned from the view, and
//! runs the fastest exactly as planned (that tree; that plan). It takes `root`,
//! `message_bytes`, `segment_bytes` (the broadcast's) and `piece_bytes` (the multicasts'),
//! both 256 KiB by default, `repetitions`, `sharing` and node speeds, and no `protocol`,
//! `tree` or `tree_costs`.
//!
//! The choice follows the network's weather: each repetition chooses anew, at its start, from
//! the platform as the timeline (`[[change]]` entries, mayhem draws) has changed it by then —
//! the platform that repetition's simulation runs on — and plans its tree or Balanced
//! Multicasting plan on that platform. So after a WAN link slows, the next repetition may run
//! another protocol, or the same over another tree; a repetition running when the change comes
//! keeps what it chose. With no change since the previous repetition's choice, the plan is
//! reused (the choice is deterministic: it would be the same). The first repetition chooses
//! from the nominal platform with the changes due at time 0 (mayhem's first draw included).
//! The view at a repetition's start is the whole forecast: weather that changes within a
//! repetition (mayhem redrawing faster than a repetition lasts) can make the nominal
//! platform the better guess, Balanced Multicasting's trees being shaped to the rates planned.
//!
//! In the report, each [`RepetitionReport::auto`] says which protocol that repetition chose and
//! why (the predictions and the text `windrose send --explain` prints) and its completion;
//! [`Report::auto`] is the first repetition's (the same value, kept for readers of one
//! choice). The summary adds a line for each repetition whose choice differs from the one
//! before (`repetition 2 (from 0.297740 s): auto chose balanced (bandwidth decides at this
//! size) on the platform as it was then`: `data/scenarios/auto-weather.toml`). The rest of the report is that of the broadcasts
//! and multicasts it ran: [`Report::protocol`], `tree` and `segment_bytes` are the first
//! repetition's, the node table's parents and depths are the first repetition's tree (none when
//! it multicast), and [`Report::multicast`] has one outcome per repetition that multicast, in
//! order.
//!
//! # Generated platforms
//!
//! Instead of `[platform]`, a file may give `[generated_platform]`: a platform from a seeded
//! model, so that thousands of nodes over many sites take a few lines (see `generate.rs` for
//! the draw order). Giving both is an error.
//!
//! ```toml
//! [generated_platform]
//! seed = 7                           # the model's seed (default 0), apart from the run seed
//! sites = 4                          # clusters, placed uniformly on a square ...
//! plane_km = 4000                    # ... of this side, km (required with 2 sites or more)
//! nodes = 4096                       # nodes per site
//! node_bytes_s = 1.25e9              # every node's uplink and downlink: a number, or
//! access_bytes_s = [1e9, 1.25e9]     #   a range [lo, hi] drawn per site (access: per direction)
//! intra_latency_s = 1e-4
//! wan_bytes_s = [3e6, 5e6]           # drawn per directed pair of sites
//! wan_base_latency_s = 1e-3          # optional (default 1 ms); the WAN latency is this plus
//! wan_latency_s_per_km = 5e-6        #   distance × this (default 5 µs/km), the same both ways
//! ```
//!
//! The same seed gives the same platform; links are named as for `[platform]`.
//!
//! Every key is checked; an error names the file, line, column and key
//! (`four-clusters.toml:41:10: `workload.tree`: unknown tree algorithm "mts": expected one of …`).
//!
//! # Tree costs
//!
//! Trees that need link costs take them from the platform ([`PlatformCosts`]), symmetrised
//! because tree algorithms want symmetric costs:
//! - **latency** (`balanced-path`, `mst` with `tree_costs = "latency"`): the mean of the two
//!   directions' route latencies, in ms — what seed 004's trees minimise;
//! - **transfer** (`tree_costs = "transfer"`): the mean over both directions of route latency +
//!   message bytes / route bottleneck capacity, in ms — for large messages, where bandwidth
//!   matters more than latency;
//! - **bandwidth** (`max-bottleneck`): the smaller of the two directions' route bottleneck
//!   capacities, in MB/s (10^6 bytes/s);
//! - `magpie` uses the platform's clusters; `binomial`, `flat` and `chain` use no costs.
//!
//! `chain` visits the nodes from the root in ascending id order, wrapping around
//! (`root, root+1, …, N-1, 0, …, root-1`).
//!
//! # Mayhem
//!
//! With `[mayhem]`, at `start_s`, `start_s + period_s`, … every selected link (in
//! [link index](windrose_model::platform::Platform::link_index) order) gets the capacity
//! `nominal × (min + (max - min) × u)` with `u` uniform in [0, 1) from a ChaCha8 generator keyed by
//! the run seed (stream [`MAYHEM_STREAM`], apart from the nodes' streams): the same seed gives
//! the same weather whatever the workload, another seed another weather. See [`Mayhem::draw`].
//!
//! Its rate is bounded against the run's length: `period_s` is at least
//! [`MIN_MAYHEM_PERIOD_S`], and a run applies at most [`MAX_MAYHEM_CHANGES`] link changes
//! (draws × selected links): past that it stops with an error naming `mayhem.period_s` (with
//! `until_s`, the count is checked when the file is read). A message is cut into at most
//! [`MAX_PIECES`] segments or pieces.
//!
//! # Running a scenario
//!
//! [`run_scenario`] builds the workload's tree (and, for a scatter, the divisible-load schedule)
//! and runs it in the engine ([`crate::engine`]), returning a [`Report`].
//!
//! ## Repetitions
//!
//! `repetitions = k` runs k collectives one after the other: repetition `i + 1` starts at the
//! instant repetition `i` ended (nothing left pending: every node finished, aborted, failed or
//! is stuck), as if every node met in a free barrier between collectives. Each repetition is one
//! [`Simulation`](crate::engine::Simulation) whose platform is the platform as the timeline has changed it by then; its
//! times are shifted onto the scenario's clock in the report and in the event log. The tree (or
//! schedule) is built once, from the nominal platform (an auto workload chooses and plans again
//! at each repetition: see [auto workloads](self#auto-workloads)); nodes that failed stay failed (they are
//! failed at the start of every later repetition, so their subtrees miss the data: static trees
//! are not repaired).
//!
//! ## The timeline
//!
//! Timed changes, mayhem draws and failures form one timeline. Items are handed to the engine
//! lazily, just before the run reaches their time, so a scenario whose mayhem never ends still
//! stops when the workload is over; items at one instant go in the order mayhem draw, `[[change]]`
//! entries (file order), failures. Items at or before a repetition's start are applied to its
//! platform before it begins.
//!
//! ## Event log
//!
//! The engine's JSONL lines (see [`Simulation::set_event_log`](crate::engine::Simulation::set_event_log)), with `t` on the scenario's clock,
//! plus lines of our own: `{"t":…,"ev":"repetition","repetition":i}` when a repetition starts,
//! `{"t":…,"ev":"change",…}` for each timed change, `{"t":…,"ev":"mayhem","draw":k,"links":n}`
//! for each mayhem draw, `{"t":…,"ev":"fail_scheduled","node":n}` for each failure
//! handed to the engine (the engine's own `fail` line follows). Same scenario and seed, same
//! bytes.
//!
//! # Example
//!
//! ```
//! use std::path::Path;
//! use windrose_sim::scenario::{parse_scenario, run_scenario};
//!
//! let text = r#"
//! [platform]
//! [[platform.cluster]]
//! nodes = 3
//! node_uplink_bytes_s = 1e6
//! node_downlink_bytes_s = 1e6
//! access_up_bytes_s = 1e7
//! access_down_bytes_s = 1e7
//! intra_latency_s = 0.001
//!
//! [workload]
//! protocol = "broadcast"
//! tree = "chain"
//! root = 0
//! message_bytes = "1MB"
//! repetitions = 2
//! "#;
//! let scenario = parse_scenario(text, Path::new("tiny.toml")).unwrap();
//! let report = run_scenario(&scenario, 0, None).unwrap();
//! assert!(report.all_finished());
//! // Store-and-forward on a chain: two hops of latency + (1 MB + frame header) / 1 MB/s.
//! let one = report.repetitions[0].makespan_s.unwrap();
//! assert!((one - 2.0 * (0.001 + 1.0)).abs() < 1e-3);
//! assert_eq!(report.repetitions[1].start_s, report.repetitions[0].end_s);
//! ```

mod generate;
mod run;

pub use run::{
    generate_records, link_name, run_scenario, run_scenario_shared, run_scenario_with, sort_spec,
    AutoReport, LinkReport, NodeReport, Progress, RepetitionReport, Report, SortCheck, SortMember,
    SortRecords, SortReport,
};

use crate::network::{Change, SharingPolicy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::{Spanned, Value};
use windrose_model::error::{compact, ids_in_words, line_col};
use windrose_model::platform::{parse_platform_toml, LinkId, Platform};
use windrose_model::records::{KeyDistribution, DEFAULT_SKEW, MAX_SKEW, RECORD_LEN};
use windrose_model::units::{format_size, parse_size};
use windrose_model::{ClusterId, CostUnit, LinkCosts, ModelError, NodeId};
use windrose_proto::heterosort::Slicing;
use windrose_proto::multicast::MulticastProtocol;
use windrose_trees::{named_enum, Tree, TreeAlgorithm, TreeError};

/// The ChaCha8 stream mayhem draws from (node machines use streams below 2^32, see
/// `windrose_proto::node_rng`).
pub const MAYHEM_STREAM: u64 = 1 << 40;

/// The most repetitions a workload may ask for.
pub const MAX_REPETITIONS: u64 = 1_000_000;

/// The largest message a workload may ask for: 64 GiB (the root holds it in memory).
pub const MAX_MESSAGE_BYTES: u64 = 64 << 30;

/// The shortest period between mayhem's draws, seconds: a millisecond, shorter than any round
/// trip between clusters (weather that changes faster has no meaning for the flows), and each
/// draw is one change per selected link for the engine to apply.
pub const MIN_MAYHEM_PERIOD_S: f64 = 1e-3;

/// The most link changes mayhem may hand one run (each draw changes every selected link): the
/// engine keeps each change it applies, so a period far below the run's length (`period_s =
/// 1e-9` filled gigabytes) must stop with an error, not exhaust memory. Seed 002's mayhem
/// (5 s, 140 links, minutes of simulated time) draws a few thousand.
pub const MAX_MAYHEM_CHANGES: u64 = 2_000_000;

/// The most segments (a broadcast) or pieces (a multicast) a message may be cut into: every one
/// is a message for the engine at every hop, and a multicast keeps a hash and per-node state for
/// each.
pub const MAX_PIECES: u64 = 1 << 20;

/// Something wrong with a scenario file, or with running it.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ScenarioError {
    /// The file cannot be read or parsed, or a value is out of range; names the file, line,
    /// column and key.
    #[error("{}", format_file_error(path, *line, *column, message))]
    File {
        /// The scenario file.
        path: PathBuf,
        /// 1-based line, 0 when the error is not tied to a line.
        line: usize,
        /// 1-based column, 0 when the error is not tied to a column.
        column: usize,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The scenario is well-formed but cannot be set up (a tree or schedule cannot be built).
    #[error("{0}")]
    Setup(String),
    /// The simulation engine failed.
    #[error("simulation failed: {0}")]
    Engine(String),
}

fn format_file_error(path: &Path, line: usize, column: usize, message: &str) -> String {
    match (line, column) {
        (0, _) => format!("{}: {message}", path.display()),
        (l, 0) => format!("{}:{l}: {message}", path.display()),
        (l, c) => format!("{}:{l}:{c}: {message}", path.display()),
    }
}

impl From<ModelError> for ScenarioError {
    fn from(e: ModelError) -> Self {
        match e {
            ModelError::File {
                path,
                line,
                column,
                message,
            } => ScenarioError::File {
                path,
                line,
                column,
                message,
            },
            other => ScenarioError::Setup(other.to_string()),
        }
    }
}

/// What a workload does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Pipelined tree broadcast (`windrose_proto::tree_broadcast`).
    Broadcast,
    /// Divisible-load scatter (`windrose_proto::scatter`) following a `dlt` schedule.
    Scatter,
    /// A piece-based multicast (`windrose_proto::multicast`): MOB, BitTorrent, Balanced
    /// Multicasting or MagPIe, run by [`crate::multicast`].
    Multicast,
    /// A distributed sort of generated records (HeteroSort or the sample sort) through one
    /// `windrose_proto` Host per node: see [sort workloads](self#sort-workloads).
    Sort,
    /// A broadcast whose protocol (tree broadcast, MOB or Balanced Multicasting) the automatic
    /// choice picks from the platform's view: see [auto workloads](self#auto-workloads).
    Auto,
}

impl WorkloadKind {
    /// The name used in files and output.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Broadcast => "broadcast",
            WorkloadKind::Scatter => "scatter",
            WorkloadKind::Multicast => "multicast",
            WorkloadKind::Sort => "sort",
            WorkloadKind::Auto => "auto",
        }
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

named_enum! {
    /// What the latency trees (`balanced-path`, `mst`) minimise; see the [module docs](self).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub enum TreeCosts: "tree costs" {
        /// Route latency (ms).
        #[default]
        Latency = "latency",
        /// Route latency plus the message's transfer time at the route's bottleneck (ms).
        Transfer = "transfer",
    }
}

named_enum! {
    /// How a scatter's parents hand their children's shares to the network.
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub enum ScatterSends: "send mode" {
        /// One child after the other (the divisible-load model).
        #[default]
        Sequential = "sequential",
        /// All children at once, sharing the parent's uplink.
        Parallel = "parallel",
    }
}

named_enum! {
    /// Which links mayhem re-draws.
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub enum MayhemLinks: "mayhem link set" {
        /// Every link: node uplinks and downlinks, access links, WAN links.
        #[default]
        All = "all",
        /// WAN links only.
        Wan = "wan",
        /// Access and WAN links (what traffic between clusters crosses).
        InterCluster = "inter-cluster",
    }
}

/// A change of the platform at a given time.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct TimedChange {
    /// When, seconds.
    pub at_s: f64,
    /// What.
    pub change: Change,
}

/// A node that crashes.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct NodeFailure {
    /// The node (that fails, or joins).
    pub node: NodeId,
    /// When, seconds.
    pub at_s: f64,
}

/// Seed 002's "mayhem": every `period_s` every selected link is re-drawn to a random fraction
/// of its nominal capacity. See the [module docs](self).
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize)]
pub struct Mayhem {
    /// Time between draws, seconds (positive).
    pub period_s: f64,
    /// Smallest fraction of the nominal capacity (positive).
    pub min_fraction: f64,
    /// Largest fraction (at least `min_fraction`).
    pub max_fraction: f64,
    /// Which links.
    pub links: MayhemLinks,
    /// Time of the first draw, seconds.
    pub start_s: f64,
    /// No draw after this time, seconds (None: as long as the workload runs).
    pub until_s: Option<f64>,
}

impl Mayhem {
    /// The links mayhem re-draws, in link index order.
    pub fn selected_links(&self, platform: &Platform) -> Vec<LinkId> {
        platform
            .links()
            .filter(|l| match self.links {
                MayhemLinks::All => true,
                MayhemLinks::Wan => matches!(l, LinkId::Wan { .. }),
                MayhemLinks::InterCluster => matches!(
                    l,
                    LinkId::Wan { .. } | LinkId::AccessUp(_) | LinkId::AccessDown(_)
                ),
            })
            .collect()
    }

    /// The generator of the draws for run seed `seed`.
    pub fn rng(seed: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(MAYHEM_STREAM);
        rng
    }

    /// The time of draw `k` (0-based), seconds, or None when it is after `until_s`.
    pub fn draw_time(&self, k: u64) -> Option<f64> {
        let t = self.start_s + k as f64 * self.period_s;
        match self.until_s {
            Some(u) if t > u => None,
            _ => Some(t),
        }
    }

    /// The next draw from `rng`: one capacity change per link of `links` (from
    /// [`Mayhem::selected_links`]), relative to the nominal capacities of `nominal`. Calling it
    /// repeatedly on one generator gives draws 0, 1, 2, … of the run.
    pub fn draw(&self, rng: &mut ChaCha8Rng, nominal: &Platform, links: &[LinkId]) -> Vec<Change> {
        let span = self.max_fraction - self.min_fraction;
        links
            .iter()
            .map(|&link| {
                let u: f64 = rng.gen();
                Change::Capacity {
                    link,
                    bytes_s: nominal.capacity_bytes_s(link) * (self.min_fraction + span * u),
                }
            })
            .collect()
    }
}

/// The workload of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Broadcast or scatter.
    pub kind: WorkloadKind,
    /// The tree it runs on.
    pub tree: TreeAlgorithm,
    /// The root (the broadcaster, or the node holding the load).
    pub root: NodeId,
    /// Bytes of the message (broadcast) or of the load (scatter).
    pub message_bytes: u64,
    /// Broadcast segment size, bytes (`message_bytes` when not given: store-and-forward; at
    /// least 1).
    pub segment_bytes: u64,
    /// Consecutive collectives: each starts when the previous one has finished.
    pub repetitions: u64,
    /// How connections share links.
    pub sharing: SharingPolicy,
    /// What latency trees minimise.
    pub tree_costs: TreeCosts,
    /// Each node's compute speed, bytes/s (indexed by node id; infinite: instant).
    pub compute_bytes_s: Vec<f64>,
    /// Scatter: sequential or parallel sends.
    pub send_mode: ScatterSends,
    /// Multicast: the protocol and its piece size (None for broadcasts and scatters).
    pub multicast: Option<MulticastWorkload>,
    /// Sort: the sort and its records (None for the other kinds).
    pub sort: Option<SortWorkload>,
    /// Auto: the multicasts' piece size (None for the other kinds; the broadcast's segment is
    /// `segment_bytes`).
    pub auto: Option<AutoWorkload>,
}

pub use windrose_proto::collective::SortProtocol;

/// The sort of a `kind = "sort"` workload and the records it sorts.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SortWorkload {
    /// HeteroSort or the sample sort.
    pub protocol: SortProtocol,
    /// HeteroSort's slices (ignored by the sample sort).
    pub slicing: Slicing,
    /// HeteroSort's backup copies of each member's input.
    pub backups: u32,
    /// HeteroSort's torus: rows (rows x cols = the node count).
    pub rows: u32,
    /// HeteroSort's torus: columns.
    pub cols: u32,
    /// Records each node holds at the start, by node id (at least one each).
    pub records: Vec<u64>,
    /// The records' seed (None: the run seed).
    pub record_seed: Option<u64>,
    /// How keys are drawn.
    #[serde(serialize_with = "ser_keys")]
    pub keys: KeyDistribution,
}

impl SortWorkload {
    /// Every record's bytes.
    pub fn total_bytes(&self) -> u64 {
        self.records.iter().sum::<u64>() * RECORD_LEN as u64
    }
}

fn ser_keys<S: serde::Serializer>(k: &KeyDistribution, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&match k {
        KeyDistribution::Uniform => "uniform".to_string(),
        KeyDistribution::Skewed { exponent } => format!("skewed {}", compact(*exponent)),
        KeyDistribution::Duplicates { distinct } => format!("duplicates {distinct}"),
    })
}

/// The most bytes of records a sort workload may ask for: the simulator holds and sorts
/// every record in memory.
pub const MAX_SORT_BYTES: u64 = 4 << 30;

/// The default piece (and segment) size of an auto workload: 256 KiB, as `windrose send`.
pub const DEFAULT_AUTO_PIECE_BYTES: u32 = 256 << 10;

/// The multicasts' side of a `kind = "auto"` workload.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AutoWorkload {
    /// Piece size of MOB and Balanced Multicasting, bytes.
    pub piece_bytes: u32,
}

/// The piece-based multicast of a `kind = "multicast"` workload.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MulticastWorkload {
    /// Which protocol.
    pub protocol: MulticastProtocol,
    /// Piece size, bytes (the manifest's; the last piece may be shorter).
    pub piece_bytes: u32,
    /// Which MOB (ignored by the other protocols).
    pub mob_variant: MobVariant,
}

/// `workload.mob_variant`: the paper's MOB or ours (the runtime's `--mob-variant` too).
pub use windrose_proto::mob::MobVariant;

/// The largest share of a core a node may be given in `[compute]` (a machine of 1024 cores).
pub const MAX_CPU: f64 = 1024.0;

/// A core's speed in the simulator when `[compute]` gives none, bytes/s (the scatter's old
/// default node speed).
pub const DEFAULT_CORE_BYTES_S: f64 = 1e8;

/// Each node's compute speed: the `[compute]` table (see the [module docs](self#node-speeds)).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCompute {
    /// Bytes/s one whole core computes in the simulator.
    pub core_bytes_s: f64,
    /// Each node's share of a core, by node id (None: not limited; one core in the simulator).
    pub cpu: Vec<Option<f64>>,
}

impl NodeCompute {
    /// Node `i`'s simulated speed, bytes/s.
    pub fn bytes_s(&self, i: usize) -> f64 {
        self.cpu.get(i).copied().flatten().unwrap_or(1.0) * self.core_bytes_s
    }
}

/// The piece size of a multicast workload that gives none: 1 MiB.
pub const DEFAULT_PIECE_BYTES: u32 = 1 << 20;

/// A parsed scenario; see the [module docs](self) for the file format.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Its name (the `name` key, else the file name).
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// The file it came from (for messages).
    pub source: PathBuf,
    /// The run seed when the caller gives none.
    pub default_seed: u64,
    /// The platform at time 0 (nominal capacities).
    pub platform: Platform,
    /// Timed changes, in file order.
    pub changes: Vec<TimedChange>,
    /// Mayhem, if any.
    pub mayhem: Option<Mayhem>,
    /// Node failures, in file order.
    pub failures: Vec<NodeFailure>,
    /// Late joins, in file order (broadcast and multicast workloads).
    pub joins: Vec<NodeFailure>,
    /// The workload.
    pub workload: Workload,
    /// Node speeds from `[compute]`, if given (they are also in `workload.compute_bytes_s`).
    pub compute: Option<NodeCompute>,
}

impl Scenario {
    /// True when `node`'s `[[join]]` is a restart: it has a `[[fail]]` before the join.
    pub fn restarts(&self, node: NodeId) -> bool {
        self.joins.iter().any(|j| {
            j.node == node
                && self
                    .failures
                    .iter()
                    .any(|f| f.node == node && f.at_s < j.at_s)
        })
    }

    /// The tree the workload runs on (see the [module docs](self) for the costs it uses).
    pub fn tree(&self) -> Result<Tree, ScenarioError> {
        let w = &self.workload;
        build_tree(
            &self.platform,
            w.tree,
            w.root,
            w.tree_costs,
            w.message_bytes,
        )
        .map_err(|e| ScenarioError::Setup(format!("cannot build the {} tree: {e}", w.tree)))
    }
}

/// Builds the tree `algo` over every node of `platform`, rooted at `root`, with costs derived
/// from the platform (see the [module docs](self)); `message_bytes` is used by
/// [`TreeCosts::Transfer`].
pub fn build_tree(
    platform: &Platform,
    algo: TreeAlgorithm,
    root: NodeId,
    tree_costs: TreeCosts,
    message_bytes: u64,
) -> Result<Tree, TreeError> {
    let clusters: Vec<ClusterId> = (0..platform.node_count())
        .map(|i| platform.cluster_of(NodeId::from(i)))
        .collect();
    if algo.prefers_capacities() {
        return algo.build(
            &PlatformCosts::bandwidth_mb_s(platform),
            Some(&clusters),
            root,
        );
    }
    let costs = match tree_costs {
        TreeCosts::Latency => PlatformCosts::latency_ms(platform),
        TreeCosts::Transfer => PlatformCosts::transfer_ms(platform, message_bytes),
    };
    algo.build(&costs, Some(&clusters), root)
}

/// Link costs between the nodes of a [`Platform`], derived from its routes (symmetrised, as
/// tree algorithms expect); see the [module docs](self).
#[derive(Copy, Clone, Debug)]
pub struct PlatformCosts<'a> {
    platform: &'a Platform,
    basis: CostBasis,
}

#[derive(Copy, Clone, Debug)]
enum CostBasis {
    LatencyMs,
    TransferMs { bytes: f64 },
    BandwidthMbS,
}

impl<'a> PlatformCosts<'a> {
    /// Mean of the two directions' route latencies, ms.
    pub fn latency_ms(platform: &'a Platform) -> Self {
        PlatformCosts {
            platform,
            basis: CostBasis::LatencyMs,
        }
    }

    /// Mean over the two directions of route latency + `bytes` / route bottleneck, ms.
    pub fn transfer_ms(platform: &'a Platform, bytes: u64) -> Self {
        PlatformCosts {
            platform,
            basis: CostBasis::TransferMs {
                bytes: bytes as f64,
            },
        }
    }

    /// The smaller of the two directions' route bottlenecks, MB/s.
    pub fn bandwidth_mb_s(platform: &'a Platform) -> Self {
        PlatformCosts {
            platform,
            basis: CostBasis::BandwidthMbS,
        }
    }

    fn bottleneck_bytes_s(&self, a: NodeId, b: NodeId) -> f64 {
        let r = self.platform.route(a, b);
        r.links()
            .iter()
            .map(|&l| self.platform.capacity_bytes_s(l))
            .fold(f64::INFINITY, f64::min)
    }
}

impl LinkCosts for PlatformCosts<'_> {
    fn node_count(&self) -> usize {
        self.platform.node_count()
    }

    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        if a == b {
            return 0.0;
        }
        let p = self.platform;
        match self.basis {
            CostBasis::LatencyMs => {
                1e3 * (p.route(a, b).latency_s() + p.route(b, a).latency_s()) / 2.0
            }
            CostBasis::TransferMs { bytes } => {
                let one = |x: NodeId, y: NodeId| {
                    p.route(x, y).latency_s() + bytes / self.bottleneck_bytes_s(x, y)
                };
                1e3 * (one(a, b) + one(b, a)) / 2.0
            }
            CostBasis::BandwidthMbS => {
                self.bottleneck_bytes_s(a, b)
                    .min(self.bottleneck_bytes_s(b, a))
                    / 1e6
            }
        }
    }

    fn unit(&self) -> CostUnit {
        match self.basis {
            CostBasis::LatencyMs | CostBasis::TransferMs { .. } => CostUnit::LatencyMs,
            CostBasis::BandwidthMbS => CostUnit::BandwidthMbS,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// Loads a scenario file; see the [module docs](self).
pub fn load_scenario(path: &Path) -> Result<Scenario, ScenarioError> {
    let no_pos = |message: String| ScenarioError::File {
        path: path.to_path_buf(),
        line: 0,
        column: 0,
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| no_pos(format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let prefix = std::str::from_utf8(&e.as_bytes()[..good]).unwrap_or("");
        let (line, column) = line_col(prefix, prefix.len());
        ScenarioError::File {
            path: path.to_path_buf(),
            line,
            column,
            message: "the file is not UTF-8 text".into(),
        }
    })?;
    parse_scenario(&text, path)
}

type Val = Option<Spanned<Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    name: Val,
    description: Val,
    seed: Val,
    // Parsed by `windrose_model::platform`.
    #[allow(dead_code)]
    platform: Option<serde::de::IgnoredAny>,
    generated_platform: Option<Spanned<generate::GenDoc>>,
    change: Option<Vec<Spanned<ChangeDoc>>>,
    mayhem: Option<Spanned<MayhemDoc>>,
    fail: Option<Vec<Spanned<FailDoc>>>,
    join: Option<Vec<Spanned<FailDoc>>>,
    workload: Option<Spanned<WorkloadDoc>>,
    compute: Option<Spanned<ComputeDoc>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComputeDoc {
    core_bytes_s: Val,
    cpu: Val,
    cluster: Option<Vec<Spanned<ComputeEntryDoc>>>,
    node: Option<Vec<Spanned<ComputeEntryDoc>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComputeEntryDoc {
    id: Val,
    cpu: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeDoc {
    #[serde(alias = "at")]
    at_s: Val,
    link: Val,
    bytes_s: Val,
    fraction: Val,
    latency_s: Val,
    both_directions: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MayhemDoc {
    period_s: Val,
    min_fraction: Val,
    max_fraction: Val,
    links: Val,
    start_s: Val,
    until_s: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailDoc {
    node: Val,
    #[serde(alias = "at")]
    at_s: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadDoc {
    kind: Val,
    protocol: Val,
    piece_bytes: Val,
    mob_variant: Val,
    tree: Val,
    root: Val,
    message_bytes: Val,
    segment_bytes: Val,
    repetitions: Val,
    sharing: Val,
    tree_costs: Val,
    compute_bytes_s: Val,
    send_mode: Val,
    node: Option<Vec<Spanned<WorkloadNodeDoc>>>,
    slicing: Val,
    backups: Val,
    rows: Val,
    records_per_node: Val,
    total_bytes: Val,
    record_seed: Val,
    keys: Val,
    skew: Val,
    distinct_keys: Val,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadNodeDoc {
    id: Val,
    compute_bytes_s: Val,
}

struct Src<'a> {
    text: &'a str,
    path: &'a Path,
}

type R<T> = Result<T, ScenarioError>;

impl Src<'_> {
    fn err(&self, span: &Range<usize>, message: impl Into<String>) -> ScenarioError {
        let (line, column) = line_col(self.text, span.start);
        ScenarioError::File {
            path: self.path.to_path_buf(),
            line,
            column,
            message: message.into(),
        }
    }

    fn no_pos(&self, message: impl Into<String>) -> ScenarioError {
        ScenarioError::File {
            path: self.path.to_path_buf(),
            line: 0,
            column: 0,
            message: message.into(),
        }
    }

    fn need<'v>(
        &self,
        v: &'v Val,
        table: &Range<usize>,
        key: &str,
        what: &str,
    ) -> R<&'v Spanned<Value>> {
        v.as_ref()
            .ok_or_else(|| self.err(table, format!("`{key}` is missing: {what}")))
    }

    fn type_err(&self, v: &Spanned<Value>, key: &str, expected: &str) -> ScenarioError {
        self.err(
            &v.span(),
            format!(
                "`{key}` must be {expected}, found {} `{}`",
                v.get_ref().type_str(),
                v.get_ref()
            ),
        )
    }

    fn f64(&self, v: &Spanned<Value>, key: &str) -> R<f64> {
        match v.get_ref() {
            Value::Float(x) => Ok(*x),
            Value::Integer(i) => Ok(*i as f64),
            _ => Err(self.type_err(v, key, "a number")),
        }
    }

    fn time(&self, v: &Spanned<Value>, key: &str) -> R<f64> {
        let x = self.f64(v, key)?;
        if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            Err(self.err(
                &v.span(),
                format!(
                    "`{key}` must be a finite, non-negative number of seconds, found {}",
                    compact(x)
                ),
            ))
        }
    }

    fn positive(&self, v: &Spanned<Value>, key: &str, unit: &str) -> R<f64> {
        let x = self.f64(v, key)?;
        if x.is_finite() && x > 0.0 {
            Ok(x)
        } else {
            Err(self.err(
                &v.span(),
                format!(
                    "`{key}` must be a positive, finite number of {unit}, found {}",
                    compact(x)
                ),
            ))
        }
    }

    fn int(&self, v: &Spanned<Value>, key: &str) -> R<i64> {
        match v.get_ref() {
            Value::Integer(i) => Ok(*i),
            _ => Err(self.type_err(v, key, "an integer")),
        }
    }

    fn str<'v>(&self, v: &'v Spanned<Value>, key: &str) -> R<&'v str> {
        match v.get_ref() {
            Value::String(s) => Ok(s),
            _ => Err(self.type_err(v, key, "a string")),
        }
    }

    fn bool(&self, v: &Spanned<Value>, key: &str) -> R<bool> {
        match v.get_ref() {
            Value::Boolean(b) => Ok(*b),
            _ => Err(self.type_err(v, key, "true or false")),
        }
    }

    fn size(&self, v: &Spanned<Value>, key: &str) -> R<u64> {
        match v.get_ref() {
            Value::Integer(i) if *i >= 0 => Ok(*i as u64),
            Value::Integer(i) => Err(self.err(
                &v.span(),
                format!("`{key}` must be a non-negative number of bytes, found {i}"),
            )),
            Value::String(s) => {
                parse_size(s).map_err(|m| self.err(&v.span(), format!("`{key}`: {m}")))
            }
            _ => Err(self.type_err(
                v,
                key,
                "a byte size (an integer, or a string such as \"64MiB\")",
            )),
        }
    }

    fn node(&self, v: &Spanned<Value>, key: &str, platform: &Platform) -> R<NodeId> {
        let i = self.int(v, key)?;
        let n = platform.node_count();
        if i < 0 || i as u64 >= n as u64 {
            return Err(self.err(
                &v.span(),
                format!(
                    "`{key}`: node {i} does not exist: the platform has {n} nodes ({})",
                    ids_in_words(n)
                ),
            ));
        }
        Ok(NodeId(i as u32))
    }

    fn choice<T: Copy>(&self, v: &Spanned<Value>, key: &str, options: &[(&str, T)]) -> R<T> {
        let s = self.str(v, key)?;
        options
            .iter()
            .find(|(name, _)| *name == s.trim())
            .map(|&(_, t)| t)
            .ok_or_else(|| {
                self.err(
                    &v.span(),
                    format!(
                        "`{key}`: unknown value {s:?}: expected one of {}",
                        names(options.iter().map(|(n, _)| *n))
                    ),
                )
            })
    }
}

/// What a `link = "…"` names.
#[derive(Copy, Clone, Debug, PartialEq)]
enum LinkRef {
    Link(LinkId),
    Intra(ClusterId),
    /// `pair:A:B`: the latency of the messages from A to B.
    Pair(NodeId, NodeId),
}

fn parse_link_ref(s: &str, platform: &Platform) -> Result<LinkRef, String> {
    let parts: Vec<&str> = s.trim().split(':').collect();
    let expected = "expected node_up:N, node_down:N, access_up:C, access_down:C, wan:FROM:TO, intra:C or pair:A:B";
    let num = |k: usize| -> Result<u32, String> {
        parts
            .get(k)
            .and_then(|p| p.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("link {s:?}: {expected}"))
    };
    let arity = |k: usize| {
        if parts.len() == k {
            Ok(())
        } else {
            Err(format!("link {s:?}: {expected}"))
        }
    };
    let (n, c) = (platform.node_count(), platform.cluster_count());
    let node = |k: usize| -> Result<NodeId, String> {
        let v = num(k)?;
        if (v as usize) < n {
            Ok(NodeId(v))
        } else {
            Err(format!(
                "link {s:?}: node {v} does not exist: the platform has {n} nodes ({})",
                ids_in_words(n)
            ))
        }
    };
    let cluster = |k: usize| -> Result<ClusterId, String> {
        let v = num(k)?;
        if (v as usize) < c {
            Ok(ClusterId(v))
        } else {
            Err(format!(
                "link {s:?}: cluster {v} does not exist: the platform has {c} clusters ({})",
                ids_in_words(c)
            ))
        }
    };
    match parts[0].trim() {
        "node_up" => arity(2).and_then(|_| Ok(LinkRef::Link(LinkId::NodeUp(node(1)?)))),
        "node_down" => arity(2).and_then(|_| Ok(LinkRef::Link(LinkId::NodeDown(node(1)?)))),
        "access_up" => arity(2).and_then(|_| Ok(LinkRef::Link(LinkId::AccessUp(cluster(1)?)))),
        "access_down" => arity(2).and_then(|_| Ok(LinkRef::Link(LinkId::AccessDown(cluster(1)?)))),
        "intra" => arity(2).and_then(|_| Ok(LinkRef::Intra(cluster(1)?))),
        "wan" => {
            arity(3)?;
            let (from, to) = (cluster(1)?, cluster(2)?);
            if from == to {
                return Err(format!(
                    "link {s:?}: a WAN link joins two different clusters"
                ));
            }
            Ok(LinkRef::Link(LinkId::Wan { from, to }))
        }
        "pair" => {
            arity(3)?;
            let (a, b) = (node(1)?, node(2)?);
            if a == b {
                return Err(format!(
                    "link {s:?}: a pair joins two different nodes, but both ends are node {a}"
                ));
            }
            Ok(LinkRef::Pair(a, b))
        }
        _ => Err(format!("unknown link {s:?}: {expected}")),
    }
}

fn reverse(link: LinkRef) -> LinkRef {
    match link {
        LinkRef::Link(LinkId::NodeUp(n)) => LinkRef::Link(LinkId::NodeDown(n)),
        LinkRef::Link(LinkId::NodeDown(n)) => LinkRef::Link(LinkId::NodeUp(n)),
        LinkRef::Link(LinkId::AccessUp(c)) => LinkRef::Link(LinkId::AccessDown(c)),
        LinkRef::Link(LinkId::AccessDown(c)) => LinkRef::Link(LinkId::AccessUp(c)),
        LinkRef::Link(LinkId::Wan { from, to }) => {
            LinkRef::Link(LinkId::Wan { from: to, to: from })
        }
        LinkRef::Intra(c) => LinkRef::Intra(c),
        LinkRef::Pair(a, b) => LinkRef::Pair(b, a),
    }
}

/// Parses a scenario (see the [module docs](self)); `path` is only used in error messages,
/// which name the file, line, column and key at fault.
pub fn parse_scenario(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let src = Src { text, path };
    let doc: Doc = toml::from_str(text).map_err(|e| {
        let message = e.message().trim().to_string();
        match e.span() {
            Some(span) => src.err(&span, message),
            None => src.no_pos(message),
        }
    })?;
    let platform = match (&doc.generated_platform, &doc.platform) {
        (Some(g), None) => generate::generate(&src, g)?,
        (Some(g), Some(_)) => return Err(generate::both_given(&src, g)),
        (None, _) => parse_platform_toml(text, path)?,
    };

    let name = match &doc.name {
        Some(v) => src.str(v, "name")?.to_string(),
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into()),
    };
    let description = doc
        .description
        .as_ref()
        .map(|v| src.str(v, "description").map(str::to_string))
        .transpose()?;
    let default_seed = match &doc.seed {
        Some(v) => {
            let s = src.int(v, "seed")?;
            u64::try_from(s).map_err(|_| {
                src.err(
                    &v.span(),
                    format!("`seed` must be a non-negative integer, found {s}"),
                )
            })?
        }
        None => 0,
    };

    let mut changes = Vec::new();
    for (k, ch) in doc.change.iter().flatten().enumerate() {
        parse_change(&src, ch, k, &platform, &mut changes)?;
    }

    let mayhem = doc
        .mayhem
        .as_ref()
        .map(|m| parse_mayhem(&src, m, &platform))
        .transpose()?;

    let mut failures = Vec::new();
    for (k, f) in doc.fail.iter().flatten().enumerate() {
        let span = f.span();
        let d = f.get_ref();
        let key = |name: &str| format!("fail[{k}].{name}");
        let node = src.need(&d.node, &span, &key("node"), "the node that fails")?;
        let node = src.node(node, &key("node"), &platform)?;
        let at = src.need(&d.at_s, &span, &key("at_s"), "when it fails, seconds")?;
        let at_s = src.time(at, &key("at_s"))?;
        failures.push(NodeFailure { node, at_s });
    }
    let compute = doc
        .compute
        .as_ref()
        .map(|c| parse_compute(&src, c, &platform))
        .transpose()?;
    let w = doc.workload.as_ref().ok_or_else(|| {
        src.no_pos("no `[workload]` table: expected `protocol`, `tree`, `root` and `message_bytes`")
    })?;
    let workload = parse_workload(&src, w, &platform, compute.as_ref())?;
    if let (Some(sort), Some(f)) = (&workload.sort, doc.fail.iter().flatten().next()) {
        if sort.protocol == SortProtocol::SampleSort || sort.backups == 0 {
            return Err(src.err(
                &f.span(),
                "`[[fail]]` in a sort workload needs `protocol = \"heterosort\"` with \
                 `backups` of 1 or more: the sample sort, and HeteroSort without copies, \
                 cannot restore a failed member's records",
            ));
        }
    }
    let mut joins: Vec<NodeFailure> = Vec::new();
    for (k, j) in doc.join.iter().flatten().enumerate() {
        let span = j.span();
        let d = j.get_ref();
        let key = |name: &str| format!("join[{k}].{name}");
        if workload.kind == WorkloadKind::Sort {
            return Err(src.err(
                &span,
                format!(
                    "`{}`: a sort cannot take a node mid-run (every member holds records from \
                     the start); joins need a broadcast, multicast or auto workload",
                    key("node")
                ),
            ));
        }
        if workload.kind == WorkloadKind::Scatter {
            return Err(src.err(
                &span,
                format!(
                    "`{}`: a scatter cannot take a node mid-run (its schedule gives every node its share at the start); joins need a broadcast or a multicast workload",
                    key("node")
                ),
            ));
        }
        let node = src.need(&d.node, &span, &key("node"), "the node that joins")?;
        let node = src.node(node, &key("node"), &platform)?;
        if node == workload.root {
            return Err(src.err(
                &span,
                format!(
                    "`{}`: the root cannot join late: it holds the data",
                    key("node")
                ),
            ));
        }
        if joins.iter().any(|j| j.node == node) {
            return Err(src.err(&span, format!("`{}`: node {node} joins twice", key("node"))));
        }
        let at = src.need(&d.at_s, &span, &key("at_s"), "when it joins, seconds")?;
        let at_s = src.time(at, &key("at_s"))?;
        joins.push(NodeFailure { node, at_s });
    }
    Ok(Scenario {
        name,
        description,
        source: path.to_path_buf(),
        default_seed,
        platform,
        changes,
        mayhem,
        failures,
        joins,
        workload,
        compute,
    })
}

/// The `[compute]` table: every node's share of a core.
fn parse_compute(src: &Src<'_>, c: &Spanned<ComputeDoc>, platform: &Platform) -> R<NodeCompute> {
    let d = c.get_ref();
    let share = |v: &Spanned<Value>, key: &str| -> R<f64> {
        let x = src.f64(v, key)?;
        if x.is_finite() && x > 0.0 && x <= MAX_CPU {
            Ok(x)
        } else {
            Err(src.err(
                &v.span(),
                format!(
                    "`{key}` must be a share of a CPU core above 0 and at most {} (0.25: a \
                     quarter of a core), found {}",
                    compact(MAX_CPU),
                    compact(x)
                ),
            ))
        }
    };
    let core_bytes_s = match &d.core_bytes_s {
        Some(v) => src.positive(v, "compute.core_bytes_s", "bytes/s")?,
        None => DEFAULT_CORE_BYTES_S,
    };
    let default = d
        .cpu
        .as_ref()
        .map(|v| share(v, "compute.cpu"))
        .transpose()?;
    let mut cpu = vec![default; platform.node_count()];
    let clusters = platform.cluster_count();
    let mut seen = vec![false; clusters];
    for (k, e) in d.cluster.iter().flatten().enumerate() {
        let key = |name: &str| format!("compute.cluster[{k}].{name}");
        let id = src.need(&e.get_ref().id, &e.span(), &key("id"), "the cluster")?;
        let i = src.int(id, &key("id"))?;
        if i < 0 || i as u64 >= clusters as u64 {
            return Err(src.err(
                &id.span(),
                format!(
                    "`{}`: cluster {i} does not exist: the platform has {clusters} clusters ({})",
                    key("id"),
                    ids_in_words(clusters)
                ),
            ));
        }
        if std::mem::replace(&mut seen[i as usize], true) {
            return Err(src.err(
                &id.span(),
                format!("cluster {i} is given twice in `[[compute.cluster]]`"),
            ));
        }
        let v = src.need(
            &e.get_ref().cpu,
            &e.span(),
            &key("cpu"),
            "its nodes' share of a core",
        )?;
        let x = share(v, &key("cpu"))?;
        for n in platform.nodes_of(ClusterId(i as u32)) {
            cpu[n as usize] = Some(x);
        }
    }
    let mut seen = vec![false; platform.node_count()];
    for (k, e) in d.node.iter().flatten().enumerate() {
        let key = |name: &str| format!("compute.node[{k}].{name}");
        let id = src.need(&e.get_ref().id, &e.span(), &key("id"), "the node")?;
        let node = src.node(id, &key("id"), platform)?;
        if std::mem::replace(&mut seen[node.index()], true) {
            return Err(src.err(
                &id.span(),
                format!("node {node} is given twice in `[[compute.node]]`"),
            ));
        }
        let v = src.need(
            &e.get_ref().cpu,
            &e.span(),
            &key("cpu"),
            "its share of a core",
        )?;
        cpu[node.index()] = Some(share(v, &key("cpu"))?);
    }
    Ok(NodeCompute { core_bytes_s, cpu })
}

fn parse_change(
    src: &Src<'_>,
    ch: &Spanned<ChangeDoc>,
    k: usize,
    platform: &Platform,
    out: &mut Vec<TimedChange>,
) -> R<()> {
    let span = ch.span();
    let d = ch.get_ref();
    let key = |name: &str| format!("change[{k}].{name}");
    let at = src.need(
        &d.at_s,
        &span,
        &key("at_s"),
        "when the change happens, seconds",
    )?;
    let at_s = src.time(at, &key("at_s"))?;
    let lv = src.need(
        &d.link,
        &span,
        &key("link"),
        "which link changes (node_up:N, node_down:N, access_up:C, access_down:C, wan:FROM:TO, intra:C or pair:A:B)",
    )?;
    let link = parse_link_ref(src.str(lv, &key("link"))?, platform)
        .map_err(|m| src.err(&lv.span(), format!("`{}`: {m}", key("link"))))?;
    let capacity = match (&d.bytes_s, &d.fraction) {
        (Some(b), Some(_)) => {
            return Err(src.err(
                &b.span(),
                format!(
                    "`{}` and `{}` both given: give one new capacity",
                    key("bytes_s"),
                    key("fraction")
                ),
            ))
        }
        (Some(b), None) => Some((
            src.positive(b, &key("bytes_s"), "bytes/s")?,
            false,
            b.span(),
        )),
        (None, Some(f)) => Some((
            src.positive(f, &key("fraction"), "the nominal capacity")?,
            true,
            f.span(),
        )),
        (None, None) => None,
    };
    let latency = d
        .latency_s
        .as_ref()
        .map(|v| src.time(v, &key("latency_s")).map(|x| (x, v.span())))
        .transpose()?;
    if capacity.is_none() && latency.is_none() {
        return Err(src.err(
            &span,
            format!("`change[{k}]` changes nothing: give `bytes_s` or `fraction` (a new capacity) and/or `latency_s`"),
        ));
    }
    // A pair is symmetric unless told otherwise; links are one-way unless told otherwise.
    let both = d
        .both_directions
        .as_ref()
        .map(|v| src.bool(v, &key("both_directions")))
        .transpose()?
        .unwrap_or(matches!(link, LinkRef::Pair(..)));
    if let (LinkRef::Pair(a, b), Some((_, _, ref vspan))) = (link, &capacity) {
        return Err(src.err(
            vspan,
            format!("`{}`: `pair:{a}:{b}` has only a latency (its messages share the capacities of their route's links); change `node_up:N`, `access_up:C`, `wan:FROM:TO` and the like for a capacity", key("link")),
        ));
    }
    let mut links = vec![link];
    if both && !matches!(link, LinkRef::Intra(_)) {
        links.push(reverse(link));
    }
    for l in links {
        if let Some((value, relative, ref vspan)) = capacity {
            let LinkRef::Link(id) = l else {
                return Err(src.err(
                    vspan,
                    format!("`{}`: an intra-cluster link (`intra:C`) has only a latency; name a node or access link to change a capacity", key("link")),
                ));
            };
            let bytes_s = if relative {
                value * platform.capacity_bytes_s(id)
            } else {
                value
            };
            out.push(TimedChange {
                at_s,
                change: Change::Capacity { link: id, bytes_s },
            });
        }
        if let Some((latency_s, ref lspan)) = latency {
            let change = match l {
                LinkRef::Intra(cluster) => Change::IntraLatency { cluster, latency_s },
                LinkRef::Link(LinkId::Wan { from, to }) => Change::WanLatency { from, to, latency_s },
                LinkRef::Pair(from, to) => Change::PairLatency { from, to, latency_s },
                LinkRef::Link(other) => {
                    return Err(src.err(
                        lspan,
                        format!("`{}`: the {other} has no latency of its own (node links carry half the cluster's intra latency, access links none); change `intra:C`, a `wan:FROM:TO` link or a `pair:A:B`", key("latency_s")),
                    ))
                }
            };
            out.push(TimedChange { at_s, change });
        }
    }
    Ok(())
}

fn parse_mayhem(src: &Src<'_>, m: &Spanned<MayhemDoc>, platform: &Platform) -> R<Mayhem> {
    let span = m.span();
    let d = m.get_ref();
    let period = src.need(
        &d.period_s,
        &span,
        "mayhem.period_s",
        "seconds between draws (seed 002: 5)",
    )?;
    let period_s = src.positive(period, "mayhem.period_s", "seconds")?;
    if period_s < MIN_MAYHEM_PERIOD_S {
        return Err(src.err(
            &period.span(),
            format!(
                "`mayhem.period_s` is {}, below the shortest period of {} s (weather that \
                 changes faster than a round trip means nothing to the flows)",
                compact(period_s),
                compact(MIN_MAYHEM_PERIOD_S)
            ),
        ));
    }
    let min_fraction = match &d.min_fraction {
        Some(v) => src.positive(v, "mayhem.min_fraction", "the nominal capacity")?,
        None => 0.1,
    };
    let max_fraction = match &d.max_fraction {
        Some(v) => {
            let x = src.positive(v, "mayhem.max_fraction", "the nominal capacity")?;
            if x < min_fraction {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`mayhem.max_fraction` ({}) is below `mayhem.min_fraction` ({})",
                        compact(x),
                        compact(min_fraction)
                    ),
                ));
            }
            x
        }
        None => 1.0_f64.max(min_fraction),
    };
    let links = match &d.links {
        Some(v) => src.choice(v, "mayhem.links", &MayhemLinks::ALL.map(|l| (l.name(), l)))?,
        None => MayhemLinks::All,
    };
    let start_s = match &d.start_s {
        Some(v) => src.time(v, "mayhem.start_s")?,
        None => 0.0,
    };
    let until_s = match &d.until_s {
        Some(v) => {
            let u = src.time(v, "mayhem.until_s")?;
            if u < start_s {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`mayhem.until_s` ({}) is before `mayhem.start_s` ({})",
                        compact(u),
                        compact(start_s)
                    ),
                ));
            }
            Some(u)
        }
        None => None,
    };
    let mayhem = Mayhem {
        period_s,
        min_fraction,
        max_fraction,
        links,
        start_s,
        until_s,
    };
    // With an end, the number of draws is known now; without, the run stops when it reaches
    // the bound (see `MAX_MAYHEM_CHANGES`).
    if let Some(u) = until_s {
        let changes = (((u - start_s) / period_s).floor() + 1.0)
            * mayhem.selected_links(platform).len() as f64;
        if changes > MAX_MAYHEM_CHANGES as f64 {
            return Err(src.err(
                &period.span(),
                format!(
                    "`mayhem.period_s` = {} from {} s to `until_s` {} s makes {} link changes, \
                     more than the {MAX_MAYHEM_CHANGES} a run may apply: make the period longer",
                    compact(period_s),
                    compact(start_s),
                    compact(u),
                    compact(changes)
                ),
            ));
        }
    }
    Ok(mayhem)
}

/// Every node's compute speed, bytes/s: `[compute]`, else `workload.compute_bytes_s` and
/// `[[workload.node]]`; with neither, instant when `instant_default`, else
/// [`DEFAULT_CORE_BYTES_S`].
fn node_speeds(
    src: &Src<'_>,
    d: &WorkloadDoc,
    platform: &Platform,
    compute: Option<&NodeCompute>,
    instant_default: bool,
) -> R<Vec<f64>> {
    let given = d
        .compute_bytes_s
        .as_ref()
        .map(|v| v.span())
        .or_else(|| d.node.as_ref().and_then(|v| v.first()).map(|n| n.span()));
    if let (Some(span), Some(_)) = (&given, compute) {
        return Err(src.err(
            span,
            "`workload.compute_bytes_s` / `[[workload.node]]` and `[compute]` both give node \
             speeds: keep `[compute]` (it also sets the testbed's CPU quotas)",
        ));
    }
    let default_speed = match &d.compute_bytes_s {
        Some(v) => src.positive(v, "workload.compute_bytes_s", "bytes/s")?,
        None if given.is_none() && instant_default => f64::INFINITY,
        None => DEFAULT_CORE_BYTES_S,
    };
    let mut compute_bytes_s: Vec<f64> = match compute {
        Some(c) => (0..platform.node_count()).map(|i| c.bytes_s(i)).collect(),
        None => vec![default_speed; platform.node_count()],
    };
    let mut seen = vec![false; platform.node_count()];
    for (k, nd) in d.node.iter().flatten().enumerate() {
        let nspan = nd.span();
        let nd_ = nd.get_ref();
        let key = |name: &str| format!("workload.node[{k}].{name}");
        let id = src.need(&nd_.id, &nspan, &key("id"), "the node")?;
        let node = src.node(id, &key("id"), platform)?;
        if std::mem::replace(&mut seen[node.index()], true) {
            return Err(src.err(
                &id.span(),
                format!("node {node} is given twice in `[[workload.node]]`"),
            ));
        }
        let sp = src.need(
            &nd_.compute_bytes_s,
            &nspan,
            &key("compute_bytes_s"),
            "the node's compute speed, bytes/s",
        )?;
        compute_bytes_s[node.index()] = src.positive(sp, &key("compute_bytes_s"), "bytes/s")?;
    }
    Ok(compute_bytes_s)
}

/// Errors on the first of `keys` given: it does not apply to this workload (`why`).
fn refuse(src: &Src<'_>, keys: &[(&Val, &str)], why: &str) -> R<()> {
    for (v, key) in keys {
        if let Some(v) = v {
            return Err(src.err(&v.span(), format!("`workload.{key}` {why}")));
        }
    }
    Ok(())
}

/// `workload.repetitions` of a workload that runs once: absent or 1.
fn once_only(src: &Src<'_>, v: &Val, what: &str) -> R<()> {
    if let Some(v) = v {
        if src.int(v, "workload.repetitions")? != 1 {
            return Err(src.err(
                &v.span(),
                format!("`workload.repetitions`: {what} runs once (give 1 or leave it out)"),
            ));
        }
    }
    Ok(())
}

fn sharing_of(src: &Src<'_>, v: &Val) -> R<SharingPolicy> {
    match v {
        Some(v) => src.choice(
            v,
            "workload.sharing",
            &[
                ("max-min", SharingPolicy::MaxMin),
                ("rtt-weighted", SharingPolicy::RttWeighted),
            ],
        ),
        None => Ok(SharingPolicy::MaxMin),
    }
}

/// A `kind = "sort"` workload: see [sort workloads](self#sort-workloads).
fn parse_sort_workload(
    src: &Src<'_>,
    w: &Spanned<WorkloadDoc>,
    platform: &Platform,
    compute: Option<&NodeCompute>,
) -> R<Workload> {
    let span = w.span();
    let d = w.get_ref();
    refuse(
        src,
        &[
            (&d.tree, "tree"),
            (&d.tree_costs, "tree_costs"),
            (&d.segment_bytes, "segment_bytes"),
            (&d.piece_bytes, "piece_bytes"),
            (&d.mob_variant, "mob_variant"),
            (&d.send_mode, "send_mode"),
        ],
        "does not apply to a sort workload",
    )?;
    refuse(
        src,
        &[(&d.message_bytes, "message_bytes")],
        "does not apply to a sort workload: give `records_per_node` or `total_bytes`",
    )?;
    once_only(src, &d.repetitions, "a sort workload")?;
    let pv = src.need(
        &d.protocol,
        &span,
        "workload.protocol",
        "the sort (heterosort or sample-sort)",
    )?;
    let protocol = src.choice(
        pv,
        "workload.protocol",
        &SortProtocol::ALL.map(|p| (p.name(), p)),
    )?;
    let n = platform.node_count();
    if protocol == SortProtocol::SampleSort {
        refuse(
            src,
            &[
                (&d.slicing, "slicing"),
                (&d.backups, "backups"),
                (&d.rows, "rows"),
            ],
            "applies to `protocol = \"heterosort\"` only",
        )?;
    }
    let slicing = match &d.slicing {
        Some(v) => src.choice(
            v,
            "workload.slicing",
            &[
                (Slicing::Speed.name(), Slicing::Speed),
                ("speed", Slicing::Speed),
                (Slicing::Equal.name(), Slicing::Equal),
                (Slicing::Splitters.name(), Slicing::Splitters),
            ],
        )?,
        None => Slicing::Speed,
    };
    let backups = match &d.backups {
        Some(v) => {
            let b = src.int(v, "workload.backups")?;
            if b < 0 || b as u64 >= n as u64 {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.backups` must be from 0 to {} (each copy is held by \
                         another node), found {b}",
                        n - 1
                    ),
                ));
            }
            b as u32
        }
        None => windrose_proto::heterosort::HsortSpec::DEFAULT_BACKUPS.min(n as u32 - 1),
    };
    let rows = match &d.rows {
        Some(v) => {
            let r = src.int(v, "workload.rows")?;
            if r < 1 || r as u64 > n as u64 || !n.is_multiple_of(r as usize) {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.rows` must divide the {n} nodes (the torus is rows x cols), \
                         found {r}"
                    ),
                ));
            }
            r as usize
        }
        None => windrose_proto::heterosort::HsortSpec::squarest_torus(n).0 as usize,
    };
    let records = match (&d.records_per_node, &d.total_bytes) {
        (Some(a), Some(_)) => {
            return Err(src.err(
                &a.span(),
                "`workload.records_per_node` and `workload.total_bytes` both given: give one",
            ))
        }
        (None, None) => {
            return Err(src.err(
                &span,
                "the records are missing: give `workload.records_per_node` (records of 100 \
                 bytes on each node) or `workload.total_bytes` (spread evenly)",
            ))
        }
        (Some(v), None) => {
            let r = src.int(v, "workload.records_per_node")?;
            if r < 1 {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.records_per_node` must be at least 1 (a node without \
                         records refuses the sort), found {r}"
                    ),
                ));
            }
            if (r as u64).saturating_mul((n * RECORD_LEN) as u64) > MAX_SORT_BYTES {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.records_per_node` = {r} on {n} nodes is more than the {} \
                         the simulator may sort",
                        format_size(MAX_SORT_BYTES)
                    ),
                ));
            }
            vec![r as u64; n]
        }
        (None, Some(v)) => {
            let b = src.size(v, "workload.total_bytes")?;
            let len = RECORD_LEN as u64;
            if b % len != 0 {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.total_bytes` must be a whole number of {len}-byte records, \
                         found {b} bytes"
                    ),
                ));
            }
            if b / len < n as u64 {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.total_bytes` gives {} records for {n} nodes: every node \
                         needs at least one (a node without records refuses the sort)",
                        b / len
                    ),
                ));
            }
            if b > MAX_SORT_BYTES {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`workload.total_bytes` is {}, more than the {} the simulator may sort",
                        format_size(b),
                        format_size(MAX_SORT_BYTES)
                    ),
                ));
            }
            let (each, extra) = (b / len / n as u64, b / len % n as u64);
            (0..n as u64).map(|i| each + u64::from(i < extra)).collect()
        }
    };
    let record_seed = d
        .record_seed
        .as_ref()
        .map(|v| {
            let s = src.int(v, "workload.record_seed")?;
            u64::try_from(s).map_err(|_| {
                src.err(
                    &v.span(),
                    format!("`workload.record_seed` must be a non-negative integer, found {s}"),
                )
            })
        })
        .transpose()?;
    let kind = match &d.keys {
        Some(v) => src.choice(
            v,
            "workload.keys",
            &[("uniform", 0u8), ("skewed", 1), ("duplicates", 2)],
        )?,
        None => 0,
    };
    if kind != 1 {
        refuse(
            src,
            &[(&d.skew, "skew")],
            "applies to `keys = \"skewed\"` only",
        )?;
    }
    if kind != 2 {
        refuse(
            src,
            &[(&d.distinct_keys, "distinct_keys")],
            "applies to `keys = \"duplicates\"` only",
        )?;
    }
    let keys = match kind {
        1 => {
            let exponent = match &d.skew {
                Some(v) => {
                    let x = src.f64(v, "workload.skew")?;
                    if !(1.0..=MAX_SKEW).contains(&x) {
                        return Err(src.err(
                            &v.span(),
                            format!(
                                "`workload.skew` must be from 1 (uniform) to {}, found {}",
                                compact(MAX_SKEW),
                                compact(x)
                            ),
                        ));
                    }
                    x
                }
                None => DEFAULT_SKEW,
            };
            KeyDistribution::Skewed { exponent }
        }
        2 => {
            let v = src.need(
                &d.distinct_keys,
                &span,
                "workload.distinct_keys",
                "how many distinct keys the records share",
            )?;
            let k = src.int(v, "workload.distinct_keys")?;
            if k < 1 {
                return Err(src.err(
                    &v.span(),
                    format!("`workload.distinct_keys` must be at least 1, found {k}"),
                ));
            }
            KeyDistribution::Duplicates { distinct: k as u64 }
        }
        _ => KeyDistribution::Uniform,
    };
    let root = match &d.root {
        Some(v) => src.node(v, "workload.root", platform)?,
        None => NodeId(0),
    };
    let sort = SortWorkload {
        protocol,
        slicing,
        backups,
        rows: rows as u32,
        cols: (n / rows) as u32,
        records,
        record_seed,
        keys,
    };
    let total = sort.total_bytes();
    Ok(Workload {
        kind: WorkloadKind::Sort,
        tree: TreeAlgorithm::Flat,
        root,
        message_bytes: total,
        segment_bytes: total.max(1),
        repetitions: 1,
        sharing: sharing_of(src, &d.sharing)?,
        tree_costs: TreeCosts::Latency,
        // A sort computes: a node given no speed computes at one core's.
        compute_bytes_s: node_speeds(src, d, platform, compute, false)?,
        send_mode: ScatterSends::Sequential,
        multicast: None,
        sort: Some(sort),
        auto: None,
    })
}

/// `workload.repetitions`: 1 to [`MAX_REPETITIONS`], 1 when not given.
fn repetitions(src: &Src<'_>, v: &Val) -> R<u64> {
    let Some(v) = v else {
        return Ok(1);
    };
    let r = src.int(v, "workload.repetitions")?;
    if r < 1 || r as u64 > MAX_REPETITIONS {
        return Err(src.err(
            &v.span(),
            format!("`workload.repetitions` must be between 1 and {MAX_REPETITIONS}, found {r}"),
        ));
    }
    Ok(r as u64)
}

/// The size `v` of the parts (segments or pieces) a message of `message_bytes` is cut into,
/// from `key`: between a byte and `u32::MAX`, and at most [`MAX_PIECES`] parts.
fn part_bytes(src: &Src<'_>, v: &Spanned<Value>, key: &str, message_bytes: u64) -> R<u64> {
    let b = src.size(v, key)?;
    if b == 0 || b > u64::from(u32::MAX) {
        return Err(src.err(
            &v.span(),
            format!(
                "`{key}` must be between 1 byte and {}, found {b}",
                format_size(u64::from(u32::MAX))
            ),
        ));
    }
    let parts = message_bytes.div_ceil(b);
    if parts > MAX_PIECES {
        return Err(src.err(
            &v.span(),
            format!(
                "`{key}` cuts the {} message into {parts} parts, more than {MAX_PIECES}: use \
                 at least {}",
                format_size(message_bytes),
                format_size(message_bytes.div_ceil(MAX_PIECES))
            ),
        ));
    }
    Ok(b)
}

/// A `kind = "auto"` workload: see [auto workloads](self#auto-workloads).
fn parse_auto_workload(
    src: &Src<'_>,
    w: &Spanned<WorkloadDoc>,
    platform: &Platform,
    compute: Option<&NodeCompute>,
) -> R<Workload> {
    let span = w.span();
    let d = w.get_ref();
    if let Some(v) = &d.protocol {
        if src.str(v, "workload.protocol")?.trim() != "auto" {
            return Err(src.err(
                &v.span(),
                "`workload.protocol` does not apply to `kind = \"auto\"`: the automatic choice \
                 picks the protocol (leave it out, or use `kind = \"broadcast\"` or \
                 \"multicast\" to fix one)",
            ));
        }
    }
    refuse(
        src,
        &[
            (&d.tree, "tree"),
            (&d.tree_costs, "tree_costs"),
            (&d.mob_variant, "mob_variant"),
            (&d.send_mode, "send_mode"),
        ],
        "does not apply to `kind = \"auto\"`: the automatic choice plans the protocol",
    )?;
    let root = match &d.root {
        Some(v) => src.node(v, "workload.root", platform)?,
        None => NodeId(0),
    };
    let mv = src.need(
        &d.message_bytes,
        &span,
        "workload.message_bytes",
        "the size of the message, e.g. \"64MiB\"",
    )?;
    let message_bytes = src.size(mv, "workload.message_bytes")?;
    if message_bytes == 0 || message_bytes > MAX_MESSAGE_BYTES {
        return Err(src.err(
            &mv.span(),
            format!(
                "`workload.message_bytes` must be from 1 byte to {}, found {}",
                format_size(MAX_MESSAGE_BYTES),
                format_size(message_bytes)
            ),
        ));
    }
    let cut = |v: &Val, key: &str| -> R<u64> {
        match v {
            Some(v) => part_bytes(src, v, key, message_bytes),
            None => Ok(u64::from(DEFAULT_AUTO_PIECE_BYTES)),
        }
    };
    let segment_bytes = cut(&d.segment_bytes, "workload.segment_bytes")?;
    let piece_bytes = cut(&d.piece_bytes, "workload.piece_bytes")? as u32;
    let repetitions = repetitions(src, &d.repetitions)?;
    for (v, key) in [
        (&d.slicing, "slicing"),
        (&d.backups, "backups"),
        (&d.rows, "rows"),
        (&d.records_per_node, "records_per_node"),
        (&d.total_bytes, "total_bytes"),
        (&d.record_seed, "record_seed"),
        (&d.keys, "keys"),
        (&d.skew, "skew"),
        (&d.distinct_keys, "distinct_keys"),
    ] {
        refuse(
            src,
            &[(v, key)],
            "applies to sort workloads only (`kind = \"sort\"`)",
        )?;
    }
    Ok(Workload {
        kind: WorkloadKind::Auto,
        tree: TreeAlgorithm::Flat,
        root,
        message_bytes,
        segment_bytes,
        repetitions,
        sharing: sharing_of(src, &d.sharing)?,
        tree_costs: TreeCosts::Latency,
        compute_bytes_s: node_speeds(src, d, platform, compute, true)?,
        send_mode: ScatterSends::Sequential,
        multicast: None,
        sort: None,
        auto: Some(AutoWorkload { piece_bytes }),
    })
}

fn parse_workload(
    src: &Src<'_>,
    w: &Spanned<WorkloadDoc>,
    platform: &Platform,
    compute: Option<&NodeCompute>,
) -> R<Workload> {
    let span = w.span();
    let d = w.get_ref();
    let kinds = [
        ("broadcast", WorkloadKind::Broadcast),
        ("scatter", WorkloadKind::Scatter),
        ("multicast", WorkloadKind::Multicast),
        ("sort", WorkloadKind::Sort),
        ("auto", WorkloadKind::Auto),
    ];
    let given_kind = d
        .kind
        .as_ref()
        .map(|v| src.choice(v, "workload.kind", &kinds))
        .transpose()?;
    match given_kind {
        Some(WorkloadKind::Sort) => return parse_sort_workload(src, w, platform, compute),
        Some(WorkloadKind::Auto) => return parse_auto_workload(src, w, platform, compute),
        _ => {}
    }
    for (v, key) in [
        (&d.slicing, "slicing"),
        (&d.backups, "backups"),
        (&d.rows, "rows"),
        (&d.records_per_node, "records_per_node"),
        (&d.total_bytes, "total_bytes"),
        (&d.record_seed, "record_seed"),
        (&d.keys, "keys"),
        (&d.skew, "skew"),
        (&d.distinct_keys, "distinct_keys"),
    ] {
        if let Some(v) = v {
            return Err(src.err(
                &v.span(),
                format!("`workload.{key}` applies to sort workloads only (`kind = \"sort\"`)"),
            ));
        }
    }
    let (kind, multicast_protocol) = match given_kind {
        Some(WorkloadKind::Multicast) => {
            let pv = src.need(
                &d.protocol,
                &span,
                "workload.protocol",
                "the multicast protocol (mob, bittorrent, balanced or magpie)",
            )?;
            let p = src.choice(
                pv,
                "workload.protocol",
                &MulticastProtocol::ALL.map(|p| (p.name(), p)),
            )?;
            (WorkloadKind::Multicast, Some(p))
        }
        Some(k) => {
            if let Some(pv) = &d.protocol {
                let p = src.choice(pv, "workload.protocol", &kinds[..2])?;
                if p != k {
                    return Err(src.err(
                        &pv.span(),
                        format!(
                            "`workload.protocol` ({}) contradicts `workload.kind` ({})",
                            p.name(),
                            k.name()
                        ),
                    ));
                }
            }
            (k, None)
        }
        None => {
            let kv = src.need(
                &d.protocol,
                &span,
                "workload.protocol",
                "\"broadcast\" or \"scatter\" (or `kind = \"multicast\"` with a multicast protocol)",
            )?;
            let k = src
                .choice(kv, "workload.protocol", &kinds[..2])
                .map_err(|e| match (e, src.str(kv, "workload.protocol")) {
                    (
                        ScenarioError::File {
                            path,
                            line,
                            column,
                            message,
                        },
                        Ok(name),
                    ) if name.trim().parse::<MulticastProtocol>().is_ok() => ScenarioError::File {
                        path,
                        line,
                        column,
                        message: format!("{message} (for a multicast, add `kind = \"multicast\"`)"),
                    },
                    (e, _) => e,
                })?;
            (k, None)
        }
    };
    let tree = if kind == WorkloadKind::Multicast {
        if let Some(tv) = &d.tree {
            return Err(src.err(
                &tv.span(),
                "`workload.tree` applies to broadcasts and scatters (a multicast's protocol builds its own trees or swarm)",
            ));
        }
        if multicast_protocol == Some(MulticastProtocol::Magpie) {
            TreeAlgorithm::Magpie
        } else {
            TreeAlgorithm::Flat
        }
    } else {
        let tv = src.need(
            &d.tree,
            &span,
            "workload.tree",
            &format!("the tree algorithm ({})", TreeAlgorithm::NAMES.join(", ")),
        )?;
        src.str(tv, "workload.tree")?
            .parse::<TreeAlgorithm>()
            .map_err(|m| src.err(&tv.span(), format!("`workload.tree`: {m}")))?
    };
    let root = match &d.root {
        Some(v) => src.node(v, "workload.root", platform)?,
        None => NodeId(0),
    };
    let mv = src.need(
        &d.message_bytes,
        &span,
        "workload.message_bytes",
        "the size of the message or load, e.g. \"64MiB\"",
    )?;
    let message_bytes = src.size(mv, "workload.message_bytes")?;
    if kind == WorkloadKind::Multicast && message_bytes == 0 {
        return Err(src.err(
            &mv.span(),
            "`workload.message_bytes` must be at least 1 byte for a multicast",
        ));
    }
    if message_bytes > MAX_MESSAGE_BYTES {
        return Err(src.err(
            &mv.span(),
            format!(
                "`workload.message_bytes` is {}, more than the {} a simulated root may hold",
                format_size(message_bytes),
                format_size(MAX_MESSAGE_BYTES)
            ),
        ));
    }
    let segment_bytes = match &d.segment_bytes {
        Some(v) => {
            if kind != WorkloadKind::Broadcast {
                return Err(src.err(&v.span(), "`workload.segment_bytes` applies to broadcasts only (a scatter sends each share whole, a multicast cuts the data into `piece_bytes` pieces)"));
            }
            let s = src.size(v, "workload.segment_bytes")?;
            if s == 0 {
                return Err(src.err(
                    &v.span(),
                    "`workload.segment_bytes` must be at least 1 byte",
                ));
            }
            s
        }
        None => message_bytes.max(1),
    };
    if let Some(v) = &d.segment_bytes {
        let segments = message_bytes.div_ceil(segment_bytes);
        if segments > MAX_PIECES {
            return Err(src.err(
                &v.span(),
                format!(
                    "`workload.segment_bytes` cuts the {} message into {segments} segments, \
                     more than {MAX_PIECES}: use segments of at least {}",
                    format_size(message_bytes),
                    format_size(message_bytes.div_ceil(MAX_PIECES))
                ),
            ));
        }
    }
    let repetitions = repetitions(src, &d.repetitions)?;
    let sharing = match &d.sharing {
        Some(v) => src.choice(
            v,
            "workload.sharing",
            &[
                ("max-min", SharingPolicy::MaxMin),
                ("rtt-weighted", SharingPolicy::RttWeighted),
            ],
        )?,
        None => SharingPolicy::MaxMin,
    };
    let tree_costs = match &d.tree_costs {
        Some(v) if kind == WorkloadKind::Multicast => {
            return Err(src.err(
                &v.span(),
                "`workload.tree_costs` applies to broadcasts and scatters",
            ))
        }
        Some(v) => src.choice(
            v,
            "workload.tree_costs",
            &TreeCosts::ALL.map(|c| (c.name(), c)),
        )?,
        None => TreeCosts::Latency,
    };
    let scatter_only = |v: &Val, name: &str| -> R<()> {
        match v {
            Some(v) if kind != WorkloadKind::Scatter => Err(src.err(
                &v.span(),
                format!("`workload.{name}` applies to scatters only"),
            )),
            _ => Ok(()),
        }
    };
    scatter_only(&d.send_mode, "send_mode")?;
    let compute_bytes_s = node_speeds(
        src,
        d,
        platform,
        compute,
        // A broadcast or multicast given no speed computes instantly, as it always did.
        kind != WorkloadKind::Scatter,
    )?;
    let send_mode = match &d.send_mode {
        Some(v) => src.choice(
            v,
            "workload.send_mode",
            &ScatterSends::ALL.map(|m| (m.name(), m)),
        )?,
        None => ScatterSends::Sequential,
    };
    let multicast = match multicast_protocol {
        Some(protocol) => {
            let piece_bytes = match &d.piece_bytes {
                Some(v) => part_bytes(src, v, "workload.piece_bytes", message_bytes)? as u32,
                None => DEFAULT_PIECE_BYTES,
            };
            let mob_variant = match &d.mob_variant {
                Some(v) if protocol != MulticastProtocol::Mob => {
                    return Err(src.err(
                        &v.span(),
                        "`workload.mob_variant` applies to `protocol = \"mob\"` only",
                    ))
                }
                Some(v) => src.choice(
                    v,
                    "workload.mob_variant",
                    &MobVariant::ALL.map(|m| (m.name(), m)),
                )?,
                None => MobVariant::Windrose,
            };
            Some(MulticastWorkload {
                protocol,
                piece_bytes,
                mob_variant,
            })
        }
        None => {
            for (v, key) in [
                (&d.piece_bytes, "workload.piece_bytes"),
                (&d.mob_variant, "workload.mob_variant"),
            ] {
                if let Some(v) = v {
                    return Err(src.err(
                        &v.span(),
                        format!("`{key}` applies to multicasts only (`kind = \"multicast\"`)"),
                    ));
                }
            }
            None
        }
    };
    Ok(Workload {
        kind,
        tree,
        root,
        message_bytes,
        segment_bytes,
        repetitions,
        sharing,
        tree_costs,
        compute_bytes_s,
        send_mode,
        multicast,
        sort: None,
        auto: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_doc_example_parses() {
        let src = include_str!("mod.rs");
        let start = src.find("//! ```toml\n").expect("doc example") + "//! ```toml\n".len();
        let end = start + src[start..].find("//! ```\n").expect("end of example");
        let text: String = src[start..end]
            .lines()
            .map(|l| l.strip_prefix("//!").unwrap_or(l).trim_start())
            .map(|l| format!("{l}\n"))
            .collect();
        let s = parse_scenario(&text, Path::new("doc.toml")).unwrap();
        assert_eq!(s.name, "two-sites");
        assert_eq!(s.default_seed, 7);
        assert_eq!(s.platform.node_count(), 8);
        assert_eq!(s.changes.len(), 6);
        assert_eq!(
            s.changes[4].change,
            Change::PairLatency {
                from: NodeId(0),
                to: NodeId(5),
                latency_s: 2.0
            }
        );
        assert_eq!(s.failures.len(), 1);
        assert_eq!(s.workload.message_bytes, 8 << 20);
        assert_eq!(s.workload.segment_bytes, 256 << 10);
        assert_eq!(s.mayhem.unwrap().links, MayhemLinks::All);
        let cpu = &s.compute.as_ref().unwrap().cpu;
        assert_eq!((cpu[0], cpu[4], cpu[7]), (Some(1.0), Some(0.5), Some(0.25)));
        s.tree().unwrap();
    }
}
