//! `windrose reproduce …`: regenerates the papers' tables and figures.
//!
//! Each reproduction prints its results beside the paper's on stdout and writes CSV files, PNG
//! plots and a `REPORT.md` into `--out` (every file written atomically: a temporary file in the
//! same directory, then a rename). Progress bars go to stderr.

mod adaptive_trees;
mod auto;
mod dlt;
mod heterosort;
mod mob;
mod mst_collectives;
mod output;
mod plot;
mod weather;

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

/// One line of a reproduction's check list: does our number agree with the paper's?
pub(crate) struct Check {
    pub ok: bool,
    pub what: String,
}

/// ✓ or ✗, as every reproduction marks a comparison with the paper.
pub(crate) fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

/// What to reproduce.
#[derive(Debug, Subcommand)]
pub enum ReproduceCommand {
    /// Tables 2-4 and 6-8 and Figures 7-9 of Figueira & Mendes (adaptive binomial trees).
    AdaptiveTrees(AdaptiveTreesArgs),
    /// Example 1 of Kim, Jee & Lee (divisible load on trees): alpha_0 = 0.9496 left to right and
    /// 0.6284 right to left, and the 24 send orders of its subtree ranked. Exits with code 1 if
    /// a value disagrees with the paper.
    Dlt(DltArgs),
    /// Seed 004 (Thomé & Drummond), first part: Table 1's six sites in the simulator, the
    /// MPICH-like binomial vs the MagPIe-like tree from process 12 (the 96.5 ms vs 14.9 ms paths
    /// to process 0) and Table 2's 1, 4 and 16 broadcasts of 24 bytes, ours beside the paper's.
    /// Exits with code 1 if a path disagrees with the paper.
    MstCollectives(MstCollectivesArgs),
    /// Seed 002 (den Burger & Kielmann, MOB) in the simulator: Figs. 4-6, the 100 ms
    /// experiment and the MagPIe comparison, Balanced Multicasting, BitTorrent, MOB and MagPIe
    /// as fractions of the max-flow bound, the paper's claims checked. Exits with code 1 if a
    /// multicast failed to deliver every byte.
    Mob(MobArgs),
    /// Seed 003 (Yang et al., HeteroSort): Fig. 1 and Table 1 beside the paper's, then from
    /// the simulator the cycles to termination and the bytes sent per record against the
    /// number of nodes (4-64; --full up to 256), HeteroSort beside the sample sort. CSV + PNG.
    Heterosort(heterosort::HeterosortArgs),
    /// Issue 16's choice grid in the simulator: at every message size x WAN latency x WAN
    /// bandwidth x cluster shape, the automatic choice beside every candidate simulated (tree
    /// broadcast, MOB, Balanced Multicasting), the fraction of points where auto is within 10 %
    /// of the best and the worst ratio. Exits with code 1 below 95 % or above 1.5x.
    Auto(auto::AutoArgs),
    /// Issue 16's series of broadcasts while a WAN link slows (static, adapt, rebuild, an
    /// oracle) in the simulator, beside the testbed's (`data/weather/series.sh`).
    Weather(weather::WeatherArgs),
}

/// Options of `windrose reproduce mob`.
#[derive(Debug, Args)]
pub struct MobArgs {
    /// 60 MB instead of 600 MB, scenario clocks scaled to match, fewer sizes (CI: under two
    /// minutes on two cores).
    #[arg(long)]
    pub quick: bool,
    /// Directory for the CSV files, PNG plots, REPORT.md and results.json (created if missing).
    #[arg(long, default_value = "reproduce-out/mob")]
    pub out: PathBuf,
    /// Seed of the mayhem weather and of the protocols' random choices.
    #[arg(long, default_value_t = 2)]
    pub seed: u64,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Options of `windrose reproduce mst-collectives`.
#[derive(Debug, Args)]
pub struct MstCollectivesArgs {
    /// Also write into this directory (created if missing) Table 2, GHS's rows and Figs. 5
    /// and 7, ours beside the paper's, as CSV (`mst-collectives-{table2,ghs,figs}.csv`), and
    /// three plots (`mst-collectives-{table2,figs,ghs-growth}.png`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// GHS's growth up to 4,096 nodes (the default stops at 512, for CI).
    #[arg(long)]
    pub full: bool,
}

/// Options of `windrose reproduce dlt`.
#[derive(Debug, Args)]
pub struct DltArgs {
    /// Also write the ranking of the 24 orders as CSV (`dlt-example1-orders.csv`) into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Options of `windrose reproduce adaptive-trees`.
#[derive(Debug, Args)]
pub struct AdaptiveTreesArgs {
    /// Small smoke-test sizes instead of the paper's (seconds instead of a minute).
    #[arg(long)]
    pub quick: bool,
    /// Directory for the CSV files, PNG plots, REPORT.md and results.json (created if missing).
    #[arg(long, default_value = "reproduce-out")]
    pub out: PathBuf,
    /// Seed of every random topology and operation.
    #[arg(long, default_value_t = 2004)]
    pub seed: u64,
    /// Which tree link Figures 7-8 raise in each topology (the paper only says "a randomly
    /// chosen link").
    #[arg(long, value_enum, default_value_t = LinkChoice::Nonzero)]
    pub link: LinkChoice,
    /// Smallest distance drawn between two nodes: 0 follows the paper's words ("0 hops" means
    /// directly connected, Table 1), 1 never draws 0 hops. Without it both draws run and the
    /// claims about Figures 7-9 are judged on each, side by side (the files are the 0 draw's,
    /// plus `fig7_8-min1.csv` and `fig9-min1.csv`); with it, only that draw.
    #[arg(long)]
    pub min_hops: Option<u32>,
}

/// How Figures 7-8 pick the tree link whose cost is multiplied by the cost factor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkChoice {
    /// A uniformly random tree link among those with a non-zero cost (a 0-hop link multiplied
    /// by any factor stays 0, so it could never change anything).
    Nonzero,
    /// A uniformly random tree link, zero-cost ones included (those count as gain 0, steps 0).
    Any,
}

impl LinkChoice {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LinkChoice::Nonzero => "nonzero",
            LinkChoice::Any => "any",
        }
    }
}

/// Runs one reproduction.
pub fn run(cmd: ReproduceCommand) -> anyhow::Result<()> {
    match cmd {
        ReproduceCommand::AdaptiveTrees(args) => adaptive_trees::run(&args),
        ReproduceCommand::Dlt(args) => dlt::run(&args),
        ReproduceCommand::MstCollectives(args) => mst_collectives::run(&args),
        ReproduceCommand::Mob(args) => mob::run(&args),
        ReproduceCommand::Heterosort(args) => heterosort::run(&args),
        ReproduceCommand::Auto(args) => auto::run(&args),
        ReproduceCommand::Weather(args) => weather::run(&args),
    }
}
