//! End-to-end tests of the `windrose` binary: the paper's worked examples through `tree build`
//! and `tree adapt`, JSON round trips, and one-line errors with exit code 2 for bad input.

#[path = "support/procs.rs"]
mod procs;

use predicates::prelude::*;
use procs::{bad, data, ok, ok_json, temp_file, windrose};
use serde_json::Value;

fn table1() -> String {
    data("paper/table1.csv").display().to_string()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn leaf_nodes(v: &Value) -> Vec<u64> {
    v["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["node"].as_u64().unwrap())
        .collect()
}

fn leaf_costs(v: &Value) -> Vec<f64> {
    v["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["cost"].as_f64().unwrap())
        .collect()
}

/// The Balanced-Path tree of Table 1 with root 0 (the paper's Figure 1), as a plain tree file.
const PAPER_TREE: &str =
    "# Figure 1 of Figueira & Mendes: node at each position\n0 5 7 4 3 2 6 1\n";

fn row_re(label: &str, cells: &str) -> predicates::str::RegexPredicate {
    let cells: Vec<&str> = cells.split_whitespace().collect();
    predicate::str::is_match(format!(r"(?m)^{label}\s+{}\s*$", cells.join(r"\s+"))).unwrap()
}

fn assert_paper_tree_text(stdout: &str) {
    for (label, cells) in [
        ("Position", "0 1 2 3 4 5 6 7"),
        ("Node", "0 5 7 4 3 2 6 1"),
        ("Position", "1 3 5 7"),
        ("Leaf", "5 4 2 1"),
        ("Cost", "3 3 2 2"),
    ] {
        assert!(
            row_re(label, cells).eval(stdout),
            "{label} {cells}:\n{stdout}"
        );
    }
    assert!(stdout.contains("tree cost: 3 hops"), "{stdout}");
}

#[test]
fn build_default_needs_no_files() {
    let out = ok(&["tree", "build", "--algo", "balanced-path", "--root", "0"]);
    assert!(out.contains("built-in default"), "{out}");
    assert_paper_tree_text(&out);
    assert!(out.contains("broadcast time: 3 hops"), "{out}");
}

#[test]
fn build_from_table1_file() {
    let t1 = table1();
    let out = ok(&[
        "tree",
        "build",
        "--costs",
        &t1,
        "--algo",
        "balanced-path",
        "--root",
        "0",
    ]);
    assert!(!out.contains("built-in default"), "{out}");
    assert!(out.contains("table1.csv"), "{out}");
    assert_paper_tree_text(&out);
}

#[test]
fn build_json_has_everything() {
    let v = ok_json(&[
        "tree",
        "build",
        "--costs",
        &table1(),
        "--algo",
        "balanced-path",
        "--root",
        "0",
        "--json",
        "--send-gap",
        "1",
    ]);
    assert_eq!(v["algorithm"], "balanced-path");
    assert_eq!(v["root"], 0);
    assert_eq!(v["node_count"], 8);
    assert_eq!(v["unit"], "hops");
    assert_eq!(ids(&v["positions"]), [0, 5, 7, 4, 3, 2, 6, 1]);
    assert_eq!(leaf_nodes(&v), [5, 4, 2, 1]);
    assert_eq!(leaf_costs(&v), [3.0, 3.0, 2.0, 2.0]);
    assert_eq!(v["cost"], 3.0);
    assert_eq!(v["send_gap"], 1.0);
    // Parent of each node: 0 is the root; position 1 (node 5) hangs off position 0 (node 0), ...
    let parents: Vec<Option<u64>> = v["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_u64)
        .collect();
    assert_eq!(
        parents,
        [
            None,
            Some(6),
            Some(3),
            Some(0),
            Some(7),
            Some(0),
            Some(3),
            Some(0)
        ]
    );
    // With a send gap the broadcast takes longer than the tree cost.
    assert!(v["broadcast_time"].as_f64().unwrap() > 3.0);
}

#[test]
fn build_every_algorithm() {
    let costs = data("examples/four-clusters.toml").display().to_string();
    for algo in [
        "balanced-path",
        "binomial",
        "magpie",
        "mst",
        "max-bottleneck",
        "flat",
        "chain",
    ] {
        let v = ok_json(&[
            "tree", "build", "--costs", &costs, "--algo", algo, "--root", "3", "--json",
        ]);
        assert_eq!(v["algorithm"], algo);
        assert_eq!(v["node_count"], 16);
        assert_eq!(v["unit"], "latency_ms");
        let parents = v["parents"].as_array().unwrap();
        assert_eq!(parents.iter().filter(|p| p.is_null()).count(), 1, "{algo}");
        assert!(parents[3].is_null(), "{algo}: the root has no parent");
        let binomial_shaped = matches!(algo, "balanced-path" | "binomial");
        assert_eq!(v.get("positions").is_some(), binomial_shaped, "{algo}");
        if binomial_shaped {
            assert_eq!(v["positions"][0], 3, "{algo}: position 0 is the root");
        }
        let max_leaf = leaf_costs(&v).into_iter().fold(0.0, f64::max);
        assert_eq!(v["cost"].as_f64().unwrap(), max_leaf, "{algo}");
        // The human form works too.
        ok(&[
            "tree", "build", "--costs", &costs, "--algo", algo, "--root", "3",
        ]);
    }
    // On latencies the best worst link on every root path is the MST's.
    let parents = |algo: &str| {
        ok_json(&[
            "tree", "build", "--costs", &costs, "--algo", algo, "--root", "3", "--json",
        ])["parents"]
            .clone()
    };
    assert_eq!(parents("max-bottleneck"), parents("mst"));
    // An unknown algorithm lists every name.
    let out = windrose()
        .args(["tree", "build", "--algo", "kruskal", "--root", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in windrose_trees::TreeAlgorithm::NAMES {
        assert!(err.contains(name), "{name}: {err}");
    }
    // A separate cluster map for a dense matrix.
    let clusters = data("examples/clusters.csv").display().to_string();
    let (_d, dense) = temp_file("dense16.csv", &dense_csv(16));
    ok(&[
        "tree",
        "build",
        "--costs",
        &dense,
        "--clusters",
        &clusters,
        "--algo",
        "magpie",
        "--root",
        "0",
    ]);
}

/// A valid symmetric n×n matrix: cost |i - j|.
fn dense_csv(n: usize) -> String {
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| i.abs_diff(j).to_string())
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        })
        .collect()
}

#[test]
fn build_json_round_trips_into_adapt() {
    let json = ok(&[
        "tree",
        "build",
        "--algo",
        "balanced-path",
        "--root",
        "0",
        "--json",
    ]);
    let (_d, tree) = temp_file("tree.json", &json);
    // The adapted tree's JSON is itself a tree file.
    let v = ok_json(&[
        "tree",
        "adapt",
        "--costs",
        &table1(),
        "--tree",
        &tree,
        "--leave",
        "7",
        "--json",
    ]);
    let (_d2, tree2) = temp_file("tree2.json", &serde_json::to_string(&v).unwrap());
    let v2 = ok_json(&[
        "tree",
        "adapt",
        "--tree",
        &tree2,
        "--raise",
        "0,5,1",
        "--strategy",
        "family",
        "--json",
    ]);
    assert_eq!(v2["positions"], v["positions"]);
}

/// Section 4.1: node 8 of Table 5 joins at position 8 (cost 4, Table 4); Position_Swapping
/// tries position 7 (node 1), then position 6 (node 6), and reaches 3 (Table 6).
#[test]
fn join_node_8_position_swapping() {
    let json = ok(&[
        "tree",
        "build",
        "--costs",
        &table1(),
        "--algo",
        "balanced-path",
        "--root",
        "0",
        "--json",
    ]);
    let (_d, json_tree) = temp_file("tree.json", &json);
    let (_d2, text_tree) = temp_file("tree.txt", PAPER_TREE);
    for tree in [&json_tree, &text_tree] {
        let v = ok_json(&[
            "tree",
            "adapt",
            "--costs",
            &table1(),
            "--tree",
            tree,
            "--join",
            "4,2,5,0,0,4,4,3",
            "--strategy",
            "position",
            "--json",
        ]);
        assert_eq!(v["change"]["kind"], "join");
        assert_eq!(v["change"]["node"], 8);
        assert_eq!(v["cost_before"], 3.0);
        assert_eq!(v["cost_after_change"], 4.0);
        assert_eq!(v["final_cost"], 3.0);
        assert_eq!(v["reached_target"], true);
        assert_eq!(v["made"]["moved"], 8);
        assert_eq!(v["made"]["with"], 6);
        let tried: Vec<(u64, u64)> = v["tried"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["moved"].as_u64().unwrap(), t["with"].as_u64().unwrap()))
            .collect();
        assert_eq!(tried, [(8, 1), (8, 6)]);
        assert_eq!(v["steps"], 2);
        assert_eq!(ids(&v["positions"]), [0, 5, 7, 4, 3, 2, 8, 1, 6]);
        assert_eq!(leaf_nodes(&v), [5, 4, 2, 1, 6]);
        assert_eq!(leaf_costs(&v), [3.0, 3.0, 2.0, 2.0, 0.0]);
    }
    let out = ok(&[
        "tree",
        "adapt",
        "--costs",
        &table1(),
        "--tree",
        &text_tree,
        "--join",
        "4,2,5,0,0,4,4,3",
        "--strategy",
        "position",
    ]);
    assert!(out.contains("<- made"), "{out}");
    assert!(row_re("Leaf", "5 4 2 1 6").eval(&out), "{out}");
    assert!(row_re("Cost", "3 3 2 2 0").eval(&out), "{out}");
}

/// Section 4.2: node 7 fails and node 1 (last position) replaces it: cost 7 (Table 7).
/// Position_Swapping tries node 4 then node 5 and reaches 3 (Table 8); Path_Swapping only finds
/// 1<->4 (cost 8) and stays at 7.
#[test]
fn leave_node_7() {
    let (_d, tree) = temp_file("tree.txt", PAPER_TREE);
    let t1 = table1();
    let base = [
        "tree", "adapt", "--costs", &t1, "--tree", &tree, "--leave", "7", "--json",
    ];

    let v = ok_json(&base);
    assert_eq!(v["cost_after_change"], 7.0);
    assert_eq!(v["final_cost"], 7.0);
    assert_eq!(leaf_nodes(&v), [5, 4, 2, 6]);
    assert_eq!(leaf_costs(&v), [3.0, 7.0, 2.0, 0.0]);

    let v = ok_json(&[&base[..], &["--strategy", "position"]].concat());
    assert_eq!(v["cost_before"], 3.0);
    assert_eq!(v["cost_after_change"], 7.0);
    assert_eq!(v["final_cost"], 3.0);
    assert_eq!(v["made"]["moved"], 1);
    assert_eq!(v["made"]["with"], 5);
    assert_eq!(leaf_nodes(&v), [1, 4, 2, 6]);
    assert_eq!(leaf_costs(&v), [2.0, 3.0, 2.0, 0.0]);

    let v = ok_json(&[&base[..], &["--strategy", "path"]].concat());
    assert_eq!(v["final_cost"], 7.0);
    assert_eq!(v["reached_target"], false);
    let tried = v["tried"].as_array().unwrap();
    assert!(tried
        .iter()
        .any(|t| t["moved"] == 1 && t["with"] == 4 && t["cost"] == 8.0));
}

#[test]
fn raise_tree_and_non_tree_links() {
    let (_d, tree) = temp_file("tree.txt", PAPER_TREE);
    // 0-5 is a tree link (position 1 under the root): 3 -> 9 hops.
    let v = ok_json(&[
        "tree",
        "adapt",
        "--tree",
        &tree,
        "--raise",
        "0,5,3",
        "--strategy",
        "position",
        "--json",
    ]);
    assert_eq!(v["change"]["tree_link"], true);
    assert_eq!(v["change"]["old_cost"], 3.0);
    assert_eq!(v["change"]["new_cost"], 9.0);
    assert_eq!(v["cost_before"], 3.0);
    assert_eq!(v["cost_after_change"], 9.0);
    assert!(v["final_cost"].as_f64().unwrap() <= 9.0);
    assert_eq!(
        v["steps"].as_u64().unwrap() as usize,
        v["tried"].as_array().unwrap().len()
    );

    // A link to a node outside the tree changes nothing either.
    let (_d2, small) = temp_file("small.txt", "0 5 7 4\n");
    let v = ok_json(&[
        "tree",
        "adapt",
        "--tree",
        &small,
        "--raise",
        "0,1,2",
        "--strategy",
        "path",
        "--json",
    ]);
    assert_eq!(v["change"]["tree_link"], false);
    assert_eq!(v["final_cost"], v["cost_before"]);

    // 2-5 is not a tree link: nothing changes, and the output says so.
    let out = ok(&[
        "tree",
        "adapt",
        "--tree",
        &tree,
        "--raise",
        "2,5,2",
        "--strategy",
        "leaf",
    ]);
    assert!(out.contains("not a tree link"), "{out}");
    assert!(row_re("Node", "0 5 7 4 3 2 6 1").eval(&out), "{out}");
    assert!(row_re("Cost", "3 3 2 2").eval(&out), "{out}");
}

#[test]
fn bad_cost_files_name_file_and_line() {
    let cases = [
        ("nonsquare.csv", "0,1,2\n1,0\n2,1,0\n", ":2"),
        ("negative.csv", "0,1\n-1,0\n", ":2"),
        ("nan.csv", "0,NaN\nNaN,0\n", ":1"),
        ("empty.csv", "", ""),
        ("text.csv", "0,1\n1,abc\n", ":2:3"),
    ];
    for (name, text, place) in cases {
        let (_d, path) = temp_file(name, text);
        let line = bad(&[
            "tree",
            "build",
            "--costs",
            &path,
            "--algo",
            "balanced-path",
            "--root",
            "0",
        ]);
        assert!(line.contains(&format!("{path}{place}")), "{name}: {line}");
    }
    let missing = bad(&[
        "tree",
        "build",
        "--costs",
        "/nonexistent/costs.csv",
        "--algo",
        "mst",
        "--root",
        "0",
    ]);
    assert!(missing.contains("/nonexistent/costs.csv"), "{missing}");
}

#[test]
fn bad_arguments_exit_2_on_one_line() {
    let (_d, tree) = temp_file("tree.txt", PAPER_TREE);
    // Unknown root.
    let line = bad(&["tree", "build", "--algo", "balanced-path", "--root", "8"]);
    assert!(
        line.contains("--root 8") && line.contains("unknown node 8"),
        "{line}"
    );
    // Bad --send-gap value.
    bad(&[
        "tree",
        "build",
        "--algo",
        "flat",
        "--root",
        "0",
        "--send-gap",
        "-1",
    ]);
    // Bad --raise syntax and values.
    for spec in [
        "1,4", "1,x,2", "1,4,zero", "1,4,0", "1,4,-2", "1,4,inf", "1,1,2", "0,99,2",
    ] {
        let line = bad(&[
            "tree",
            "adapt",
            "--tree",
            &tree,
            "--raise",
            spec,
            "--strategy",
            "path",
        ]);
        assert!(line.contains("--raise"), "{spec}: {line}");
    }
    // Unknown node leaving, and a node that is in the model but not in the tree.
    let line = bad(&["tree", "adapt", "--tree", &tree, "--leave", "99"]);
    assert!(line.contains("99"), "{line}");
    let (_d2, small) = temp_file("small.txt", "0 5 7 4\n");
    let line = bad(&["tree", "adapt", "--tree", &small, "--leave", "1"]);
    assert!(line.contains("not in the tree"), "{line}");
    // Join rows: wrong length, negative, not a number.
    for row in ["4,2,5", "4,2,5,0,0,4,4,-3", "4,2,5,0,0,4,4,x"] {
        let line = bad(&[
            "tree",
            "adapt",
            "--tree",
            &tree,
            "--join",
            row,
            "--strategy",
            "position",
        ]);
        assert!(line.contains("--join"), "{row}: {line}");
    }
    // Joins need a dense matrix.
    let clusters = data("examples/four-clusters.toml").display().to_string();
    let (_d3, tree16) = temp_file(
        "t16.txt",
        &(0..16).map(|i| format!("{i} ")).collect::<String>(),
    );
    let row = vec!["1"; 16].join(",");
    let line = bad(&[
        "tree", "adapt", "--costs", &clusters, "--tree", &tree16, "--join", &row,
    ]);
    assert!(line.contains("dense"), "{line}");
}

#[test]
fn bad_tree_files_name_file_and_line() {
    let cases = [
        ("unknown.txt", "0 5 7\n4 9 2\n", ":2:3:"),
        ("dup.txt", "0 5 7 5\n", ":1:7:"),
        ("word.txt", "0 5\n# ok\nseven\n", ":3:1:"),
        ("empty.txt", "# nothing here\n", ""),
        ("broken.json", "{\"positions\": [0, 5,\n", ":"),
        ("nopos.json", "{\"algorithm\": \"mst\"}\n", ""),
    ];
    for (name, text, place) in cases {
        let (_d, path) = temp_file(name, text);
        let line = bad(&["tree", "adapt", "--tree", &path, "--leave", "5"]);
        assert!(line.contains(&format!("{path}{place}")), "{name}: {line}");
    }
}

#[test]
fn usage_errors_exit_2() {
    windrose()
        .args(["tree", "build", "--algo", "nope", "--root", "0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("panicked").not());
    // --raise needs a strategy; exactly one change.
    windrose()
        .args(["tree", "adapt", "--tree", "x", "--raise", "0,1,2"])
        .assert()
        .code(2);
    windrose()
        .args([
            "tree", "adapt", "--tree", "x", "--leave", "1", "--join", "1",
        ])
        .assert()
        .code(2);
    windrose()
        .args(["tree", "adapt", "--tree", "x", "--strategy", "path"])
        .assert()
        .code(2);
}

#[test]
fn reproduce_is_wired() {
    windrose()
        .args(["reproduce", "adaptive-trees", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--quick"));
}

/// Issue 21, defect 10: error texts give id ranges in words ("ids 0 to 7", not the half-open
/// "0..8"), numbers compactly ("-1e300", not 301 digits), and no Debug forms.
#[test]
fn error_texts_give_ranges_in_words_and_numbers_compactly() {
    windrose()
        .args(["tree", "build", "--algo", "balanced-path", "--root", "99"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "unknown node 99: the model has 8 nodes (ids 0 to 7)",
        ));
    let scenario = std::fs::read_to_string(data("scenarios/testbed/two-by-two.toml"))
        .unwrap()
        .replace(
            "latency_s = [[0, 0.01], [0.01, 0]]",
            "latency_s = [[0, -1e300], [0.01, 0]]",
        );
    let (_dir, path) = temp_file("neg.toml", &scenario);
    windrose()
        .args(["sim", "run", &path])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "must be a finite, non-negative number of seconds, found -1e300",
        ))
        .stderr(predicate::str::contains("0000").not());
}
