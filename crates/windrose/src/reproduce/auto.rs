//! `windrose reproduce auto`: issue 16's choice grid in the simulator. At every point (message
//! size x WAN latency x WAN bandwidth x cluster shape) the automatic choice is made from a
//! perfect view of the platform, and every candidate (tree broadcast over the planner's tree,
//! MOB, Balanced Multicasting planned from the view) is simulated; the table shows what each
//! took, what `auto` chose and the best, and the summary the fraction of points where `auto`
//! is within 10 % of the best and the worst ratio. Exits with code 1 if that fraction is below
//! 95 % or the worst ratio above 1.5 (the bar).

use clap::Args;
use std::collections::BTreeMap;
use windrose_proto::choice::Candidate;
use windrose_sim::auto::{summary, table, AutoSettings, Grid};

/// Options of `windrose reproduce auto`.
#[derive(Debug, Args)]
pub struct AutoArgs {
    /// The grid CI runs (sizes up to 16 MiB, two latencies, two bandwidths) instead of the
    /// full one (1 KiB to 1 GiB, three latencies, three bandwidths).
    #[arg(long)]
    quick: bool,
    /// Print the points as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs the grid and prints it.
pub fn run(args: &AutoArgs) -> anyhow::Result<()> {
    let grid = if args.quick {
        Grid::reduced()
    } else {
        Grid::full()
    };
    let points = grid.run(&AutoSettings::default(), |g| {
        eprint!(
            "\r{:?} {} ms {} MB/s {} B      ",
            g.shape, g.wan_ms, g.wan_mb_s, g.point.bytes
        );
    })?;
    eprintln!();
    let (within, worst) = summary(&points);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&points)?);
    } else {
        out!("{}", table(&points));
        // Which protocol wins where: the best candidate's count per message size.
        let mut wins: BTreeMap<u64, BTreeMap<Candidate, usize>> = BTreeMap::new();
        for g in &points {
            *wins
                .entry(g.point.bytes)
                .or_default()
                .entry(g.point.best().0)
                .or_default() += 1;
        }
        outln!("\nbest protocol per message size (points won):");
        for (bytes, w) in wins {
            let w: Vec<String> = w.iter().map(|(c, k)| format!("{c} {k}")).collect();
            outln!(
                "  {:>9}: {}",
                windrose_model::units::format_size(bytes),
                w.join(", ")
            );
        }
    }
    if within < 0.95 || worst > 1.5 {
        anyhow::bail!(
            "auto within 10 % on {:.1} % of the points (want >= 95 %), worst ratio {worst:.3} \
             (want <= 1.5)",
            within * 100.0
        );
    }
    Ok(())
}
