//! `windrose reproduce …`: regenerates the papers' tables and figures.
//! (Interface fixed; the reproduction work fills in the bodies.)

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// What to reproduce.
#[derive(Debug, Subcommand)]
pub enum ReproduceCommand {
    /// Tables 2-4 and 6-8 and Figures 7-9 of Figueira & Mendes (adaptive binomial trees).
    AdaptiveTrees(AdaptiveTreesArgs),
}

/// Options of `windrose reproduce adaptive-trees`.
#[derive(Debug, Args)]
pub struct AdaptiveTreesArgs {
    /// Small smoke-test sizes instead of the paper's (seconds instead of a minute).
    #[arg(long)]
    pub quick: bool,
    /// Directory for CSV files and PNG plots.
    #[arg(long, default_value = "reproduce-out")]
    pub out: PathBuf,
    /// Seed of every random topology and operation.
    #[arg(long, default_value_t = 2004)]
    pub seed: u64,
}

/// Runs one reproduction.
pub fn run(cmd: ReproduceCommand) -> anyhow::Result<()> {
    match cmd {
        ReproduceCommand::AdaptiveTrees(_args) => anyhow::bail!("not implemented yet"),
    }
}
