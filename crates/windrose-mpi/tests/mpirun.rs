//! The shim in unmodified MPI programs: tests/c/bcast_check.c, built with each MPI's compiler
//! wrapper and run under its mpirun with the shim preloaded. The program checks every
//! broadcast byte for byte against PMPI_Bcast and the root's pattern (and aborts at the first
//! difference); these tests check that it ran to the end at every rank and that the windrose
//! path was taken exactly as often as the program expects (WINDROSE_MPI_STATS=path).
//!
//! Each ABI's tests are skipped, with a message saying so, only when that MPI's mpirun is not
//! installed. The shim for the ABI the crate was built for is the cdylib built with this
//! test; the other ABI's is built by `cargo build` into its own target directory
//! (<target>/windrose-mpi-abi/<abi>), so `cargo test` alone runs both.

mod common;
use common::*;
use std::time::Duration;

/// Every root, type, size and communicator on `ranks` ranks; windrose's path taken exactly
/// where the program expects it.
fn sweep(abi: Abi, ranks: u32, max_bytes: &str, repeats: &str) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let r = mpirun(
        abi,
        ranks,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["1000", max_bytes, repeats],
    );
    r.complete(ranks);
    assert_eq!(r.windrose, r.expected, "windrose calls per rank");
    for (rank, n) in &r.checked {
        assert!(*n > 100, "rank {rank} checked only {n} broadcasts");
    }
    if ranks > 2 {
        for (rank, n) in &r.windrose {
            assert!(*n > 100, "rank {rank} took windrose's path only {n} times");
        }
    } else {
        assert!(r.windrose.values().all(|&n| n == 0), "two ranks fall back");
    }
}

/// WINDROSE_MPI=off: every call goes to PMPI_Bcast, results unchanged.
fn off(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let r = mpirun(abi, 3, &[("WINDROSE_MPI", "off")], &["-1", "300000", "20"]);
    r.complete(3);
    assert!(r.windrose.values().all(|&n| n == 0), "{:?}", r.windrose);
    assert!(r.expected.values().all(|&n| n == 0));
}

/// Each tree policy runs the same checked broadcasts (the default, adapt, runs in `sweep`).
fn policies(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    for policy in ["rebuild:balanced-path", "static:binomial", "adapt:path:0.5"] {
        let r = mpirun(
            abi,
            4,
            &[
                ("WINDROSE_MPI_THRESHOLD", "1000"),
                ("WINDROSE_MPI_TREE", policy),
            ],
            &["1000", "2000000", "10"],
        );
        r.complete(4);
        assert_eq!(
            r.windrose, r.expected,
            "windrose calls per rank under {policy}"
        );
        assert!(
            r.windrose.values().all(|&n| n > 0),
            "{policy}: {:?}",
            r.windrose
        );
    }
}

/// WINDROSE_MPI_PROTOCOL=mob and auto: the same checked broadcasts (every root, type and
/// communicator); those of at least 256 KiB on windrose's path run MOB (or the root's Host's
/// choice), the others the tree, and every result equals PMPI_Bcast's.
fn protocols(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    for protocol in ["mob", "auto"] {
        let r = mpirun(
            abi,
            4,
            &[
                ("WINDROSE_MPI_THRESHOLD", "1000"),
                ("WINDROSE_MPI_PROTOCOL", protocol),
            ],
            &["1000", "2000000", "10"],
        );
        r.complete(4);
        assert_eq!(
            r.windrose, r.expected,
            "windrose calls per rank under {protocol}"
        );
        assert!(
            r.windrose.values().all(|&n| n > 0),
            "{protocol}: {:?}",
            r.windrose
        );
    }
}

#[test]
fn openmpi_mob_and_auto() {
    protocols(OPENMPI);
}

#[test]
fn mpich_mob_and_auto() {
    protocols(MPICH);
}

/// The prober on (WINDROSE_MPI_PROBE_MS): pings between the broadcasts change nothing the
/// program sees, and MPI_Finalize still ends.
fn probed(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let r = mpirun(
        abi,
        4,
        &[
            ("WINDROSE_MPI_THRESHOLD", "1000"),
            ("WINDROSE_MPI_PROBE_MS", "5"),
        ],
        &["1000", "2000000", "50"],
    );
    r.complete(4);
    assert_eq!(r.windrose, r.expected, "windrose calls per rank");
}

#[test]
fn openmpi_with_the_prober() {
    probed(OPENMPI);
}

#[test]
fn mpich_with_the_prober() {
    probed(MPICH);
}

/// A bad WINDROSE_MPI_TREE is an error at MPI_Init that names the variable: MPI_ERR_ARG on
/// MPI_COMM_WORLD, whose default handler ends the job.
fn bad_tree(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let (status, stdout, stderr, what) = launch(
        abi,
        3,
        &[("WINDROSE_MPI_TREE", "sideways")],
        &["1000", "300000", "2"],
    );
    assert!(!status.success(), "{what} succeeded:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("windrose-mpi: WINDROSE_MPI_TREE=sideways: tree policy \"sideways\""),
        "{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("checked"),
        "a rank went on past MPI_Init:\n{stdout}"
    );
}

/// MPI_Ibcast from every root and (MPI 4 headers) a persistent MPI_Bcast_init started twice:
/// forwarded to PMPI by the shim (counted as passthrough calls), results checked.
fn nonblocking(abi: Abi, mpi4: bool) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let r = mpirun(
        abi,
        3,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["nonblocking", "3000000"],
    );
    let inits = u64::from(mpi4);
    for rank in 0..3 {
        assert_eq!(
            r.nonblocking_ok.get(&rank),
            Some(&(3, inits)),
            "rank {rank}:\n{}\n{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(r.passthrough.get(&rank), Some(&(3 + inits)), "rank {rank}");
        assert_eq!(r.windrose.get(&rank), Some(&0), "rank {rank}");
    }
}

/// Rank 1 SIGKILLs itself 20 ms into the third of a series of 16 MB broadcasts on windrose's
/// path. Nobody may hang: the launcher notices the signal and ends the job (Open MPI's mpirun
/// and MPICH's hydra both do, before a survivor's MPI_Bcast returns an error). Bounded by a
/// guard that kills the launcher and fails the test.
fn killed_rank(abi: Abi) {
    killed_rank_under(abi, "tree");
}

/// [`killed_rank`] with the broadcasts run as `protocol` (`WINDROSE_MPI_PROTOCOL`).
fn killed_rank_under(abi: Abi, protocol: &str) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let (status, stdout, stderr, what) = launch_guarded(
        abi,
        4,
        &[
            ("WINDROSE_MPI_THRESHOLD", "1000"),
            ("WINDROSE_MPI_PROTOCOL", protocol),
        ],
        &["kill", "16000000"],
        Duration::from_secs(120),
    );
    assert!(!status.success(), "{what} succeeded:\n{stdout}\n{stderr}");
    let all = format!("{stdout}\n{stderr}");
    // Open MPI says "signal 9"; MPICH's hydra says "signal 9" or, when it notices the dead
    // rank's exit before the signal, "EXIT CODE: 9" (its code for a process killed by 9).
    assert!(
        all.contains("signal 9") || all.contains("EXIT CODE: 9"),
        "the launcher did not report rank 1's SIGKILL:\n{all}"
    );
    // Rank 1 never finishes its series.
    assert!(!all.contains("kill-survived 1"), "{all}");
}

#[test]
fn openmpi_ibcast_passes_through() {
    nonblocking(OPENMPI, false);
}

#[test]
fn mpich_ibcast_and_bcast_init_pass_through() {
    nonblocking(MPICH, true);
}

#[test]
fn standard_abi_ibcast_and_bcast_init_pass_through() {
    nonblocking(STANDARD, true);
}

#[test]
fn openmpi_a_rank_killed_mid_broadcast_ends_the_job() {
    killed_rank(OPENMPI);
}

/// Under MOB every survivor waits for the dead rank's acknowledgement: the launcher still
/// ends the job.
#[test]
fn openmpi_a_rank_killed_mid_mob_ends_the_job() {
    killed_rank_under(OPENMPI, "mob");
}

#[test]
fn mpich_a_rank_killed_mid_broadcast_ends_the_job() {
    killed_rank(MPICH);
}

#[test]
fn standard_abi_a_rank_killed_mid_broadcast_ends_the_job() {
    killed_rank(STANDARD);
}

#[test]
fn openmpi_tree_policies() {
    policies(OPENMPI);
}

#[test]
fn mpich_tree_policies() {
    policies(MPICH);
}

#[test]
fn openmpi_bad_tree_policy_fails_at_init() {
    bad_tree(OPENMPI);
}

#[test]
fn mpich_bad_tree_policy_fails_at_init() {
    bad_tree(MPICH);
}

#[test]
fn standard_abi_bad_tree_policy_fails_at_init() {
    bad_tree(STANDARD);
}

/// A root sending more than the others' buffers hold: MPI_ERR_TRUNCATE at the others through
/// the communicator's error handler (MPI_ERRORS_RETURN), nothing written past their buffers,
/// the communicator usable afterwards (the program checks all that and prints truncate-ok).
fn truncate(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let mut r = mpirun(
        abi,
        3,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["truncate", "2000000"],
    );
    r.truncate_ok.sort();
    assert_eq!(r.truncate_ok, [0, 1, 2], "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr
            .matches("is longer than this rank's buffer (1000000 bytes)")
            .count(),
        2,
        "each non-root says why:\n{}",
        r.stderr
    );
    // The failed call is not counted; the root's two calls and the others' second are.
    assert_eq!(r.windrose.values().copied().collect::<Vec<_>>(), [2, 1, 1]);
}

/// MPI_Comm_free does not synchronise, so freeing a communicator must not wait for peers
/// (the program's rank 0 frees, then sends to rank 1, which frees after receiving).
fn free_without_waiting(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let mut r = mpirun(
        abi,
        3,
        &[("WINDROSE_MPI_THRESHOLD", "1000")],
        &["free", "300000"],
    );
    r.free_ok.sort();
    assert_eq!(r.free_ok, [0, 1, 2], "{}\n{}", r.stdout, r.stderr);
    // One broadcast on the freed communicator and five on MPI_COMM_WORLD, all windrose's.
    assert_eq!(r.windrose.values().copied().collect::<Vec<_>>(), [6, 6, 6]);
}

#[test]
fn openmpi_comm_free_does_not_wait_for_peers() {
    free_without_waiting(OPENMPI);
}

#[test]
fn mpich_comm_free_does_not_wait_for_peers() {
    free_without_waiting(MPICH);
}

#[test]
fn standard_abi_comm_free_does_not_wait_for_peers() {
    free_without_waiting(STANDARD);
}

#[test]
fn openmpi_truncation_reaches_the_error_handler() {
    truncate(OPENMPI);
}

#[test]
fn mpich_truncation_reaches_the_error_handler() {
    truncate(MPICH);
}

#[test]
fn openmpi_two_ranks_fall_back() {
    sweep(OPENMPI, 2, "300000", "20");
}

#[test]
fn openmpi_three_ranks() {
    sweep(OPENMPI, 3, "1048576", "50");
}

#[test]
fn openmpi_four_ranks_up_to_16_mib_and_300_calls_in_a_row() {
    sweep(OPENMPI, 4, "16777216", "300");
}

#[test]
fn openmpi_off() {
    off(OPENMPI);
}

#[test]
fn mpich_two_ranks_fall_back() {
    sweep(MPICH, 2, "300000", "20");
}

#[test]
fn mpich_three_ranks() {
    sweep(MPICH, 3, "1048576", "50");
}

#[test]
fn mpich_four_ranks_up_to_16_mib_and_300_calls_in_a_row() {
    sweep(MPICH, 4, "16777216", "300");
}

#[test]
fn mpich_off() {
    off(MPICH);
}

#[test]
fn standard_abi_two_ranks_fall_back() {
    sweep(STANDARD, 2, "300000", "20");
}

#[test]
fn standard_abi_three_ranks() {
    sweep(STANDARD, 3, "1048576", "50");
}

#[test]
fn standard_abi_four_ranks_up_to_16_mib_and_300_calls_in_a_row() {
    sweep(STANDARD, 4, "16777216", "300");
}

#[test]
fn standard_abi_off() {
    off(STANDARD);
}

#[test]
fn standard_abi_truncation_reaches_the_error_handler() {
    truncate(STANDARD);
}

/// WINDROSE_MPI_TOPOLOGY=hosts: windrose between one leader per host, PMPI_Bcast inside each.
/// `cliques`: MPICH's MPIR_CVAR_NUM_CLIQUES, which splits this machine's ranks into that many
/// emulated nodes (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) follows it); None: one host.
/// The checks are the sweep's; the stats line says how many hosts the largest communicator
/// spanned.
fn hosts(abi: Abi, cliques: Option<&str>, want_hosts: u64) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let mut env = vec![
        ("WINDROSE_MPI_THRESHOLD", "1000"),
        ("WINDROSE_MPI_TOPOLOGY", "hosts"),
    ];
    if let Some(n) = cliques {
        env.push(("MPIR_CVAR_NUM_CLIQUES", n));
    }
    let ranks = 4;
    let r = mpirun(abi, ranks, &env, &["1000", "300000", "20"]);
    r.complete(ranks);
    assert_eq!(r.windrose, r.expected, "windrose calls per rank");
    assert!(r.windrose.values().all(|&n| n > 20), "{:?}", r.windrose);
    let spans: Vec<u64> = r.hosts.values().copied().collect();
    assert_eq!(spans, vec![want_hosts; ranks as usize], "{}", r.stderr);
}

#[test]
fn mpich_two_emulated_hosts_leaders_run_windrose() {
    hosts(MPICH, Some("2"), 2);
}

#[test]
fn openmpi_one_host_broadcasts_inside_it() {
    hosts(OPENMPI, None, 1);
}

#[test]
fn a_bad_topology_fails_at_init() {
    if !available(OPENMPI) {
        return;
    }
    let _one_at_a_time = serial();
    let (status, _, stderr, _) = launch(
        OPENMPI,
        3,
        &[("WINDROSE_MPI_TOPOLOGY", "rings")],
        &["1000", "2000", "1"],
    );
    assert!(!status.success());
    assert!(
        stderr.contains("WINDROSE_MPI_TOPOLOGY=rings: expected flat or hosts"),
        "{stderr}"
    );
}

/// The `leaders [..] sites [..]` of the sites line rank 0 printed at MPI_Init.
fn sites_line(stderr: &str) -> (Vec<u32>, Vec<u32>) {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("windrose-mpi sites:"))
        .collect();
    assert_eq!(lines.len(), 1, "one sites line (from rank 0):\n{stderr}");
    let list = |key: &str| -> Vec<u32> {
        let from = lines[0]
            .find(key)
            .unwrap_or_else(|| panic!("{key} in {}", lines[0]))
            + key.len();
        let to = from + lines[0][from..].find(']').expect("a closing bracket");
        lines[0][from..to]
            .split(", ")
            .map(|x| x.parse().expect("a number"))
            .collect()
    };
    (list("leaders ["), list("sites ["))
}

/// WINDROSE_MPI_TOPOLOGY=hosts on four emulated hosts (MPICH's cliques; one rank each): the
/// leaders' round trips at MPI_Init give `want` sites, and the checked broadcasts run over
/// the leaders' Host with those sites as its clusters. `delay`: the test hook that answers
/// probes across world rank 2 late, emulating two sites on this machine.
///
/// The floor (WINDROSE_MPI_SITE_MS) is 50 ms, not the default 1 ms: with four ranks on two
/// cores shared with builds (load ~11) the best of eight loopback ping-pongs was seen at up to
/// 5 ms (a peer waiting for a time slice); the injected delay (250 ms) stays far above it.
fn sites(delay: Option<&str>, want: &[u32]) {
    if !available(MPICH) {
        return;
    }
    let _one_at_a_time = serial();
    let mut env = vec![
        ("WINDROSE_MPI_THRESHOLD", "1000"),
        ("WINDROSE_MPI_TOPOLOGY", "hosts"),
        ("WINDROSE_MPI_SITE_MS", "50"),
        ("MPIR_CVAR_NUM_CLIQUES", "4"),
    ];
    if let Some(d) = delay {
        env.push(("WINDROSE_MPI_TEST_PROBE_DELAY", d));
    }
    let ranks = 4;
    let r = mpirun(MPICH, ranks, &env, &["1000", "300000", "10"]);
    r.complete(ranks);
    assert_eq!(r.windrose, r.expected, "windrose calls per rank");
    assert!(r.windrose.values().all(|&n| n > 20), "{:?}", r.windrose);
    let (leaders, found) = sites_line(&r.stderr);
    assert_eq!(leaders, [0, 1, 2, 3], "{}", r.stderr);
    assert_eq!(found, want, "{}", r.stderr);
}

#[test]
fn mpich_four_emulated_hosts_on_loopback_are_one_site() {
    sites(None, &[0, 0, 0, 0]);
}

#[test]
fn mpich_a_delay_between_two_host_pairs_makes_two_sites() {
    sites(Some("250000:2"), &[0, 0, 1, 1]);
}

#[test]
fn openmpi_one_host_is_one_site() {
    if !available(OPENMPI) {
        return;
    }
    let _one_at_a_time = serial();
    let env = [
        ("WINDROSE_MPI_THRESHOLD", "1000"),
        ("WINDROSE_MPI_TOPOLOGY", "hosts"),
    ];
    let r = mpirun(OPENMPI, 3, &env, &["1000", "2000", "1"]);
    assert_eq!(sites_line(&r.stderr), (vec![0], vec![0]), "{}", r.stderr);
}

/// Ranks launched with different settings (an MPMD command line): rank 0 with threshold
/// 1000, ranks 1 and 2 with 100 MB (alone they would send every call of this run to
/// PMPI_Bcast while the others wait in windrose's), rank 3 with `WINDROSE_MPI=off`. At
/// MPI_Init every rank takes rank 0's settings and each rank that differed says so; the
/// checked program passes with windrose's path exactly where rank 0's threshold puts it.
fn settings_differ(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let (status, stdout, stderr, what) = launch_parts(
        abi,
        &[
            (1, &[("WINDROSE_MPI_THRESHOLD", "1000")]),
            (2, &[("WINDROSE_MPI_THRESHOLD", "100000000")]),
            (1, &[("WINDROSE_MPI", "off")]),
        ],
        &["1000", "1000000", "20"],
        HANG_GUARD,
    );
    assert!(
        status.success(),
        "{what} failed ({status}):\n{stdout}\n{stderr}"
    );
    let r = RunResult::parse(stdout, stderr);
    r.complete(4);
    assert_eq!(r.windrose, r.expected, "windrose calls per rank");
    assert!(r.windrose.values().all(|&n| n > 10), "{:?}", r.windrose);
    for (rank, said) in [
        (
            1,
            "WINDROSE_MPI_THRESHOLD (bytes) is 100000000 here and 1000 on rank 0",
        ),
        (
            2,
            "WINDROSE_MPI_THRESHOLD (bytes) is 100000000 here and 1000 on rank 0",
        ),
        (3, "WINDROSE_MPI (1: on, 0: off) is 0 here and 1 on rank 0"),
    ] {
        let line = format!("windrose-mpi: rank {rank}: {said}");
        assert!(r.stderr.contains(&line), "no {line:?} in:\n{}", r.stderr);
    }
    assert!(!r.stderr.contains("windrose-mpi: rank 0:"), "{}", r.stderr);
}

/// A rank whose plan changed alone (the tests' hook `WINDROSE_MPI_TEST_PLAN_SKEW=2`: world
/// rank 2's plan version differs from the others', as after a re-measurement only it
/// adopted): the ranks refuse each other's frames by version, the communicator's error
/// handler (fatal by default) ends the job naming the plan versions, and no rank hangs
/// (a 120 s guard) or passes a byte the check finds wrong.
fn plan_changed_on_one_rank(abi: Abi) {
    if !available(abi) {
        return;
    }
    let _one_at_a_time = serial();
    let (status, stdout, stderr, what) = launch_guarded(
        abi,
        4,
        &[
            ("WINDROSE_MPI_THRESHOLD", "1000"),
            ("WINDROSE_MPI_TEST_PLAN_SKEW", "2"),
        ],
        &["1000", "1000000", "5"],
        Duration::from_secs(120),
    );
    assert!(!status.success(), "{what} succeeded:\n{stdout}\n{stderr}");
    let all = format!("{stdout}\n{stderr}");
    assert!(
        all.contains("runs plan version") && all.contains("refuses its frames"),
        "no rank named the plan versions:\n{all}"
    );
    assert!(!all.contains("MISMATCH"), "{all}");
    assert!(!all.contains("checked "), "a rank finished the run:\n{all}");
}

#[test]
fn openmpi_ranks_launched_with_different_settings_agree_on_rank_0s() {
    settings_differ(OPENMPI);
}

#[test]
fn mpich_ranks_launched_with_different_settings_agree_on_rank_0s() {
    settings_differ(MPICH);
}

#[test]
fn standard_abi_ranks_launched_with_different_settings_agree_on_rank_0s() {
    settings_differ(STANDARD);
}

#[test]
fn openmpi_a_plan_changed_on_one_rank_is_refused() {
    plan_changed_on_one_rank(OPENMPI);
}

#[test]
fn mpich_a_plan_changed_on_one_rank_is_refused() {
    plan_changed_on_one_rank(MPICH);
}

#[test]
fn standard_abi_a_plan_changed_on_one_rank_is_refused() {
    plan_changed_on_one_rank(STANDARD);
}
