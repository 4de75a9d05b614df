//! The Rust core as the C side sees it: a group per communicator behind an opaque pointer,
//! and the C side's transport (function pointers over PMPI_ calls on the private duplicate).
//!
//! Every function catches panics and aborts: nothing unwinds into C.

use crate::driver::{options_from, Driver, PlanTally, Transport, TransportError};
use bytes::Bytes;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// The C side's transport (`wr_transport` in csrc/shim.c; same layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CTransport {
    /// Its context (the communicator's state).
    pub ctx: *mut c_void,
    /// PMPI_Isend of a head (`len` bytes) and, when `payload_len` is not 0, of its payload on
    /// the payload tag, to `dest`; the request handle is written to `req`.
    pub isend: unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        usize,
        *const c_void,
        usize,
        c_int,
        *mut *mut c_void,
    ) -> c_int,
    /// PMPI_Test; frees the request once done.
    pub test: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
    /// PMPI_Improbe: flag, source, length.
    pub probe: unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int, *mut usize) -> c_int,
    /// PMPI_Mrecv of the probed message.
    pub recv: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> c_int,
    /// PMPI_Irecv of the next payload from `source`; the request handle is written last.
    pub irecv_payload:
        unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, *mut *mut c_void) -> c_int,
    /// PMPI_Test of a payload's receive of `len` bytes (another count is an error); frees the
    /// request once done.
    pub test_payload: unsafe extern "C" fn(*mut c_void, usize, *mut c_int) -> c_int,
}

/// A payload's receive from the C side: its request handle and length (freed by the C side
/// when the test says done).
pub struct CReceive(*mut c_void, usize);

/// A request handle from the C side (freed by it when the test says done).
pub struct CRequest(*mut c_void);

fn check(call: &'static str, rc: c_int) -> Result<(), TransportError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(TransportError { call, code: rc })
    }
}

impl Transport for CTransport {
    type Request = CRequest;

    fn isend(
        &mut self,
        to: u32,
        head: &Bytes,
        payload: &Bytes,
    ) -> Result<CRequest, TransportError> {
        let mut req = std::ptr::null_mut();
        // SAFETY: the C side reads `head.len()` and `payload.len()` bytes; the driver keeps
        // both alive until the request completes.
        let rc = unsafe {
            (self.isend)(
                self.ctx,
                head.as_ptr().cast(),
                head.len(),
                payload.as_ptr().cast(),
                payload.len(),
                to as c_int,
                &mut req,
            )
        };
        check("isend", rc)?;
        Ok(CRequest(req))
    }

    fn test(&mut self, request: &mut CRequest) -> Result<bool, TransportError> {
        let mut done = 0;
        // SAFETY: the handle came from isend and was not completed yet.
        check("test", unsafe { (self.test)(request.0, &mut done) })?;
        Ok(done != 0)
    }

    fn probe(&mut self) -> Result<Option<(u32, usize)>, TransportError> {
        let (mut flag, mut source, mut len) = (0, 0, 0usize);
        // SAFETY: plain out-parameters.
        check("probe", unsafe {
            (self.probe)(self.ctx, &mut flag, &mut source, &mut len)
        })?;
        Ok((flag != 0).then_some((source as u32, len)))
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<(), TransportError> {
        // SAFETY: `buf` has the probed message's length.
        check("recv", unsafe {
            (self.recv)(self.ctx, buf.as_mut_ptr().cast(), buf.len())
        })
    }

    type Receive = CReceive;

    unsafe fn irecv_payload(
        &mut self,
        from: u32,
        buf: *mut u8,
        len: usize,
    ) -> Result<CReceive, TransportError> {
        let mut req = std::ptr::null_mut();
        // SAFETY: the caller keeps `buf..buf + len` valid and untouched until the receive
        // completes.
        check("irecv_payload", unsafe {
            (self.irecv_payload)(self.ctx, buf.cast(), len, from as c_int, &mut req)
        })?;
        Ok(CReceive(req, len))
    }

    fn test_receive(&mut self, receive: &mut CReceive) -> Result<bool, TransportError> {
        let mut done = 0;
        // SAFETY: the handle came from irecv_payload and was not completed yet.
        check("test_payload", unsafe {
            (self.test_payload)(receive.0, receive.1, &mut done)
        })?;
        Ok(done != 0)
    }
}

/// Prints one line on stderr with a single `write`: `eprintln!` writes each formatted piece
/// separately, and the launcher forwards every rank's stderr through one stream, so another
/// rank's line (the test harness's per-rank stats, say) could land in the middle of ours.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

/// Checks the `WINDROSE_MPI_*` settings at MPI_Init: 0, or 1 with the bad variable and why
/// printed on stderr (the C side then raises MPI_ERR_ARG on MPI_COMM_WORLD).
#[no_mangle]
pub extern "C" fn windrose_check_settings() -> c_int {
    guard("windrose_check_settings", || {
        match options_from(|k| std::env::var(k).ok()) {
            Ok(_) => 0,
            Err(e) => {
                say!("windrose-mpi: {e}");
                1
            }
        }
    })
}

/// One communicator's driver; the lock serialises calls from several threads.
pub struct Group {
    rank: u32,
    driver: Mutex<Driver<CTransport>>,
}

/// Runs `f`, aborting the process on a panic (nothing may unwind into C).
fn guard<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            say!("windrose-mpi: internal error (panic) in {what}; aborting");
            std::process::abort();
        }
    }
}

/// A group for `rank` of `size` ranks, `hosts[r]` naming rank r's host, under the plan every
/// rank agreed at MPI_Init (`world_plan`, see [`crate::driver::plan_version`]); null on error
/// (printed).
///
/// # Safety
/// `hosts` points to `size` ints and `t` to a transport valid for the group's life.
#[no_mangle]
pub unsafe extern "C" fn windrose_group_new(
    rank: c_int,
    size: c_int,
    hosts: *const c_int,
    t: *const CTransport,
    world_plan: u64,
) -> *mut Group {
    guard("windrose_group_new", || {
        if hosts.is_null() || t.is_null() || size <= 0 || rank < 0 {
            say!("windrose-mpi: bad group arguments (rank {rank}, size {size})");
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract.
        let hosts = unsafe { std::slice::from_raw_parts(hosts, size as usize) };
        // SAFETY: the caller's contract.
        let transport = unsafe { *t };
        let seed = 0x7769_6e64_726f_7365 ^ size as u64;
        let made = options_from(|k| std::env::var(k).ok()).and_then(|o| {
            let o = crate::driver::Options { world_plan, ..o };
            Driver::with_options(rank as u32, hosts, transport, seed, o)
        });
        match made {
            Ok(d) => Box::into_raw(Box::new(Group {
                rank: rank as u32,
                driver: Mutex::new(d),
            })),
            Err(e) => {
                say!("windrose-mpi: rank {rank}: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

fn lock(g: &Group) -> std::sync::MutexGuard<'_, Driver<CTransport>> {
    g.driver.lock().unwrap_or_else(|p| p.into_inner())
}

/// Broadcasts `len` bytes at `buf` from `root`: 0 on success, 2 when the message does not
/// fit the buffer, 1 on any other error (printed with the rank).
///
/// # Safety
/// `group` came from [`windrose_group_new`]; `buf` holds `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn windrose_group_bcast(
    group: *mut Group,
    buf: *mut c_void,
    len: usize,
    root: c_int,
) -> c_int {
    guard("windrose_group_bcast", || {
        // SAFETY: the caller's contract.
        let g = unsafe { &*group };
        let data: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
        };
        if root < 0 {
            say!("windrose-mpi: rank {}: MPI_Bcast with root {root}", g.rank);
            return 1;
        }
        let result = {
            let mut d = lock(g);
            let before = d.stats();
            let result = d.bcast(data, root as u32);
            plans().add(&before, &d.stats());
            result
        };
        match result {
            Ok(()) => 0,
            Err(e) => {
                say!(
                    "windrose-mpi: rank {}: MPI_Bcast from root {root}: {e}",
                    g.rank
                );
                if matches!(e, crate::driver::BcastError::Truncated { .. }) {
                    2
                } else {
                    1
                }
            }
        }
    })
}

/// What this process's roots planned, over all its groups (`WINDROSE_MPI_STATS`).
static PLANS: Mutex<PlanTally> = Mutex::new(PlanTally {
    plans: 0,
    changed: 0,
    last: None,
});

fn plans() -> std::sync::MutexGuard<'static, PlanTally> {
    PLANS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes what this process's roots planned ([`PlanTally`]'s words: `plans P changed C
/// last-plan ...`) into `buf` as a NUL-terminated string of at most `len` bytes (cut short
/// when longer): 0, or 1 when there is no room at all.
///
/// # Safety
/// `buf` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn windrose_plan_summary(buf: *mut c_char, len: usize) -> c_int {
    guard("windrose_plan_summary", || {
        if buf.is_null() || len == 0 {
            return 1;
        }
        let text = plans().to_string();
        let n = text.len().min(len - 1);
        // SAFETY: the caller's contract; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n) = 0;
        }
        0
    })
}

/// One round of progress: 0, or 1 on an error (printed).
///
/// # Safety
/// `group` came from [`windrose_group_new`].
#[no_mangle]
pub unsafe extern "C" fn windrose_group_progress(group: *mut Group) -> c_int {
    guard("windrose_group_progress", || {
        // SAFETY: the caller's contract.
        let g = unsafe { &*group };
        match lock(g).progress() {
            Ok(busy) => {
                if !busy {
                    std::thread::yield_now();
                }
                0
            }
            Err(e) => {
                say!("windrose-mpi: rank {}: {e}", g.rank);
                1
            }
        }
    })
}

/// 1 when the group owes no peer anything (it may be freed), else 0.
///
/// # Safety
/// `group` came from [`windrose_group_new`].
#[no_mangle]
pub unsafe extern "C" fn windrose_group_quiescent(group: *mut Group) -> c_int {
    guard("windrose_group_quiescent", || {
        // SAFETY: the caller's contract.
        c_int::from(lock(unsafe { &*group }).quiescent())
    })
}

/// Frees a group.
///
/// # Safety
/// `group` came from [`windrose_group_new`] and is not used again.
#[no_mangle]
pub unsafe extern "C" fn windrose_group_free(group: *mut Group) {
    guard("windrose_group_free", || {
        if !group.is_null() {
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(group) });
        }
    })
}

/// Rounds of the leaders' probe schedule for `n` leaders (see [`crate::sites::probe_rounds`]).
#[no_mangle]
pub extern "C" fn windrose_probe_rounds(n: c_int) -> c_int {
    guard("windrose_probe_rounds", || {
        crate::sites::probe_rounds(n.max(0) as u32) as c_int
    })
}

/// Whom leader `me` of `n` probes in `round`, or -1 (it sits the round out).
#[no_mangle]
pub extern "C" fn windrose_probe_partner(n: c_int, round: c_int, me: c_int) -> c_int {
    guard("windrose_probe_partner", || {
        if n < 0 || round < 0 || me < 0 {
            return -1;
        }
        crate::sites::probe_partner(n as u32, round as u32, me as u32).map_or(-1, |p| p as c_int)
    })
}

/// The site of each of `n` host leaders from their round trips (`rtt`: `n * n` seconds,
/// row i what leader i measured), written to `out`; with `log`, the sites line is printed
/// (`leaders`: each leader's rank in MPI_COMM_WORLD). 0, or 1 with the reason printed.
///
/// # Safety
/// `rtt` points to `n * n` doubles, `leaders` and `out` to `n` ints.
#[no_mangle]
pub unsafe extern "C" fn windrose_sites(
    n: c_int,
    rtt: *const f64,
    leaders: *const c_int,
    log: c_int,
    out: *mut c_int,
) -> c_int {
    guard("windrose_sites", || {
        if n <= 0 || rtt.is_null() || leaders.is_null() || out.is_null() {
            say!("windrose-mpi: bad sites arguments ({n} leaders)");
            return 1;
        }
        let n = n as usize;
        // SAFETY: the caller's contract.
        let (rtt, leaders, out) = unsafe {
            (
                std::slice::from_raw_parts(rtt, n * n),
                std::slice::from_raw_parts(leaders, n),
                std::slice::from_raw_parts_mut(out, n),
            )
        };
        let floor = options_from(|k| std::env::var(k).ok())
            .map(|o| o.site_floor.unwrap_or(crate::sites::DEFAULT_FLOOR));
        match floor.and_then(|f| crate::sites::sites(n, rtt, f).map(|s| (f, s))) {
            Ok((floor, sites)) => {
                if log != 0 {
                    say!("{}", crate::sites::describe(leaders, &sites, rtt, floor));
                }
                for (o, s) in out.iter_mut().zip(&sites) {
                    *o = *s as c_int;
                }
                0
            }
            Err(e) => {
                say!("windrose-mpi: sites: {e}");
                1
            }
        }
    })
}
