//! `windrose mpi env [--shim PATH]... [--ranks N] [--program CMD] [--json]`: which builds of
//! the MPI shim (crates/windrose-mpi) are there and which MPIs are installed, and for each MPI
//! the launch lines that preload its shim, ready to paste.
//!
//! A shim is built per MPI ABI, and preloading one into a program of another MPI fails in
//! confusing ways, so each shim's ABI is read from the MPI library it links (`libmpi.so.40`:
//! Open MPI, `libmpich.so`: MPICH, `libmpi_abi.so`: the MPI 5 standard ABI), not trusted from
//! its name.

use crate::error::bad_input;
use anyhow::Result;
use clap::{Args, Subcommand};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `windrose mpi ...`.
#[derive(Debug, Subcommand)]
pub enum MpiCommand {
    /// Find the built MPI shims and the installed MPIs, and print the launch lines
    /// (mpirun -x, mpiexec -env, srun --export) that preload the right shim.
    Env(EnvArgs),
}

/// Options of `windrose mpi env`.
#[derive(Debug, Args)]
pub struct EnvArgs {
    /// A shim to use (its ABI is read from the MPI library it links); repeatable. Without it,
    /// the current folder's `libwindrose_mpi*.so` and the builds next to this binary.
    #[arg(long, value_name = "PATH")]
    pub shim: Vec<PathBuf>,
    /// Ranks in the printed lines.
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// The program in the printed lines.
    #[arg(long, default_value = "./my_mpi_program")]
    pub program: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One MPI ABI the shim is built for.
struct Abi {
    name: &'static str,
    /// What the shim links when built for it.
    links: &'static str,
    /// Its compiler wrapper (the build needs it) and launcher (None: next to the wrapper).
    mpicc: &'static str,
    launcher: Option<&'static str>,
    /// How its launcher passes a variable to every rank: `-x K=V` or `-env K V`.
    open_mpi_style: bool,
    /// srun's plugin that starts it (None: none does).
    srun_mpi: Option<&'static str>,
}

const ABIS: [Abi; 3] = [
    Abi {
        name: "openmpi",
        links: "libmpi.so.40",
        mpicc: "mpicc.openmpi",
        launcher: Some("mpirun.openmpi"),
        open_mpi_style: true,
        srun_mpi: Some("pmix"),
    },
    Abi {
        name: "mpich",
        links: "libmpich.so",
        mpicc: "mpicc.mpich",
        launcher: Some("mpiexec.mpich"),
        open_mpi_style: false,
        srun_mpi: Some("pmi2"),
    },
    Abi {
        name: "standard",
        links: "libmpi_abi.so",
        mpicc: "mpicc_abi",
        launcher: None,
        open_mpi_style: false,
        // Its default PMI-1 client speaks what Slurm's pmi2 plugin serves (windrose-mpi's
        // README, "srun").
        srun_mpi: Some("pmi2"),
    },
];

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    srun: Option<PathBuf>,
    mpis: Vec<MpiEntry>,
}

#[derive(Debug, Serialize)]
struct MpiEntry {
    abi: &'static str,
    /// The MPI's launcher, None when that MPI is not installed.
    launcher: Option<PathBuf>,
    shim: Option<PathBuf>,
    /// How to build the shim when none was found.
    build: Option<String>,
    /// Launch lines (empty without a shim or without the MPI).
    commands: Vec<String>,
}

fn on_path(exe: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(exe))
        .find(|p| p.is_file())
}

/// Quotes `s` for a POSIX shell when it needs it.
fn sh(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=,:@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The ABI of the shim at `path`, from the MPI library it links.
fn abi_of(path: &Path) -> Result<&'static Abi> {
    let bytes = std::fs::read(path)
        .map_err(|e| bad_input(format!("--shim {}: cannot read it: {e}", path.display())))?;
    if !bytes.starts_with(b"\x7fELF") {
        return Err(bad_input(format!(
            "--shim {}: not a shared library (no ELF header)",
            path.display()
        )));
    }
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    // libmpi_abi first: its name contains no other's, but check the most specific anyway.
    let mut order: Vec<&Abi> = ABIS.iter().collect();
    order.sort_by_key(|a| std::cmp::Reverse(a.links.len()));
    order
        .into_iter()
        .find(|a| has(a.links.as_bytes()))
        .ok_or_else(|| {
            bad_input(format!(
                "--shim {}: links none of libmpi.so.40 (Open MPI), libmpich.so (MPICH), \
                 libmpi_abi.so (MPI 5 standard ABI): not a windrose-mpi shim built against an MPI",
                path.display()
            ))
        })
}

/// Shims found without `--shim`: the current folder's copies (the README's
/// `libwindrose_mpi-ABI.so`), then the builds beside this binary.
fn found_shims() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(".") {
        let mut here: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libwindrose_mpi") && n.ends_with(".so"))
            })
            .collect();
        here.sort();
        out.extend(here);
    }
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| {
        e.parent()
            .map(|d| d.canonicalize().unwrap_or_else(|_| d.to_path_buf()))
    }) {
        out.push(dir.join("libwindrose_mpi.so"));
        // The other ABIs' builds of windrose-mpi's tests: <target>/windrose-mpi-abi/ABI/release.
        if let Some(target) = dir.parent() {
            for abi in &ABIS {
                out.push(
                    target
                        .join("windrose-mpi-abi")
                        .join(abi.name)
                        .join("release/libwindrose_mpi.so"),
                );
            }
        }
    }
    out.into_iter().filter(|p| p.is_file()).collect()
}

/// Runs `windrose mpi ...`.
pub fn run(cmd: MpiCommand) -> Result<()> {
    match cmd {
        MpiCommand::Env(args) => env(args),
    }
}

fn env(args: EnvArgs) -> Result<()> {
    if args.ranks == 0 {
        return Err(bad_input("--ranks 0: expected at least 1 rank"));
    }
    if args.program.trim().is_empty() {
        return Err(bad_input("--program: empty"));
    }
    let mut shims: Vec<(&'static str, PathBuf)> = Vec::new();
    for p in &args.shim {
        let abi = abi_of(p)?;
        if let Some((_, other)) = shims.iter().find(|(a, _)| *a == abi.name) {
            return Err(bad_input(format!(
                "--shim {}: a second {} shim (the first: {})",
                p.display(),
                abi.name,
                other.display()
            )));
        }
        shims.push((
            abi.name,
            std::path::absolute(p).unwrap_or_else(|_| p.clone()),
        ));
    }
    if args.shim.is_empty() {
        for p in found_shims() {
            // Found files that are not shims are skipped, not errors: the user did not name them.
            if let Ok(abi) = abi_of(&p) {
                if !shims.iter().any(|(a, _)| *a == abi.name) {
                    shims.push((abi.name, std::path::absolute(&p).unwrap_or(p)));
                }
            }
        }
    }
    let srun = on_path("srun");
    let n = args.ranks.to_string();
    let mpis: Vec<MpiEntry> = ABIS
        .iter()
        .map(|abi| {
            let launcher = match abi.launcher {
                Some(l) => on_path(l),
                // MPICH 5's pip package: its hydra sits beside mpicc_abi.
                None => on_path(abi.mpicc)
                    .and_then(|w| w.parent().map(|d| d.join("mpiexec.hydra")))
                    .filter(|p| p.is_file()),
            };
            let shim = shims
                .iter()
                .find(|(a, _)| *a == abi.name)
                .map(|(_, p)| p.clone());
            let mut commands = Vec::new();
            if let (Some(l), Some(s)) = (&launcher, &shim) {
                let l = sh(&l.display().to_string());
                let s = sh(&s.display().to_string());
                if abi.open_mpi_style {
                    commands.push(format!("{l} -np {n} -x LD_PRELOAD={s} {}", args.program));
                } else {
                    commands.push(format!("{l} -np {n} -env LD_PRELOAD {s} {}", args.program));
                }
                if let (Some(_), Some(plugin)) = (&srun, abi.srun_mpi) {
                    // --kill-on-bad-exit: a rank that dies ends the step; under Slurm's
                    // default the survivors of MPICH's builds may wait for it for ever.
                    commands.push(format!(
                        "srun -n {n} --mpi={plugin} --kill-on-bad-exit=1 --export=ALL,LD_PRELOAD={s} {}",
                        args.program
                    ));
                }
            }
            let build = shim.is_none().then(|| {
                let path_note = if abi.name == "standard" {
                    " (with mpicc_abi on PATH)"
                } else {
                    ""
                };
                format!(
                    "WINDROSE_MPI_ABI={} cargo build --release -p windrose-mpi{path_note}",
                    abi.name
                )
            });
            MpiEntry {
                abi: abi.name,
                launcher,
                shim,
                build,
                commands,
            }
        })
        .collect();
    let report = Report { srun, mpis };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let mut any = false;
    for m in &report.mpis {
        let Some(l) = &m.launcher else {
            continue;
        };
        any = true;
        outln!("# {} ({})", m.abi, l.display());
        match (&m.shim, &m.build) {
            (Some(s), _) => outln!("# shim: {}", s.display()),
            (None, Some(b)) => outln!("# no {} shim found; build it: {b}", m.abi),
            (None, None) => {}
        }
        for c in &m.commands {
            outln!("{c}");
        }
        outln!();
    }
    if !any {
        outln!(
            "# no MPI launcher found on PATH (mpirun.openmpi, mpiexec.mpich, or mpiexec.hydra \
             beside mpicc_abi)"
        );
    }
    if report.srun.is_none() {
        outln!("# srun is not on PATH: no Slurm lines");
    }
    Ok(())
}
