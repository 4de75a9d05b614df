//! The `windrose` command line: build broadcast trees from cost files, adapt them to link-cost
//! changes and to nodes joining and leaving, schedule a divisible load on a tree, and reproduce
//! the papers' tables and figures.
//!
//! Output is human-readable tables by default and JSON with `--json`. Bad input (a file that
//! does not parse, an unknown node, a bad argument value) exits with code 2 and one line on
//! stderr naming the file, line and column; other failures exit with code 1.

/// `println!` for the commands' output, except that a closed stdout (`windrose … | head`) is
/// not a panic: the command goes on to its end (a testbed it started still comes down) and its
/// further output is dropped.
macro_rules! outln {
    () => {
        $crate::output::stdout_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` with [`outln!`]'s handling of a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::stdout_fmt(format_args!($($arg)*))
    };
}

mod bound_cmd;
mod collective_opts;
mod dlt;
mod error;
mod group_cmd;
mod input;
mod mpi_cmd;
mod mst_cmd;
mod net_cmds;
mod output;
mod records_cmd;
mod reproduce;
mod send_cmd;
mod sim_cmd;
mod sort_app;
mod sort_cmd;
mod testbed_cmd;
mod tree;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// windrose: collective communication on heterogeneous, changing networks. Build broadcast
/// trees from link costs, adapt them as costs change and nodes join or leave, schedule divisible
/// loads on trees, and reproduce the papers' experiments.
#[derive(Debug, Parser)]
#[command(name = "windrose", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build and adapt broadcast trees.
    #[command(subcommand)]
    Tree(tree::TreeCommand),
    /// Schedule a divisible load on a tree: each node's share, the send order, the finish time.
    ///
    /// Divisible-load scheduling after Kim, Jee & Lee: the share of one big load each node of a
    /// tree processes, the order in which each parent sends its children their shares, and the
    /// predicted finish time. The file formats are described below.
    Dlt(dlt::DltArgs),
    /// Regenerate the papers' tables and figures.
    #[command(subcommand)]
    Reproduce(reproduce::ReproduceCommand),
    /// Run scenarios (platform, changes, failures, workload) in the discrete-event simulator.
    #[command(subcommand)]
    Sim(sim_cmd::SimCommand),
    /// The physical limit of a multicast on a scenario's platform (max-flow from the root to
    /// each receiver), per interval between capacity changes, and the completion time it implies;
    /// `--plan` adds a Balanced Multicasting plan and its rate as a fraction of the bound.
    Bound(bound_cmd::BoundArgs),
    /// Serve one run as a member of a group (until the collective ends).
    Node(net_cmds::NodeArgs),
    /// Long-lived groups: serve as a member until told to leave, start a collective from any
    /// running member.
    #[command(subcommand)]
    Group(group_cmd::GroupCommand),
    /// Send a file to every member of a running group, the protocol (tree broadcast, MOB or
    /// Balanced Multicasting) chosen by the member from the file's size and the group's live
    /// view; `--explain` says why.
    Send(send_cmd::SendArgs),
    /// Broadcast a file from the root of a group over TCP, then check every node's BLAKE3.
    Bcast(net_cmds::BcastArgs),
    /// Divisible-load scatter from the root of a group over TCP: every node hashes its share,
    /// measured finish times beside the schedule's prediction.
    Scatter(net_cmds::ScatterArgs),
    /// A piece-based multicast of a file from the root of a group over TCP (MOB, BitTorrent,
    /// Balanced Multicasting or MagPIe, each node's cluster from the group file), then check
    /// every node's BLAKE3.
    Multicast(net_cmds::MulticastArgs),
    /// Write a file of the sort benchmark's 100-byte records (10-byte keys; uniform, skewed
    /// or few distinct keys), seeded, streaming, renamed into place when complete; prints its
    /// order-independent checksum.
    Gensort(records_cmd::GensortArgs),
    /// Check that files of 100-byte records (a data set in key-range order, e.g. one file per
    /// node) are sorted; count records and duplicate keys, print the checksum, and compare them
    /// with the input's (--against) or expected values. Exit code 0 only when all holds.
    Valsort(records_cmd::ValsortArgs),
    /// Sort a data set of 100-byte records spread over a group's members (HeteroSort, the
    /// paper's equal-slice HeteroSort, or sample sort): each member ends with a sorted,
    /// contiguous key range in its output file, renamed into place once the whole set's count,
    /// checksum and order are verified. `--local --nodes N` hosts the members here.
    Sort(sort_cmd::SortArgs),
    /// Start N node processes on loopback (127.0.0.x) and run a broadcast (or with --scatter,
    /// the scatter; with --protocol mob, bittorrent, balanced or magpie, that multicast), in one
    /// command.
    Local(net_cmds::LocalArgs),
    /// Write a fresh random group key (32 bytes as hex, mode 0600) to a new file, for
    /// `--key-file` or `WINDROSE_GROUP_KEY_FILE` on every member.
    Keygen(net_cmds::KeygenArgs),
    /// The main demo: MOB across an emulated four-cluster network on this machine (network
    /// namespaces, shaped links, a WAN delay line; needs root), beside the simulator's
    /// prediction; on loopback where namespaces are unavailable.
    Demo(testbed_cmd::DemoArgs),
    /// An emulated multi-cluster network on this machine (network namespaces, shaped links, a
    /// WAN delay line) from a scenario file, and real multicasts across it (root only).
    #[command(subcommand)]
    Testbed(testbed_cmd::TestbedCommand),
    /// GHS, the distributed minimum spanning tree, on a scenario's or a cost file's network in
    /// the simulator: the tree, the frames by kind, the build time and its critical chain.
    Mst(mst_cmd::MstArgs),
    /// MPI programs with windrose's broadcast (the windrose-mpi shim): `mpi env` prints the
    /// launch lines for the installed MPIs.
    #[command(subcommand)]
    Mpi(mpi_cmd::MpiCommand),
}

fn main() -> ExitCode {
    // Usage errors: clap prints them and exits with code 2.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Tree(cmd) => tree::run(cmd),
        Command::Dlt(args) => dlt::run(args),
        Command::Reproduce(cmd) => reproduce::run(cmd),
        Command::Sim(cmd) => sim_cmd::run(cmd),
        Command::Bound(args) => bound_cmd::run(args),
        Command::Node(args) => net_cmds::run_node_cmd(args),
        Command::Group(cmd) => group_cmd::run(cmd),
        Command::Send(args) => send_cmd::run(args),
        Command::Bcast(args) => net_cmds::run_bcast(args),
        Command::Scatter(args) => net_cmds::run_scatter(args),
        Command::Multicast(args) => net_cmds::run_multicast(args),
        Command::Local(args) => net_cmds::run_local(args),
        Command::Gensort(args) => records_cmd::gensort(args),
        Command::Valsort(args) => records_cmd::valsort(args),
        Command::Sort(args) => sort_cmd::sort(args),
        Command::Keygen(args) => net_cmds::run_keygen(args),
        Command::Testbed(cmd) => testbed_cmd::run(cmd),
        Command::Demo(args) => testbed_cmd::demo(args),
        Command::Mpi(cmd) => mpi_cmd::run(cmd),
        Command::Mst(args) => mst_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error::one_line(&e));
            ExitCode::from(error::exit_code(&e))
        }
    }
}
