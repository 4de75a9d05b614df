//! Bench binary: what one random memory access costs on this machine as the working set grows
//! (issue 20: is MOB's growing CPU time per event the machine's memory rather than the
//! simulator?). Not the simulator at all: a walk over a random cycle of 64-byte lines, each
//! line holding the index of the next, so every access is one cache line at a place the
//! hardware cannot guess, in a working set of a given size.
//!
//! ```text
//! cargo bench -p windrose-sim --bench cache_curve [-- --mb 8,32,112,450 --accesses 20000000 --chains 1 --reps 3]
//! ```
//!
//! For each size it prints the median over `--reps` walks of the CPU nanoseconds per access of `--chains` walks run interleaved
//! (1: each access waits for the one before, the latency; 4 or more: the misses overlap, as
//! the out-of-order core overlaps a simulator's independent reads). The simulator's children
//! get transparent huge pages (the `scale` bench's allocator asks for them); run this with
//! `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` to get them too, without to see 4 KiB pages (the
//! TLB's share). Without `--bench` (`cargo test --benches`) it walks 1 MB once, as a smoke.

mod support;
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use support::{arg, median};

/// One cache line: the index of the next line of the cycle, and padding.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line {
    next: u64,
    _pad: [u64; 7],
}

/// `lines` lines linked in one random cycle (Sattolo's shuffle: every line is visited once
/// per lap, so a walk of any length stays in the whole working set).
fn cycle(lines: usize, seed: u64) -> Vec<Line> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<u64> = (0..lines as u64).collect();
    for i in (1..lines).rev() {
        let j = rng.gen_range(0..i);
        order.swap(i, j);
    }
    let mut v = vec![
        Line {
            next: 0,
            _pad: [0; 7]
        };
        lines
    ];
    for k in 0..lines {
        v[order[k] as usize].next = order[(k + 1) % lines];
    }
    v
}

/// This thread's CPU nanoseconds (`CLOCK_THREAD_CPUTIME_ID`): on a shared machine the wall
/// time would count other processes' turns on the core.
fn cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// CPU nanoseconds per access of `chains` interleaved walks of `accesses` accesses in all.
fn walk(v: &[Line], accesses: usize, chains: usize) -> f64 {
    let n = v.len() as u64;
    // Start the chains spread over the cycle's index space (not the cycle's order, which
    // is random anyway).
    let mut at: Vec<u64> = (0..chains as u64).map(|c| c * n / chains as u64).collect();
    let steps = accesses / chains;
    let start = cpu_ns();
    for _ in 0..steps {
        for a in at.iter_mut() {
            *a = v[*a as usize].next;
        }
    }
    let ns = cpu_ns() - start;
    std::hint::black_box(&at);
    ns / (steps * chains) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        let v = cycle((1 << 20) / 64, 1);
        let ns = walk(&v, v.len(), 1);
        println!("cache_curve smoke: 1 MB, {ns:.1} ns per access");
        return;
    }
    let sizes: String = arg(&args, "--mb", "8,32,112,450".to_string());
    let accesses: usize = arg(&args, "--accesses", 20_000_000);
    let chains: usize = arg(&args, "--chains", 1).max(1);
    let reps: usize = arg(&args, "--reps", 3).max(1);
    println!(
        "working set MB, ns per access ({chains} chain(s), {accesses} accesses, median of {reps})"
    );
    for s in sizes.split(',') {
        let mb: f64 = match s.trim().parse() {
            Ok(mb) if mb > 0.0 => mb,
            _ => {
                eprintln!("cache_curve: --mb: {s:?} is not a positive number of MB");
                std::process::exit(2);
            }
        };
        let lines = ((mb * 1e6) / 64.0) as usize;
        let v = cycle(lines.max(chains), 1);
        // One lap first, so the pages are in and the timed walk is the steady state.
        walk(&v, v.len().min(accesses), chains);
        let mut ns: Vec<f64> = (0..reps).map(|_| walk(&v, accesses, chains)).collect();
        println!("{mb:.0},{:.2}", median(&mut ns));
    }
}
