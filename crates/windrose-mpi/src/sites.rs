//! Sites from measured round trips: at MPI_Init (`WINDROSE_MPI_TOPOLOGY=hosts`) the host
//! leaders ping each other ([`probe_partner`]'s rounds) and one leader clusters the matrix
//! ([`sites`]) and hands the result to the others, so every rank uses the same assignment. The
//! tree builder then gets one cluster per site instead of one per host.
//!
//! The rule (single linkage): two hosts are on the same site when the round trip between
//! them is at most the larger of a floor (`WINDROSE_MPI_SITE_MS`, default 1 ms: a LAN's round
//! trips are below it, a WAN's above) and [`RATIO`] times the smallest round trip measured
//! (so hosts that are all equally far apart, however far, are one site: nothing tells them
//! apart); sites are the connected parts of that relation. Sites are numbered in the order
//! of their first host.

use std::fmt::Write as _;
use std::time::Duration;

/// Round trips within this factor of the smallest are "near".
pub const RATIO: f64 = 2.0;

/// The floor when `WINDROSE_MPI_SITE_MS` is unset.
pub const DEFAULT_FLOOR: Duration = Duration::from_millis(1);

/// The site of each of `n` hosts from `rtt` (row-major `n x n`, seconds; entry `i * n + j` is
/// what host i measured to host j: the best of its pings (`WR_PROBES` in csrc/shim.c), as
/// queueing and a descheduled peer only ever add; the diagonal is ignored and a pair's two entries are
/// combined by taking the smaller). Errors name the bad entry.
pub fn sites(n: usize, rtt: &[f64], floor: Duration) -> Result<Vec<u32>, String> {
    if rtt.len() != n * n {
        return Err(format!(
            "round-trip matrix of {} entries for {n} hosts (expected {})",
            rtt.len(),
            n * n
        ));
    }
    if let Some(k) = (0..n * n).find(|&k| k / n != k % n && !(rtt[k].is_finite() && rtt[k] >= 0.0))
    {
        return Err(format!(
            "round trip from host {} to host {} is {} (expected seconds >= 0)",
            k / n,
            k % n,
            rtt[k]
        ));
    }
    let pair = |i: usize, j: usize| rtt[i * n + j].min(rtt[j * n + i]);
    let smallest = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .map(|(i, j)| pair(i, j))
        .fold(f64::INFINITY, f64::min);
    let near = floor.as_secs_f64().max(RATIO * smallest);
    // Union-find over the "near" pairs; the smallest host of a part is its representative.
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..n {
        for j in i + 1..n {
            if pair(i, j) <= near {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut site_of_root = vec![u32::MAX; n];
    let mut next = 0;
    Ok((0..n)
        .map(|i| {
            let r = root(&mut parent, i);
            if site_of_root[r] == u32::MAX {
                site_of_root[r] = next;
                next += 1;
            }
            site_of_root[r]
        })
        .collect())
}

/// Rounds of the probe schedule for `n` hosts: every pair meets exactly once, and in each
/// round a host meets at most one other (the circle method), so pairs probe in parallel.
pub fn probe_rounds(n: u32) -> u32 {
    if n < 2 {
        0
    } else {
        n + n % 2 - 1
    }
}

/// Whom host `me` of `n` probes in `round` (None: it sits this round out).
pub fn probe_partner(n: u32, round: u32, me: u32) -> Option<u32> {
    if me >= n || round >= probe_rounds(n) {
        return None;
    }
    // m hosts (a phantom one when n is odd); the last stays put, the others turn.
    let m = n + n % 2;
    let turn = m - 1;
    let p = if me == m - 1 {
        // 2p = round (mod turn), turn odd: p = round * (turn + 1) / 2.
        (round as u64 * (m as u64 / 2) % turn as u64) as u32
    } else {
        let p = (round + turn - me % turn) % turn;
        if p == me {
            m - 1
        } else {
            p
        }
    };
    (p < n).then_some(p)
}

/// The line `WINDROSE_MPI_STATS` prints at MPI_Init: each host (by its leader's rank in
/// MPI_COMM_WORLD) with its site, the rule's threshold and the round trips' range.
pub fn describe(leaders: &[i32], sites: &[u32], rtt: &[f64], floor: Duration) -> String {
    let n = leaders.len();
    if n < 2 {
        return format!("windrose-mpi sites: {n} hosts in {n} sites: leaders {leaders:?} sites {sites:?} (nothing to measure)");
    }
    let off_diagonal = || (0..n * n).filter(move |k| k / n != k % n).map(|k| rtt[k]);
    let smallest = off_diagonal().fold(f64::INFINITY, f64::min);
    let largest = off_diagonal().fold(0.0, f64::max);
    let count = sites.iter().max().map_or(0, |s| s + 1);
    let mut line = format!(
        "windrose-mpi sites: {n} hosts in {count} sites: leaders {leaders:?} sites {sites:?}"
    );
    let _ = write!(
        line,
        " (same site when the round trip <= {:.3} ms; measured {:.3} to {:.3} ms)",
        floor.as_secs_f64().max(RATIO * smallest) * 1e3,
        smallest * 1e3,
        largest * 1e3
    );
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: f64 = 1e-3;

    /// A symmetric matrix from the upper triangle's rule `f(i, j)`.
    fn matrix(n: usize, f: impl Fn(usize, usize) -> f64) -> Vec<f64> {
        let mut m = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    m[i * n + j] = f(i.min(j), i.max(j));
                }
            }
        }
        m
    }

    #[test]
    fn two_sites() {
        // Hosts 0, 2, 4 on one site (0.1 ms), 1, 3 on another; 20 ms between them.
        let m = matrix(5, |i, j| if i % 2 == j % 2 { 0.1 * MS } else { 20.0 * MS });
        assert_eq!(sites(5, &m, DEFAULT_FLOOR).unwrap(), [0, 1, 0, 1, 0]);
    }

    #[test]
    fn three_sites_with_one_host_alone() {
        // {0, 1} and {2, 3} with LAN round trips, host 4 alone; 10 to 40 ms between sites.
        let site = [0, 0, 1, 1, 2];
        let wan = [[0.0, 10.0, 40.0], [10.0, 0.0, 25.0], [40.0, 25.0, 0.0]];
        let m = matrix(5, |i, j| {
            if site[i] == site[j] {
                0.2 * MS
            } else {
                wan[site[i]][site[j]] * MS
            }
        });
        assert_eq!(sites(5, &m, DEFAULT_FLOOR).unwrap(), [0, 0, 1, 1, 2]);
    }

    #[test]
    fn all_equal_is_one_site_however_far() {
        for rtt in [0.01 * MS, 5.0 * MS, 80.0 * MS] {
            let m = matrix(4, |_, _| rtt);
            assert_eq!(sites(4, &m, DEFAULT_FLOOR).unwrap(), [0; 4], "{rtt}");
        }
    }

    #[test]
    fn noise_below_the_floor_stays_one_site() {
        // Loopback on a loaded machine: 15 us to 0.9 ms, far apart in ratio, all LAN-like.
        let noise = [15e-6, 40e-6, 0.9 * MS, 22e-6, 0.3 * MS, 60e-6];
        let m = matrix(4, |i, j| noise[(i * 4 + j) % noise.len()]);
        assert_eq!(sites(4, &m, DEFAULT_FLOOR).unwrap(), [0; 4]);
        // A floor below the noise splits them: the floor is what holds them together.
        assert_ne!(sites(4, &m, Duration::from_micros(20)).unwrap(), [0; 4]);
    }

    #[test]
    fn a_pair_counts_its_smaller_direction() {
        // Host 1 measured a 30 ms outlier towards 0; 0 measured 0.1 ms: one site.
        let mut m = matrix(3, |_, j| if j == 2 { 30.0 * MS } else { 0.1 * MS });
        m[3] = 30.0 * MS;
        assert_eq!(sites(3, &m, DEFAULT_FLOOR).unwrap(), [0, 0, 1]);
    }

    #[test]
    fn bad_matrices_are_refused_naming_the_entry() {
        let mut m = matrix(3, |_, _| MS);
        m[5] = f64::NAN;
        let e = sites(3, &m, DEFAULT_FLOOR).unwrap_err();
        assert!(e.contains("from host 1 to host 2"), "{e}");
        m[5] = -1.0;
        assert!(sites(3, &m, DEFAULT_FLOOR).is_err());
        let e = sites(3, &m[..8], DEFAULT_FLOOR).unwrap_err();
        assert!(e.contains("8 entries for 3 hosts"), "{e}");
        // The diagonal is not looked at.
        let mut m = matrix(2, |_, _| MS);
        m[0] = f64::NAN;
        assert_eq!(sites(2, &m, DEFAULT_FLOOR).unwrap(), [0, 0]);
    }

    /// Brute force: same site exactly when a chain of near pairs joins them.
    fn reference(n: usize, m: &[f64], near: f64) -> Vec<Vec<bool>> {
        let mut r: Vec<Vec<bool>> = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| i == j || m[i * n + j].min(m[j * n + i]) <= near)
                    .collect()
            })
            .collect();
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    r[i][j] = r[i][j] || (r[i][k] && r[k][j]);
                }
            }
        }
        r
    }

    proptest! {
        #[test]
        fn sites_are_the_transitive_closure_of_near_pairs(
            n in 1usize..9,
            raw in proptest::collection::vec(0.0f64..0.05, 64),
            floor_us in 0u64..5000,
        ) {
            let m: Vec<f64> = raw[..n * n].to_vec();
            let floor = Duration::from_micros(floor_us);
            let s = sites(n, &m, floor).unwrap();
            let smallest = (0..n * n)
                .filter(|k| k / n < k % n)
                .map(|k| m[k].min(m[(k % n) * n + k / n]))
                .fold(f64::INFINITY, f64::min);
            let r = reference(n, &m, floor.as_secs_f64().max(RATIO * smallest));
            for i in 0..n {
                for j in 0..n {
                    prop_assert_eq!(s[i] == s[j], r[i][j], "hosts {} {}", i, j);
                }
            }
            // Numbered by first host: 0, then each new site one more than the last.
            let mut seen = 0;
            for &x in &s {
                prop_assert!(x <= seen);
                if x == seen {
                    seen += 1;
                }
            }
        }

        #[test]
        fn every_pair_meets_once_and_nobody_twice_a_round(n in 0u32..20) {
            let mut met = vec![vec![0u32; n as usize]; n as usize];
            for round in 0..probe_rounds(n) {
                for me in 0..n {
                    if let Some(p) = probe_partner(n, round, me) {
                        prop_assert_ne!(p, me);
                        prop_assert_eq!(probe_partner(n, round, p), Some(me));
                        met[me as usize][p as usize] += 1;
                    }
                }
            }
            for (i, row) in met.iter().enumerate() {
                for (j, &times) in row.iter().enumerate() {
                    prop_assert_eq!(times, u32::from(i != j), "{} {}", i, j);
                }
            }
            prop_assert_eq!(probe_partner(n, probe_rounds(n), 0), None);
        }
    }

    #[test]
    fn the_line_names_hosts_sites_and_threshold() {
        let m = matrix(4, |i, j| if i / 2 == j / 2 { 0.05 * MS } else { 30.0 * MS });
        let s = sites(4, &m, DEFAULT_FLOOR).unwrap();
        let line = describe(&[0, 1, 2, 3], &s, &m, DEFAULT_FLOOR);
        assert_eq!(
            line,
            "windrose-mpi sites: 4 hosts in 2 sites: leaders [0, 1, 2, 3] sites [0, 0, 1, 1] \
             (same site when the round trip <= 1.000 ms; measured 0.050 to 30.000 ms)"
        );
    }
}
