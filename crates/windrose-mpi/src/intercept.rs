//! The exported MPI entry points. A cdylib exports only Rust's own symbols, so these
//! trampolines carry the MPI names and call the C side (`wr_MPI_*` in csrc/shim.c). Handles
//! are passed through untouched, typed by ABI: pointers in Open MPI and the MPI 5 standard ABI,
//! ints in MPICH.

use std::ffi::{c_char, c_int, c_void};

#[cfg(any(windrose_mpi_abi = "openmpi", windrose_mpi_abi = "standard"))]
type Handle = *mut c_void;
#[cfg(windrose_mpi_abi = "mpich")]
type Handle = c_int;

extern "C" {
    fn wr_MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int;
    fn wr_MPI_Init_thread(
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) -> c_int;
    fn wr_MPI_Finalize() -> c_int;
    fn wr_MPI_Bcast(buf: *mut c_void, count: c_int, dt: Handle, root: c_int, comm: Handle)
        -> c_int;
    fn wr_MPI_Ibcast(
        buf: *mut c_void,
        count: c_int,
        dt: Handle,
        root: c_int,
        comm: Handle,
        request: *mut Handle,
    ) -> c_int;
    #[cfg(any(windrose_mpi_abi = "mpich", windrose_mpi_abi = "standard"))]
    fn wr_MPI_Bcast_init(
        buf: *mut c_void,
        count: c_int,
        dt: Handle,
        root: c_int,
        comm: Handle,
        info: Handle,
        request: *mut Handle,
    ) -> c_int;
    #[cfg(any(windrose_mpi_abi = "mpich", windrose_mpi_abi = "standard"))]
    fn wr_MPI_Bcast_c(buf: *mut c_void, count: i64, dt: Handle, root: c_int, comm: Handle)
        -> c_int;
}

/// Aborts on a panic: nothing unwinds into the MPI program.
fn guard<R>(f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => std::process::abort(),
    }
}

/// # Safety
/// MPI_Init's contract.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Init(argc, argv) })
}

/// # Safety
/// MPI_Init_thread's contract.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Init_thread(argc, argv, required, provided) })
}

/// # Safety
/// MPI_Finalize's contract.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Finalize() })
}

/// # Safety
/// MPI_Bcast's contract.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Bcast(buf, count, dt, root, comm) })
}

/// # Safety
/// MPI_Bcast_c's contract.
#[cfg(any(windrose_mpi_abi = "mpich", windrose_mpi_abi = "standard"))]
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast_c(
    buf: *mut c_void,
    count: i64,
    dt: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Bcast_c(buf, count, dt, root, comm) })
}

/// # Safety
/// MPI_Ibcast's contract (forwarded to PMPI_Ibcast).
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibcast(
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Ibcast(buf, count, dt, root, comm, request) })
}

/// # Safety
/// MPI_Bcast_init's contract (MPI 4; forwarded to PMPI_Bcast_init).
#[cfg(any(windrose_mpi_abi = "mpich", windrose_mpi_abi = "standard"))]
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast_init(
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
    info: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: forwarded as received.
    guard(|| unsafe { wr_MPI_Bcast_init(buf, count, dt, root, comm, info, request) })
}
