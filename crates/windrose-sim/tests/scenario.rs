//! Scenario files: every error names the file, line and key; the shipped examples load and run;
//! mayhem is a pure function of the seed; the event log is the same bytes run after run;
//! repetitions, timed changes and failures do what the file says.

use std::path::{Path, PathBuf};
use windrose_model::platform::LinkId;
use windrose_model::{ClusterId, NodeId};
use windrose_sim::metrics::NodeOutcome;
use windrose_sim::network::Change;
use windrose_sim::scenario::{
    build_tree, load_scenario, parse_scenario, run_scenario, Mayhem, PlatformCosts, Scenario,
    ScenarioError, TreeCosts,
};
use windrose_trees::{Tree, TreeAlgorithm};

use crate::support::scenario_text;
use scenario_text::{err, line_of, small, PLATFORM};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios")
}

fn example(name: &str) -> Scenario {
    load_scenario(&data_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn parse_errors_name_file_line_and_key() {
    // (text, needle on the faulty line, key named in the message)
    let cases: Vec<(String, &str, &str)> = vec![
        (
            small("[[change]]\nat_s = 1\nlink = \"wan:0:7\"\nbytes_s = 1e5\n"),
            "link = \"wan:0:7\"",
            "change[0].link",
        ),
        (
            small("[[change]]\nat_s = -1\nlink = \"wan:0:1\"\nbytes_s = 1e5\n"),
            "at_s = -1",
            "change[0].at_s",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"node_up:0\"\nlatency_s = 0.5\n"),
            "latency_s = 0.5",
            "change[0].latency_s",
        ),
        (
            small("[[change]]\nat_s = 1\nlink = \"wan:0:1\"\nbytes_s = 1e5\nfraction = 0.5\n"),
            "bytes_s = 1e5\nfraction",
            "change[0].bytes_s",
        ),
        (
            small("[mayhem]\nperiod_s = 0\n"),
            "period_s = 0",
            "mayhem.period_s",
        ),
        (
            small("[mayhem]\nperiod_s = 1e-9\n"),
            "period_s = 1e-9",
            "mayhem.period_s",
        ),
        (
            small("[mayhem]\nperiod_s = 0.001\nuntil_s = 1e6\n"),
            "period_s = 0.001",
            "mayhem.period_s",
        ),
        (
            small("")
                .replace("message_bytes = \"100kB\"", "message_bytes = \"8MiB\"")
                .replace("segment_bytes = \"10kB\"", "segment_bytes = 1"),
            "segment_bytes = 1",
            "workload.segment_bytes",
        ),
        (
            small("[mayhem]\nperiod_s = 5\nmin_fraction = 0.5\nmax_fraction = 0.2\n"),
            "max_fraction = 0.2",
            "mayhem.max_fraction",
        ),
        (
            small("[mayhem]\nperiod_s = 5\nlinks = \"some\"\n"),
            "links = \"some\"",
            "mayhem.links",
        ),
        (
            small("[[fail]]\nnode = 9\nat_s = 1\n"),
            "node = 9",
            "fail[0].node",
        ),
        (
            small("").replace("tree = \"binomial\"", "tree = \"mts\""),
            "tree = \"mts\"",
            "workload.tree",
        ),
        (
            small("").replace("protocol = \"broadcast\"", "protocol = \"gossip\""),
            "protocol = \"gossip\"",
            "workload.protocol",
        ),
        (
            small("").replace(
                "message_bytes = \"100kB\"",
                "message_bytes = \"12 parsecs\"",
            ),
            "message_bytes = \"12 parsecs\"",
            "workload.message_bytes",
        ),
        (
            small("").replace("message_bytes = \"100kB\"", "message_bytes = 1.5"),
            "message_bytes = 1.5",
            "workload.message_bytes",
        ),
        (
            small("").replace("segment_bytes = \"10kB\"", "segment_bytes = 0"),
            "segment_bytes = 0",
            "workload.segment_bytes",
        ),
        (
            small("").replace("root = 0", "root = 5"),
            "root = 5",
            "workload.root",
        ),
        (
            small("").replace("root = 0", "root = \"zero\""),
            "root = \"zero\"",
            "workload.root",
        ),
        (
            small("") + "repetitions = 0\n",
            "repetitions = 0",
            "workload.repetitions",
        ),
        (
            small("") + "sharing = \"fair\"\n",
            "sharing = \"fair\"",
            "workload.sharing",
        ),
        (
            small("") + "compute_bytes_s = -1e6\n",
            "compute_bytes_s = -1e6",
            "workload.compute_bytes_s",
        ),
        (small("[compute]\ncpu = 0\n"), "cpu = 0", "compute.cpu"),
        (
            small("[compute]\ncore_bytes_s = \"fast\"\n"),
            "core_bytes_s",
            "compute.core_bytes_s",
        ),
        (
            small("[compute]\n[[compute.cluster]]\nid = 2\ncpu = 0.5\n"),
            "id = 2",
            "compute.cluster[0].id",
        ),
        (
            small("[compute]\n[[compute.node]]\nid = 1\ncpu = 2000\n"),
            "cpu = 2000",
            "compute.node[0].cpu",
        ),
        (
            small("[compute]\n[[compute.node]]\nid = 9\ncpu = 0.5\n"),
            "id = 9",
            "compute.node[0].id",
        ),
        // The platform's own errors keep their file:line:column and key.
        (
            small("").replace(
                "access_down_bytes_s = 1e7\nintra_latency_s = 0.001\n[[platform.cluster]]",
                "access_down_bytes_s = -1\nintra_latency_s = 0.001\n[[platform.cluster]]",
            ),
            "access_down_bytes_s = -1",
            "platform.cluster[0].access_down_bytes_s",
        ),
    ];
    for (text, needle, key) in cases {
        let e = err(&text);
        let line = line_of(&text, needle);
        assert!(
            e.starts_with(&format!("s.toml:{line}:")),
            "expected s.toml:{line}: for {key}, got: {e}"
        );
        assert!(e.contains(&format!("`{key}`")), "expected `{key}` in: {e}");
    }
}

#[test]
fn unknown_keys_missing_tables_and_joins_are_reported() {
    let e = err(&small("").replace("segment_bytes", "segmnet_bytes"));
    assert!(e.contains("unknown field `segmnet_bytes`"), "{e}");
    assert!(
        e.starts_with(&format!("s.toml:{}:", line_of(&small(""), "segment_bytes"))),
        "{e}"
    );
    let e = err(&small("[workloda]\nx = 1\n"));
    assert!(e.contains("unknown field `workloda`"), "{e}");
    let e = err(PLATFORM);
    assert_eq!(
        e,
        "s.toml: no `[workload]` table: expected `protocol`, `tree`, `root` and `message_bytes`"
    );
    let e = err(&small("").replace("message_bytes = \"100kB\"\n", ""));
    assert!(e.contains("`workload.message_bytes` is missing"), "{e}");
    let text = small("[[join]]\nnode = 3\nat_s = 1\n");
    let e = err(&text);
    assert_eq!(e, "no error", "a broadcast takes joins");
    let text = std::fs::read_to_string(data_dir().join("scatter-two-sites.toml")).unwrap()
        + "\n[[join]]\nnode = 3\nat_s = 1\n";
    let e = err(&text);
    assert!(
        e.contains("`join[0].node`: a scatter cannot take a node mid-run"),
        "{e}"
    );
    let mc = |extra: &str| {
        small(extra)
            .replace(
                "protocol = \"broadcast\"\ntree = \"binomial\"\n",
                "kind = \"multicast\"\nprotocol = \"mob\"\npiece_bytes = \"10kB\"\n",
            )
            .replace("segment_bytes = \"10kB\"\n", "")
    };
    assert_eq!(err(&mc("[[join]]\nnode = 3\nat_s = 1\n")), "no error");
    let e = err(&mc("[[join]]\nnode = 0\nat_s = 1\n"));
    assert!(e.contains("`join[0].node`: the root cannot join"), "{e}");
    let e = err(&mc(
        "[[join]]\nnode = 3\nat_s = 1\n[[join]]\nnode = 3\nat_s = 2\n",
    ));
    assert!(e.contains("`join[1].node`: node 3 joins twice"), "{e}");
    let e = err(&mc("[[join]]\nnode = 9\nat_s = 1\n"));
    assert!(e.contains("join[0].node"), "{e}");
    let e = err(&small("[[change]]\nat_s = 1\nlink = \"wan:0:1\"\n"));
    assert!(e.contains("`change[0]` changes nothing"), "{e}");
    assert!(matches!(
        parse_scenario("x = [", Path::new("s.toml")),
        Err(ScenarioError::File { line: 1, .. })
    ));
}

#[test]
fn changes_mayhem_failures_and_workload_are_read() {
    let text = small(
        "[[change]]\nat = 1.5\nlink = \"wan:0:1\"\nfraction = 0.5\nlatency_s = 0.04\nboth_directions = true\n\
         [[change]]\nat_s = 2\nlink = \"intra:1\"\nlatency_s = 0.002\n\
         [mayhem]\nperiod_s = 5\nlinks = \"wan\"\n\
         [[fail]]\nnode = 4\nat_s = 0.5\n",
    )
    .replace("segment_bytes = \"10kB\"", "segment_bytes = \"10KiB\"\nrepetitions = 3\nsharing = \"rtt-weighted\"");
    let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
    let (a, b) = (ClusterId(0), ClusterId(1));
    let at: Vec<f64> = s.changes.iter().map(|c| c.at_s).collect();
    assert_eq!(at, [1.5, 1.5, 1.5, 1.5, 2.0]);
    assert_eq!(
        s.changes[0].change,
        Change::Capacity {
            link: LinkId::Wan { from: a, to: b },
            bytes_s: 2.5e5
        }
    );
    assert_eq!(
        s.changes[3].change,
        Change::WanLatency {
            from: b,
            to: a,
            latency_s: 0.04
        }
    );
    assert_eq!(
        s.changes[4].change,
        Change::IntraLatency {
            cluster: b,
            latency_s: 0.002
        }
    );
    let m = s.mayhem.unwrap();
    assert_eq!(
        (m.period_s, m.min_fraction, m.max_fraction),
        (5.0, 0.1, 1.0)
    );
    assert_eq!(m.selected_links(&s.platform).len(), 2);
    assert_eq!(s.failures[0].node, NodeId(4));
    assert_eq!(s.workload.segment_bytes, 10 << 10);
    assert_eq!(s.workload.message_bytes, 100_000);
    assert_eq!(s.workload.repetitions, 3);
    assert_eq!(s.name, "s");
}

#[test]
fn example_files_load() {
    let mut names: Vec<String> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "{names:?}");
    for n in &names {
        let s = example(n);
        assert!(s.description.is_some(), "{n} has no description");
        s.tree().unwrap_or_else(|e| panic!("{n}: {e}"));
    }
    let s = example("seed004-six-sites.toml");
    assert_eq!(s.platform.node_count(), 24);
    assert_eq!(s.workload.root, NodeId(12));
    assert_eq!(s.workload.repetitions, 16);
    assert!(example("mayhem.toml").mayhem.is_some());
    assert_eq!(example("four-clusters.toml").changes.len(), 2);
}

#[test]
fn every_tree_algorithm_spans_the_platform() {
    let s = example("four-clusters.toml");
    for algo in TreeAlgorithm::ALL {
        for costs in [TreeCosts::Latency, TreeCosts::Transfer] {
            let t: Tree = build_tree(&s.platform, algo, NodeId(5), costs, 1 << 20).unwrap();
            assert_eq!(t.len(), 64, "{algo}");
            assert_eq!(t.root(), NodeId(5));
        }
    }
    let chain = build_tree(
        &s.platform,
        TreeAlgorithm::Chain,
        NodeId(62),
        TreeCosts::Latency,
        1,
    )
    .unwrap();
    assert_eq!(chain.children(NodeId(63)), &[NodeId(0)]);
    assert_eq!(chain.parent(NodeId(61)), Some(NodeId(60)));
    // The widest-path tree avoids the 3 MB/s A-C link: C is reached through D or B.
    let t = build_tree(
        &s.platform,
        TreeAlgorithm::MaxBottleneck,
        NodeId(0),
        TreeCosts::Latency,
        1,
    )
    .unwrap();
    let bw = PlatformCosts::bandwidth_mb_s(&s.platform);
    for n in 32..48u32 {
        let mut x = NodeId(n);
        let mut narrowest = f64::INFINITY;
        while let Some(p) = t.parent(x) {
            narrowest = narrowest.min(windrose_model::LinkCosts::cost(&bw, p, x));
            x = p;
        }
        assert!(narrowest > 3.0, "node {n}: {narrowest} MB/s");
    }
}

#[test]
fn seed004_paths_to_process_0() {
    let s = example("seed004-six-sites.toml");
    let lat = PlatformCosts::latency_ms(&s.platform);
    let path = |algo| {
        build_tree(&s.platform, algo, NodeId(12), TreeCosts::Latency, 24)
            .unwrap()
            .path_cost(NodeId(0), &lat)
    };
    assert!((path(TreeAlgorithm::Binomial) - 96.5).abs() < 1e-9);
    assert!((path(TreeAlgorithm::Magpie) - 14.9).abs() < 1e-9);
}

/// The capacities mayhem gives, draw by draw.
fn draws(s: &Scenario, seed: u64, count: usize) -> Vec<Vec<Change>> {
    let m = s.mayhem.unwrap();
    let links = m.selected_links(&s.platform);
    let mut rng = Mayhem::rng(seed);
    (0..count)
        .map(|_| m.draw(&mut rng, &s.platform, &links))
        .collect()
}

#[test]
fn mayhem_is_deterministic_per_seed_and_differs_across_seeds() {
    let s = example("mayhem.toml");
    let a = draws(&s, 7, 4);
    assert_eq!(a, draws(&s, 7, 4));
    assert_ne!(a, draws(&s, 8, 4));
    assert_ne!(a[0], a[1], "consecutive draws differ");
    let mut fractions = Vec::new();
    for draw in &a {
        assert_eq!(draw.len(), s.platform.link_count());
        for c in draw {
            let Change::Capacity { link, bytes_s } = *c else {
                panic!("mayhem only changes capacities")
            };
            let f = bytes_s / s.platform.capacity_bytes_s(link);
            assert!((0.1..=1.0).contains(&f), "{f}");
            fractions.push(f);
        }
    }
    let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
    assert!((mean - 0.55).abs() < 0.03, "mean fraction {mean}");
    // Whole runs: same seed, same result; another seed, other completion times.
    let r1 = run_scenario(&s, 7, None).unwrap();
    let r2 = run_scenario(&s, 7, None).unwrap();
    let r3 = run_scenario(&s, 8, None).unwrap();
    assert_eq!(r1, r2);
    assert!(r1.mayhem_draws >= 2, "{}", r1.mayhem_draws);
    assert_ne!(r1.repetitions[0].makespan_s, r3.repetitions[0].makespan_s);
    assert!(r1.all_finished() && r3.all_finished());
}

#[test]
fn event_log_is_byte_identical_and_on_the_scenario_clock() {
    let s = example("four-clusters.toml");
    let mut a = Vec::new();
    let mut b = Vec::new();
    let ra = run_scenario(&s, 1, Some(&mut a)).unwrap();
    let rb = run_scenario(&s, 1, Some(&mut b)).unwrap();
    assert_eq!(ra, rb);
    assert!(!a.is_empty());
    assert!(a == b, "logs differ");
    // Without a log, the same results.
    assert_eq!(run_scenario(&s, 1, None).unwrap(), ra);
    let text = String::from_utf8(a).unwrap();
    let mut last = 0.0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["t"].as_f64().unwrap();
        assert!(t >= last, "time goes back at {line}");
        last = t;
    }
    assert!(text.contains("\"ev\":\"change\",\"link\":\"wan:1:3\""));
    assert!(text.contains("\"ev\":\"fail\""));
    // Repetitions: the second one's lines come after the first one's end.
    let s = example("seed004-six-sites.toml");
    let mut log = Vec::new();
    let r = run_scenario(&s, 0, Some(&mut log)).unwrap();
    let text = String::from_utf8(log).unwrap();
    let starts: Vec<f64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["ev"] == "repetition")
        .map(|v| v["t"].as_f64().unwrap())
        .collect();
    assert_eq!(starts.len(), r.repetitions.len());
    for (t, rep) in starts.iter().zip(&r.repetitions) {
        // serde_json's float parsing may be 1 ulp off.
        assert!(
            (t - rep.start_s).abs() <= 1e-12 * rep.start_s.max(1.0),
            "{t} vs {}",
            rep.start_s
        );
    }
}

#[test]
fn four_clusters_run_changes_and_failure() {
    let s = example("four-clusters.toml");
    let r = run_scenario(&s, s.default_seed, None).unwrap();
    assert_eq!(r.repetitions.len(), 1);
    assert_eq!(r.changes_applied, 2);
    assert_eq!(r.failures, 1);
    let failed: Vec<NodeId> = r
        .nodes
        .iter()
        .filter(|n| n.outcomes[0] == NodeOutcome::Failed)
        .map(|n| n.node)
        .collect();
    assert_eq!(failed, [NodeId(61)]);
    for n in &r.nodes {
        if n.node != NodeId(61) {
            assert_eq!(n.outcomes[0], NodeOutcome::Finished, "node {}", n.node);
            let expect = if n.node == NodeId(0) { 0 } else { 16 << 20 };
            assert_eq!(n.app_bytes_delivered, expect, "node {}", n.node);
        }
    }
    // The WAN slowdown at 2 s costs time: compare with the same scenario without it.
    let mut calm = s.clone();
    calm.changes.clear();
    let rc = run_scenario(&calm, 0, None).unwrap();
    assert!(rc.repetitions[0].makespan_s < r.repetitions[0].makespan_s);
    assert_eq!(rc.changes_applied, 0);
    // Bytes per link: every WAN link the tree uses carried at least the message.
    let wan: f64 = r
        .links
        .iter()
        .filter(|l| matches!(LinkId::from(l.link), LinkId::Wan { .. }))
        .map(|l| l.bytes)
        .sum();
    assert!(wan >= 3.0 * (16u64 << 20) as f64, "{wan}");
}

#[test]
fn repetitions_run_one_after_the_other() {
    let s = example("seed004-six-sites.toml");
    let r = run_scenario(&s, 0, None).unwrap();
    assert_eq!(r.repetitions.len(), 16);
    assert!(r.all_finished());
    let one = r.repetitions[0].makespan_s.unwrap();
    for (k, rep) in r.repetitions.iter().enumerate() {
        let m = rep.makespan_s.unwrap();
        assert!((m - one).abs() < 1e-9, "repetition {k}: {m} vs {one}");
        if k > 0 {
            assert_eq!(rep.start_s, r.repetitions[k - 1].end_s);
        }
    }
    // The MagPIe tree's slowest path: 12 -> 8 is 701.2 ms, then nothing (8 is S2's
    // coordinator; S2's other members are at ~0 ms).
    assert!((one - 0.7012).abs() < 1e-3, "{one}");
    assert!((r.end_s - 16.0 * one).abs() < 1e-6);
}

#[test]
fn scatter_finishes_near_the_schedule() {
    let s = example("scatter-two-sites.toml");
    let r = run_scenario(&s, 0, None).unwrap();
    assert!(r.all_finished());
    let predicted = r.predicted_finish_s.unwrap();
    for n in &r.nodes {
        let done = n.compute_done_s[0].unwrap();
        // Zero latencies; the only difference is the frame overhead (a few bytes per MiB).
        assert!(
            ((done - predicted) / predicted).abs() < 1e-3,
            "node {}: {done} vs {predicted}",
            n.node
        );
    }
}

#[test]
fn failed_nodes_stay_failed_and_stuck_runs_end() {
    // A leaf fails during the first of three broadcasts: it stays failed in the next two, and
    // everyone else finishes all three.
    let text = small("[[fail]]\nnode = 4\nat_s = 0.001\n").replace(
        "segment_bytes = \"10kB\"",
        "segment_bytes = \"10kB\"\nrepetitions = 3",
    );
    let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
    let r = run_scenario(&s, 0, None).unwrap();
    assert_eq!(r.repetitions.len(), 3);
    assert_eq!(r.failures, 1);
    for n in &r.nodes {
        let expect = if n.node == NodeId(4) {
            NodeOutcome::Failed
        } else {
            NodeOutcome::Finished
        };
        assert!(n.outcomes.iter().all(|o| *o == expect), "{n:?}");
    }
    // The root of a chain fails mid-send: its child aborts, the rest wait for ever; the run
    // still ends, and so does the next repetition.
    let text = small("[[fail]]\nnode = 0\nat_s = 0.01\n")
        .replace("tree = \"binomial\"", "tree = \"chain\"")
        .replace(
            "segment_bytes = \"10kB\"",
            "segment_bytes = \"10kB\"\nrepetitions = 2",
        );
    let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
    let r = run_scenario(&s, 0, None).unwrap();
    assert_eq!(r.repetitions.len(), 2);
    for rep in &r.repetitions {
        assert_eq!(
            (rep.failed, rep.aborted, rep.unfinished),
            (1, 1, 3),
            "{rep:?}"
        );
    }
    assert!(!r.all_finished());
}

/// A `[[fail]]` then a `[[join]]` of the same node is a restart: the node is there from the
/// start, fails halfway, comes back keeping the pieces it had delivered in order (what a real
/// node finds verified on disk; the log's `rejoin` line says how many), and finishes with every
/// byte after it came back; so does everyone else.
#[test]
fn a_node_failed_and_restarted_keeps_its_stored_pieces_and_completes() {
    for protocol in ["mob", "bittorrent", "balanced", "magpie"] {
        let multicast = |extra: &str| {
            small(extra)
                .replace(
                    "protocol = \"broadcast\"\ntree = \"binomial\"\n",
                    &format!(
                        "kind = \"multicast\"\nprotocol = \"{protocol}\"\npiece_bytes = \"10kB\"\n"
                    ),
                )
                .replace("segment_bytes = \"10kB\"\n", "")
        };
        let plain = parse_scenario(&multicast(""), Path::new("s.toml")).unwrap();
        let plain = run_scenario(&plain, 1, None).unwrap();
        let done = plain.nodes[4].completion_s[0].unwrap();
        let (fail_at, back_at) = (done * 0.6, done * 0.7);
        let text = multicast(&format!(
            "[[fail]]\nnode = 4\nat_s = {fail_at}\n[[join]]\nnode = 4\nat_s = {back_at}\n"
        ));
        let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
        assert!(s.restarts(NodeId(4)));
        let mut log = Vec::new();
        let r = run_scenario(&s, 1, Some(&mut log)).unwrap();
        for (i, n) in r.nodes.iter().enumerate() {
            assert_eq!(n.outcomes, [NodeOutcome::Finished], "{protocol}: node {i}");
        }
        let n4 = &r.nodes[4];
        assert!(n4.completion_s[0].unwrap() > back_at, "{protocol}: {n4:?}");
        // Its second life delivers all the bytes (the kept ones again, in order).
        assert_eq!(n4.app_bytes_delivered, 100_000, "{protocol}: {n4:?}");
        let rejoin: serde_json::Value = String::from_utf8(log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["ev"] == "rejoin")
            .unwrap_or_else(|| panic!("{protocol}: no rejoin line in the log"));
        assert_eq!(rejoin["node"], 4);
        // 60 % of the way through it holds some pieces, in any order (BitTorrent's are random:
        // a prefix would often be empty), and not all.
        let kept = rejoin["kept_pieces"].as_u64().unwrap();
        assert!((1..10).contains(&kept), "{protocol}: {rejoin}");
    }
}

/// A node that joins a MOB multicast late fetches everything and finishes after it joined;
/// every protocol takes it the same way, and before its join it holds nothing.
#[test]
fn a_late_node_joins_a_multicast_and_completes() {
    let bcast = parse_scenario(
        &small("[[join]]\nnode = 4\nat_s = 0.1\n"),
        Path::new("s.toml"),
    )
    .unwrap();
    let r = run_scenario(&bcast, 1, None).unwrap();
    for (i, n) in r.nodes.iter().enumerate() {
        assert_eq!(n.outcomes, [NodeOutcome::Finished], "broadcast: node {i}");
        if i != 0 {
            assert_eq!(n.app_bytes_delivered, 100_000, "broadcast: node {i}");
        }
    }
    assert!(r.nodes[4].completion_s[0].unwrap() > 0.1);
    for protocol in ["mob", "bittorrent", "balanced", "magpie"] {
        let text = small("[[join]]\nnode = 4\nat_s = 0.1\n")
            .replace(
                "protocol = \"broadcast\"\ntree = \"binomial\"\n",
                &format!(
                    "kind = \"multicast\"\nprotocol = \"{protocol}\"\npiece_bytes = \"10kB\"\n"
                ),
            )
            .replace("segment_bytes = \"10kB\"\n", "");
        let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
        assert_eq!(s.joins.len(), 1);
        let r = run_scenario(&s, 1, None).unwrap();
        let n4 = &r.nodes[4];
        assert_eq!(n4.outcomes, [NodeOutcome::Finished], "{protocol}: {n4:?}");
        let done = n4.completion_s[0].unwrap();
        assert!(done > 0.1, "{protocol}: finished at {done}");
        assert_eq!(n4.app_bytes_delivered, 100_000, "{protocol}");
        for (i, n) in r.nodes.iter().enumerate().filter(|(i, _)| *i != 4) {
            assert_eq!(n.outcomes, [NodeOutcome::Finished], "{protocol}: node {i}");
        }
    }
}

/// Issue 21, defect 7: `[mayhem] period_s = 1e-9` filled gigabytes in `sim run` (the engine
/// keeps every change it applies). A period below a millisecond is refused at its line, and a
/// run whose mayhem would pass `MAX_MAYHEM_CHANGES` link changes stops with an error naming
/// the key instead of growing without end.
#[test]
fn mayhem_far_faster_than_the_run_is_bounded() {
    let e = err(&small("[mayhem]\nperiod_s = 1e-9\n"));
    assert!(
        e.contains("`mayhem.period_s` is 1e-9, below the shortest period"),
        "{e}"
    );
    // 16 links redrawn every millisecond: 2e6 link changes by t = 125 s, in a broadcast of
    // 100 MB over a 0.5 MB/s WAN that lasts longer.
    let text = small("[mayhem]\nperiod_s = 0.001\nlinks = \"all\"\n")
        .replace("message_bytes = \"100kB\"", "message_bytes = \"100MB\"")
        .replace("segment_bytes = \"10kB\"", "segment_bytes = \"1MB\"");
    let s = parse_scenario(&text, Path::new("fast.toml")).unwrap();
    let e = run_scenario(&s, 1, None).unwrap_err().to_string();
    assert!(
        e.starts_with("fast.toml: `mayhem.period_s` = 0.001 redraws 16 links every period: 125000 draws by t = 125 s"),
        "{e}"
    );
    assert!(e.contains("at most 2000000 link changes"), "{e}");
}

/// A `[generated_platform]` with `extra` lines appended to the table.
fn generated(sites: usize, nodes: usize, seed: u64, extra: &str) -> String {
    format!(
        r#"[generated_platform]
seed = {seed}
sites = {sites}
plane_km = 4000
nodes = {nodes}
node_bytes_s = 1.25e9
access_bytes_s = [1e9, 1.25e9]
intra_latency_s = 1e-4
wan_bytes_s = [3e6, 5e6]
{extra}
[workload]
kind = "multicast"
protocol = "mob"
root = 0
message_bytes = "64MiB"
piece_bytes = "256KiB"
"#
    )
}

/// Every link's capacity and every WAN link's latency.
fn fingerprint(s: &Scenario) -> (Vec<f64>, Vec<f64>) {
    let p = &s.platform;
    let caps = p.links().map(|l| p.capacity_bytes_s(l)).collect();
    let lats = p
        .links()
        .filter(|l| matches!(l, LinkId::Wan { .. }))
        .map(|l| p.link_latency_s(l))
        .collect();
    (caps, lats)
}

#[test]
fn a_16384_node_scenario_is_a_few_lines() {
    let text = generated(4, 4096, 7, "");
    assert!(text.lines().count() < 20);
    let s = parse_scenario(&text, Path::new("big.toml")).unwrap();
    assert_eq!(s.platform.node_count(), 16_384);
    assert_eq!(s.platform.cluster_count(), 4);
    let p = &s.platform;
    for l in p.links() {
        let c = p.capacity_bytes_s(l);
        match l {
            LinkId::NodeUp(_) | LinkId::NodeDown(_) => assert_eq!(c, 1.25e9),
            LinkId::AccessUp(_) | LinkId::AccessDown(_) => assert!((1e9..=1.25e9).contains(&c)),
            LinkId::Wan { .. } => assert!((3e6..=5e6).contains(&c), "{l:?}: {c}"),
        }
    }
    // Latency: intra + 1 ms + distance at 5 µs/km; at most the square's diagonal apart.
    let (_, lats) = fingerprint(&s);
    let max = 1e-3 + 4000.0 * std::f64::consts::SQRT_2 * 5e-6;
    for &l in &lats {
        assert!(l >= 1e-3 && l <= max + 1e-9, "latency {l}");
    }
    // Symmetric: from a to z as from z to a.
    for a in 0..4u32 {
        for z in (0..4u32).filter(|&z| z != a) {
            let (a, z) = (ClusterId(a), ClusterId(z));
            assert_eq!(
                p.link_latency_s(LinkId::Wan { from: a, to: z }),
                p.link_latency_s(LinkId::Wan { from: z, to: a })
            );
        }
    }
}

#[test]
fn a_generated_platform_is_a_function_of_its_seed() {
    let a = parse_scenario(&generated(6, 3, 11, ""), Path::new("a.toml")).unwrap();
    let b = parse_scenario(&generated(6, 3, 11, ""), Path::new("b.toml")).unwrap();
    let c = parse_scenario(&generated(6, 3, 12, ""), Path::new("c.toml")).unwrap();
    assert_eq!(fingerprint(&a), fingerprint(&b));
    assert_ne!(fingerprint(&a), fingerprint(&c));
    // The WAN capacities are drawn, not all the same.
    let wan: Vec<f64> = a
        .platform
        .links()
        .filter(|l| matches!(l, LinkId::Wan { .. }))
        .map(|l| a.platform.capacity_bytes_s(l))
        .collect();
    assert_eq!(wan.len(), 30);
    assert!(wan.iter().any(|&x| x != wan[0]));
    // Optional latency parameters: no distance term leaves the base latency everywhere.
    let flat = parse_scenario(
        &generated(
            3,
            2,
            1,
            "wan_latency_s_per_km = 0\nwan_base_latency_s = 0.02",
        ),
        Path::new("f.toml"),
    )
    .unwrap();
    assert!(fingerprint(&flat).1.iter().all(|&l| l == 0.02));
}

#[test]
fn a_generated_platform_runs() {
    let text = generated(3, 4, 5, "").replace("64MiB", "1MiB");
    let s = parse_scenario(&text, Path::new("g.toml")).unwrap();
    let r = run_scenario(&s, 1, None).unwrap();
    assert!(r.all_finished());
}

#[test]
fn generated_platform_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("sites = 4", "sites = 0", "`generated_platform.sites` is 0"),
        (
            "nodes = 4",
            "nodes = -2",
            "`generated_platform.nodes` is -2",
        ),
        ("nodes = 4", "nodes = 9000000", "more than the"),
        (
            "wan_bytes_s = [3e6, 5e6]",
            "wan_bytes_s = [5e6, 3e6]",
            "`generated_platform.wan_bytes_s` must be a positive",
        ),
        (
            "wan_bytes_s = [3e6, 5e6]",
            "wan_bytes_s = [3e6]",
            "`generated_platform.wan_bytes_s` must be",
        ),
        (
            "node_bytes_s = 1.25e9",
            "node_bytes_s = -1",
            "`generated_platform.node_bytes_s` must be a positive",
        ),
        (
            "access_bytes_s = [1e9, 1.25e9]",
            "access_bytes_s = \"fast\"",
            "`generated_platform.access_bytes_s` must be",
        ),
        (
            "intra_latency_s = 1e-4",
            "intra_latency_s = -1",
            "`generated_platform.intra_latency_s` must be a finite, non-negative",
        ),
        (
            "plane_km = 4000",
            "plane_km = -5",
            "`generated_platform.plane_km` must be a finite, non-negative",
        ),
        (
            "plane_km = 4000",
            "",
            "`generated_platform.plane_km` is missing",
        ),
        (
            "wan_bytes_s = [3e6, 5e6]",
            "",
            "`generated_platform.wan_bytes_s` is missing",
        ),
        (
            "seed = 3",
            "seed = -3",
            "`generated_platform.seed` must be a non-negative",
        ),
        ("seed = 3", "sead = 3", "unknown field `sead`"),
    ];
    let base = generated(4, 4, 3, "");
    for &(from, to, want) in cases {
        assert!(base.contains(from), "{from}");
        let text = base.replacen(from, to, 1);
        let e = err(&text);
        assert!(e.contains(want), "{to:?}: {e}");
        assert!(e.starts_with("s.toml:"), "{to:?}: {e}");
    }
    // With a `[platform]` too.
    let e = err(&format!("{PLATFORM}{}", generated(2, 2, 0, "")));
    assert!(
        e.contains("`generated_platform` and `platform` are both given"),
        "{e}"
    );
}

/// `[compute]`: shares of a core, the table's default under each cluster's under each node's;
/// the old per-workload speeds now apply to every workload but not beside `[compute]`.
#[test]
fn node_speeds_come_from_compute_shares_for_every_workload() {
    let text = small(
        "[compute]\ncore_bytes_s = 4e6\ncpu = 0.5\n[[compute.cluster]]\nid = 1\ncpu = 0.25\n\
         [[compute.node]]\nid = 4\ncpu = 2\n",
    );
    let s = parse_scenario(&text, Path::new("s.toml")).unwrap();
    let c = s.compute.as_ref().unwrap();
    assert_eq!(
        c.cpu,
        [Some(0.5), Some(0.5), Some(0.5), Some(0.25), Some(2.0)]
    );
    assert_eq!(s.workload.compute_bytes_s, [2e6, 2e6, 2e6, 1e6, 8e6]);
    // Nodes without a share: one core in the simulator, unthrottled on a testbed.
    let s = parse_scenario(
        &small("[compute]\n[[compute.node]]\nid = 1\ncpu = 0.5\n"),
        Path::new("s.toml"),
    )
    .unwrap();
    assert_eq!(s.compute.as_ref().unwrap().cpu[..2], [None, Some(0.5)]);
    assert_eq!(s.workload.compute_bytes_s[..2], [1e8, 5e7]);
    // A broadcast given no speed computes instantly (as before); given one, at that speed.
    assert!(example_free(&small("")).iter().all(|v| v.is_infinite()));
    assert_eq!(
        example_free(&(small("") + "compute_bytes_s = 3e6\n"))[..],
        [3e6; 5]
    );
    let e = err(&(small("[compute]\ncpu = 1\n") + "compute_bytes_s = 3e6\n"));
    assert!(
        e.starts_with(&format!(
            "s.toml:{}:",
            line_of(
                &(small("[compute]\ncpu = 1\n") + "compute_bytes_s = 3e6\n"),
                "compute_bytes_s = 3e6"
            )
        )) && e.contains("both give node speeds"),
        "{e}"
    );
    let e = err(&small(
        "[compute]\n[[compute.node]]\nid = 1\ncpu = 0.5\n[[compute.node]]\nid = 1\ncpu = 1\n",
    ));
    assert!(e.contains("node 1 is given twice"), "{e}");
}

fn example_free(text: &str) -> Vec<f64> {
    parse_scenario(text, Path::new("s.toml"))
        .unwrap()
        .workload
        .compute_bytes_s
}

/// The same speeds written as `[compute]` shares or as the scatter's bytes/s give the same run;
/// slower shares finish later.
#[test]
fn compute_shares_charge_the_simulated_compute() {
    let base = std::fs::read_to_string(data_dir().join("scatter-two-sites.toml")).unwrap();
    let (head, _) = base.split_once("compute_bytes_s = 2e7").unwrap();
    let shares = |fast: f64| {
        format!(
            "{head}send_mode = \"sequential\"\n[compute]\ncore_bytes_s = 8e7\ncpu = 0.25\n\
             [[compute.node]]\nid = 3\ncpu = {fast}\n[[compute.node]]\nid = 12\ncpu = {fast}\n"
        )
    };
    let run = |text: &str| {
        let s = parse_scenario(text, Path::new("s.toml")).unwrap();
        run_scenario(&s, 1, None).unwrap()
    };
    let old = run(&base);
    let new = run(&shares(1.0));
    assert_eq!(old.nodes, new.nodes);
    let slow = run(&shares(0.25));
    assert!(
        slow.end_s > new.end_s,
        "two nodes four times slower must finish the scatter later"
    );
}
