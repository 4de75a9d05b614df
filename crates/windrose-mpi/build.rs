//! Compiles the MPI side (csrc/shim.c) against one MPI's headers with that MPI's compiler
//! wrapper, and links the cdylib to that MPI's library.
//!
//! The ABI comes from `WINDROSE_MPI_ABI` (`openmpi`, `mpich` or `standard`, the MPI 5 ABI
//! of `mpicc_abi`); unset, the first of
//! `mpicc.openmpi`, `mpicc.mpich` found on PATH. Without any MPI compiler the crate still
//! builds (the driver and its unit tests need no MPI) but the shim is left out, and a warning
//! says so; installing an MPI later builds it at the next `cargo build` (the PATH folders are
//! watched).

use std::path::Path;
use std::process::Command;

fn on_path(exe: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| Path::new(&d).join(exe).is_file()))
        .unwrap_or(false)
}

/// The `-L` directories and `-l` libraries the wrapper links with (`-showme` / `-show`).
fn link_flags(wrapper: &str, show: &str) -> Vec<String> {
    let out = Command::new(wrapper)
        .arg(show)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {wrapper} {show}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn main() {
    println!("cargo:rerun-if-env-changed=WINDROSE_MPI_ABI");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed=build.rs");
    // Which wrappers exist decides the ABI and whether the shim is built at all: an MPI
    // installed (or removed, or upgraded) after a build must build the shim again, so every
    // PATH folder is watched (cargo reruns this script when a file in one changes).
    println!("cargo:rerun-if-env-changed=PATH");
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path).filter(|d| d.is_dir()) {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
    }
    println!("cargo::rustc-check-cfg=cfg(windrose_mpi_shim)");
    println!("cargo::rustc-check-cfg=cfg(windrose_mpi_abi, values(\"openmpi\", \"mpich\", \"standard\"))");
    let abi = match std::env::var("WINDROSE_MPI_ABI") {
        Ok(a) if !a.is_empty() => a,
        _ if on_path("mpicc.openmpi") => "openmpi".to_string(),
        _ if on_path("mpicc.mpich") => "mpich".to_string(),
        _ => {
            println!(
                "cargo:warning=no MPI compiler (mpicc.openmpi or mpicc.mpich) on PATH: \
                 building windrose-mpi without its MPI shim"
            );
            println!("cargo:rustc-env=WINDROSE_MPI_BUILT_ABI=none");
            return;
        }
    };
    let (wrapper, show) = match abi.as_str() {
        "openmpi" => ("mpicc.openmpi", "-showme"),
        "mpich" => ("mpicc.mpich", "-show"),
        // The MPI 5 standard ABI (libmpi_abi), e.g. from MPICH 5's mpicc_abi.
        "standard" => ("mpicc_abi", "-show"),
        other => panic!("WINDROSE_MPI_ABI={other}: expected openmpi, mpich or standard"),
    };
    if !on_path(wrapper) {
        panic!("WINDROSE_MPI_ABI={abi} needs {wrapper} on PATH (install the MPI's -dev package)");
    }
    cc::Build::new()
        .compiler(wrapper)
        .file("csrc/shim.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("windrose_mpi_shim");
    // Link the cdylib to the MPI it was compiled for, so PMPI_ resolves to that library.
    for flag in link_flags(wrapper, show) {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            if !dir.starts_with("/usr/") {
                // An MPI outside the system's library path (a Python environment's MPICH):
                // found at run time as at link time.
                println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,{dir}");
            }
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
    println!("cargo:rustc-cfg=windrose_mpi_shim");
    // Open MPI's and the standard ABI's handles are pointers, MPICH's ints; MPICH 4 and the
    // standard ABI (MPI 4 and 5) have the large-count MPI_Bcast_c, Open MPI 4.1 (MPI 3.1) not.
    println!("cargo:rustc-cfg=windrose_mpi_abi=\"{abi}\"");
    println!("cargo:rustc-env=WINDROSE_MPI_BUILT_ABI={abi}");
}
