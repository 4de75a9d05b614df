//! Scenario workloads `kind = "sort"` (issue 19: HeteroSort and the sample sort through Hosts,
//! from a scenario file) and `kind = "auto"` (issue 16 point 4: a broadcast whose protocol the
//! automatic choice picks): small files run, the reports' outcomes are checked, and bad keys
//! are errors naming the file, line and key.

use std::path::Path;
use windrose_model::NodeId;
use windrose_proto::choice::Candidate;
use windrose_sim::auto::{run_point, AutoSettings};
use windrose_sim::scenario::{parse_scenario, run_scenario, Report, ScenarioError};

/// Two clusters of two nodes, 10 MB/s nodes, 2 MB/s and 5 ms between them; nodes 1 and 3
/// compute four times as fast as 0 and 2.
const PLATFORM: &str = r#"
[platform]
[[platform.cluster]]
nodes = 2
node_uplink_bytes_s = 1e7
node_downlink_bytes_s = 1e7
access_up_bytes_s = 1e8
access_down_bytes_s = 1e8
intra_latency_s = 1e-4
[[platform.cluster]]
nodes = 2
node_uplink_bytes_s = 1e7
node_downlink_bytes_s = 1e7
access_up_bytes_s = 1e8
access_down_bytes_s = 1e8
intra_latency_s = 1e-4
[platform.wan]
bytes_s = [[0, 2e6], [2e6, 0]]
latency_s = [[0, 0.005], [0.005, 0]]

[compute]
core_bytes_s = 1e7
cpu = 0.25
[[compute.node]]
id = 1
cpu = 1.0
[[compute.node]]
id = 3
cpu = 1.0
"#;

fn sort_file(workload: &str) -> String {
    format!("{PLATFORM}\n[workload]\nkind = \"sort\"\n{workload}\n")
}

fn run(text: &str) -> Report {
    let s = parse_scenario(text, Path::new("w.toml")).unwrap();
    run_scenario(&s, 5, None).unwrap()
}

fn err(text: &str) -> String {
    match parse_scenario(text, Path::new("w.toml")) {
        Err(e @ ScenarioError::File { .. }) => e.to_string(),
        other => panic!("expected a file error, got {other:?}"),
    }
}

#[test]
fn each_sort_runs_from_a_file_and_its_check_holds() {
    let cases = [
        "protocol = \"heterosort\"\nslicing = \"speed\"",
        "protocol = \"heterosort\"\nslicing = \"equal\"\nbackups = 0",
        "protocol = \"heterosort\"\nslicing = \"splitters\"\nbackups = 2",
        "protocol = \"sample-sort\"",
    ];
    for case in cases {
        let text = sort_file(&format!(
            "{case}\nroot = 2\nrecords_per_node = 300\nrecord_seed = 11\nkeys = \"skewed\""
        ));
        let r = run(&text);
        assert!(r.errors.is_empty(), "{case}: {:?}", r.errors);
        let s = r.sort.as_ref().expect("a sort report");
        assert!(s.check.ok, "{case}: {:?}", s.check);
        assert_eq!(s.check.records_in, 1200);
        assert_eq!(s.check.records_out, 1200);
        assert_eq!((s.finished, s.failed), (4, 0), "{case}");
        let complete = s.complete_s.expect("the initiator saw it complete");
        for m in &s.members {
            assert_eq!(m.outcome, "finished", "{case}: {m:?}");
            assert_eq!(m.records_in, 300);
            assert!(m.bytes_sent > 0, "{case}: {m:?}");
            let f = m.finish_s.unwrap();
            assert!(f > 0.0 && f <= complete, "{case}: {f} after {complete}");
        }
        let held: u64 = s.members.iter().map(|m| m.records_held).sum();
        assert_eq!(held, 1200);
        assert_eq!(r.repetitions[0].makespan_s, Some(complete));
        // The members leave once the sort is over: the run ends soon after.
        assert!(
            r.end_s >= complete && r.end_s < complete + 1.0,
            "{}",
            r.end_s
        );
        if case.contains("speed") || case.contains("splitters") {
            // Speed-weighted: the 4x nodes end with more than the 1x nodes.
            let held = |i: usize| s.members[i].records_held;
            assert!(
                held(1) > held(0) && held(3) > held(2),
                "{case}: {:?}",
                s.members
            );
        }
        // Same file, same seed: the same report.
        assert_eq!(run(&text), r, "{case}");
    }
}

#[test]
fn a_sort_by_total_bytes_spreads_the_records_and_the_record_seed_is_the_run_seed() {
    let text = sort_file("protocol = \"heterosort\"\ntotal_bytes = \"1002kB\"");
    let r = run(&text);
    let s = r.sort.unwrap();
    assert!(s.check.ok, "{:?}", s.check);
    let records: Vec<u64> = s.members.iter().map(|m| m.records_in).collect();
    assert_eq!(records, vec![2505, 2505, 2505, 2505]);
    assert_eq!(s.record_seed, 5);
    assert_eq!(r.message_bytes, 1_002_000);
}

#[test]
fn a_heterosort_with_a_backup_survives_a_member_killed_mid_sort() {
    // Kill node 3 once every copy is in place and before anyone delivered: take the span
    // from a run without the failure, as the heterosort tests do, by its finish times.
    let base = sort_file("protocol = \"heterosort\"\nslicing = \"equal\"\nrecords_per_node = 400");
    let clean = run(&base);
    let done = clean.sort.unwrap().complete_s.unwrap();
    let text = format!("{base}\n[[fail]]\nnode = 3\nat_s = {}\n", done * 0.5);
    let r = run(&text);
    let s = r.sort.unwrap();
    assert_eq!(s.members[3].outcome, "failed");
    assert_eq!(r.failures, 1);
    // The survivors end with every record once (the victim's restored from its copy), or,
    // when it died before its copy was placed, with every record but its own.
    let survivors: u64 = s.members.iter().map(|m| m.records_held).sum();
    assert!(s.check.sorted, "{:?}", s.check);
    assert!(
        s.check.complete || survivors == 1200 - 400,
        "{:?} {survivors}",
        s.check
    );
}

#[test]
fn bad_sort_keys_are_errors_naming_the_file_line_and_key() {
    let cases: &[(&str, &str)] = &[
        (
            "protocol = \"heterosort\"\nrecords_per_node = 10\nmessage_bytes = 100",
            "`workload.message_bytes` does not apply to a sort workload",
        ),
        (
            "protocol = \"quicksort\"\nrecords_per_node = 10",
            "`workload.protocol`: unknown value \"quicksort\": expected one of heterosort, sample-sort",
        ),
        (
            "records_per_node = 10",
            "`workload.protocol` is missing",
        ),
        (
            "protocol = \"sample-sort\"\nslicing = \"speed\"\nrecords_per_node = 10",
            "`workload.slicing` applies to `protocol = \"heterosort\"` only",
        ),
        (
            "protocol = \"heterosort\"\nslicing = \"fast\"\nrecords_per_node = 10",
            "`workload.slicing`: unknown value \"fast\"",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 0",
            "`workload.records_per_node` must be at least 1",
        ),
        (
            "protocol = \"heterosort\"\ntotal_bytes = 1050",
            "`workload.total_bytes` must be a whole number of 100-byte records",
        ),
        (
            "protocol = \"heterosort\"\ntotal_bytes = 300",
            "gives 3 records for 4 nodes",
        ),
        ("protocol = \"heterosort\"", "the records are missing"),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\ntotal_bytes = 400",
            "both given",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nrows = 3",
            "`workload.rows` must divide the 4 nodes",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nbackups = 4",
            "`workload.backups` must be from 0 to 3",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nskew = 2",
            "`workload.skew` applies to `keys = \"skewed\"` only",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nkeys = \"duplicates\"",
            "`workload.distinct_keys` is missing",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nkeys = \"skewed\"\nskew = 0.5",
            "`workload.skew` must be from 1 (uniform) to 64",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nrepetitions = 2",
            "`workload.repetitions`: a sort workload runs once",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\ntree = \"flat\"",
            "`workload.tree` does not apply to a sort workload",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nrecord_seed = -1",
            "`workload.record_seed` must be a non-negative integer",
        ),
        (
            "protocol = \"heterosort\"\nrecords_per_node = 1\nbogus = 1",
            "unknown field `bogus`",
        ),
    ];
    for (workload, want) in cases {
        let e = err(&sort_file(workload));
        assert!(e.contains(want), "{workload:?}: {e}");
        assert!(e.starts_with("w.toml:"), "{e}");
        // Every one names a line (the key's, or the table's).
        let line: usize = e.split(':').nth(1).unwrap().parse().unwrap();
        assert!(line > 30, "{e}");
    }
    // Failures need a sort that restores records; joins are refused.
    let fail = "\n[[fail]]\nnode = 1\nat_s = 0.1\n";
    let e = err(&(sort_file("protocol = \"sample-sort\"\nrecords_per_node = 5") + fail));
    assert!(e.contains("`[[fail]]` in a sort workload needs"), "{e}");
    let e =
        err(&(sort_file("protocol = \"heterosort\"\nbackups = 0\nrecords_per_node = 5") + fail));
    assert!(e.contains("`[[fail]]` in a sort workload needs"), "{e}");
    let join = "\n[[join]]\nnode = 1\nat_s = 0.1\n";
    let e = err(&(sort_file("protocol = \"heterosort\"\nrecords_per_node = 5") + join));
    assert!(e.contains("a sort cannot take a node mid-run"), "{e}");
    // Sort keys elsewhere.
    let e = err(&format!(
        "{PLATFORM}\n[workload]\nprotocol = \"broadcast\"\ntree = \"flat\"\nmessage_bytes = 10\nslicing = \"equal\"\n"
    ));
    assert!(
        e.contains("`workload.slicing` applies to sort workloads only"),
        "{e}"
    );
}

/// Four clusters of four gigabit nodes, every pair joined by a WAN link of `mb_s` MB/s and
/// `ms` ms, as the choice grid's 4 x 4 platforms (`windrose_sim::auto::grid_platform`).
fn wan_file(ms: f64, mb_s: f64, workload: &str) -> String {
    let cluster = "[[platform.cluster]]\nnodes = 4\nnode_uplink_bytes_s = 117e6\nnode_downlink_bytes_s = 117e6\naccess_up_bytes_s = 1e11\naccess_down_bytes_s = 1e11\nintra_latency_s = 1e-4\n";
    let table = |x: f64| {
        let rows: Vec<String> = (0..4)
            .map(|i| {
                let row: Vec<String> = (0..4)
                    .map(|j| if i == j { "0".into() } else { x.to_string() })
                    .collect();
                format!("[{}]", row.join(", "))
            })
            .collect();
        format!("[{}]", rows.join(", "))
    };
    format!(
        "[platform]\n{}[platform.wan]\nbytes_s = {}\nlatency_s = {}\n\n[workload]\nkind = \"auto\"\n{workload}\n",
        cluster.repeat(4),
        table(mb_s * 1e6),
        table(ms / 1e3)
    )
}

#[test]
fn auto_picks_a_tree_for_a_small_message_and_a_multicast_for_a_large_one_over_a_slow_wan() {
    let settings = AutoSettings::default();
    let mut chosen = Vec::new();
    for (bytes, ms, mb_s) in [(1u64 << 10, 1.0, 100.0), (16 << 20, 100.0, 0.5)] {
        let text = wan_file(ms, mb_s, &format!("root = 0\nmessage_bytes = {bytes}"));
        let s = parse_scenario(&text, Path::new("auto.toml")).unwrap();
        let r = run_scenario(&s, 1, None).unwrap();
        assert!(r.all_finished(), "{}", r.summary());
        let a = r.auto.as_ref().expect("an auto report");
        // Every candidate simulated on the same platform: the choice is the grid's, and the
        // run's completion is near the best candidate's.
        let point = run_point(&s.platform, NodeId(0), bytes, &settings).unwrap();
        assert_eq!(a.chosen, point.chosen, "{}", a.explain);
        let done = a.completion_s.unwrap();
        let best = point.best().1;
        assert!(
            done <= 1.5 * best,
            "{bytes} B: auto's {} took {done} s, the best {:?}\n{}",
            a.chosen,
            point.best(),
            a.explain
        );
        assert!(
            a.explain.contains(&format!("chose {}", a.chosen)),
            "{}",
            a.explain
        );
        assert_eq!(a.predictions.len(), 3, "{}", a.explain);
        assert!(r.summary().contains(&format!("auto chose {}", a.chosen)));
        chosen.push((a.chosen, a.deciding_factor));
    }
    assert_eq!(
        chosen[0],
        (Candidate::Broadcast, Some("latency")),
        "{chosen:?}"
    );
    assert_ne!(chosen[1].0, Candidate::Broadcast, "{chosen:?}");
    assert_eq!(chosen[1].1, Some("bandwidth"), "{chosen:?}");
}

#[test]
fn auto_runs_what_it_chose_as_that_protocol_would_run() {
    // Large over a slow WAN: a multicast; the report's multicast entries are its outcome.
    let text = wan_file(
        100.0,
        0.5,
        "message_bytes = \"16MiB\"\npiece_bytes = \"512KiB\"",
    );
    let r = run(&text);
    let a = r.auto.as_ref().unwrap();
    assert_eq!(a.piece_bytes, 512 << 10);
    assert_eq!(r.multicast.len(), 1);
    assert_eq!(r.multicast[0].protocol.to_string(), a.chosen.name());
    // The multicast's completion (its last receiver) is the repetition's makespan.
    let (m, d) = (
        r.multicast[0].completion_s.unwrap(),
        a.completion_s.unwrap(),
    );
    assert!((m - d).abs() < 1e-6, "{m} {d}");
    // Small: the broadcast over the planner's tree, cut into the workload's segments.
    let text = wan_file(
        1.0,
        100.0,
        "message_bytes = \"64KiB\"\nsegment_bytes = \"16KiB\"",
    );
    let r = run(&text);
    assert_eq!(r.auto.as_ref().unwrap().chosen, Candidate::Broadcast);
    assert_eq!(r.segment_bytes, Some(16 << 10));
    assert!(r.all_finished());
    assert!(r.nodes.iter().filter(|n| n.parent.is_none()).count() == 1);
}

#[test]
fn bad_auto_keys_are_errors() {
    for (workload, want) in [
        (
            "message_bytes = 10\nprotocol = \"mob\"",
            "`workload.protocol` does not apply to `kind = \"auto\"`",
        ),
        (
            "message_bytes = 10\ntree = \"flat\"",
            "`workload.tree` does not apply to `kind = \"auto\"`",
        ),
        ("root = 0", "`workload.message_bytes` is missing"),
        (
            "message_bytes = 0",
            "`workload.message_bytes` must be from 1 byte",
        ),
        (
            "message_bytes = \"1GiB\"\npiece_bytes = 1",
            "`workload.piece_bytes` cuts the 1 GiB message",
        ),
        (
            "message_bytes = 10\nrecords_per_node = 3",
            "`workload.records_per_node` applies to sort workloads only",
        ),
    ] {
        let e = err(&wan_file(10.0, 5.0, workload));
        assert!(e.contains(want), "{workload:?}: {e}");
        assert!(e.starts_with("w.toml:3"), "{e}");
    }
}
