//! windrose-mpi: unmodified MPI programs get windrose's tree broadcast.
//!
//! Preloaded (`LD_PRELOAD`) or linked, the cdylib replaces MPI_Init, MPI_Init_thread,
//! MPI_Finalize, MPI_Bcast and (MPI 4 headers) MPI_Bcast_c through the profiling interface.
//! Contiguous broadcasts above `WINDROSE_MPI_THRESHOLD` bytes on intracommunicators of more
//! than two ranks run windrose's Host ([`driver`]) over the MPI library's own point-to-point
//! calls, each root planning its tree from what its sends measured (`WINDROSE_MPI_TREE`), or
//! running MOB between the sites or the Host's choice of protocol for large messages
//! (`WINDROSE_MPI_PROTOCOL`, see [`driver`]);
//! everything else goes to PMPI_Bcast (`WINDROSE_MPI_TOPOLOGY=hosts`: windrose between one
//! leader per host, PMPI_Bcast inside each host). MPI_Ibcast and MPI_Bcast_init are intercepted and
//! forwarded to PMPI. See the crate's README for the commands.
//!
//! - `csrc/shim.c`: the only code that sees the MPI library's types (compiled per ABI);
//! - [`ffi`]: the C side's view of the Rust core (ABI-neutral);
//! - `intercept`: the exported MPI_* trampolines (ABI-dependent handle types);
//! - [`driver`]: the Host's driver over a [`driver::Transport`];
//! - [`sites`]: host leaders clustered into sites by their measured round trips.

pub mod driver;
pub mod ffi;
#[cfg(windrose_mpi_shim)]
mod intercept;
pub mod sites;

/// The ABI this build's shim was compiled for: `openmpi`, `mpich`, or `none` (built without
/// an MPI compiler).
pub const BUILT_ABI: &str = env!("WINDROSE_MPI_BUILT_ABI");
