//! End-to-end tests of `windrose dlt` and `windrose reproduce dlt`: the paper's Example 1 from
//! the shipped files (both send orders, human and JSON output), the multi-level example (every
//! node finishes at the same instant), a tree straight from `tree build --json`, and one-line
//! errors with exit code 2 for bad input.

#[path = "support/procs.rs"]
mod procs;

use procs::{bad, ok, ok_json, windrose};
use serde_json::Value;
use std::path::PathBuf;

fn data(rel: &str) -> String {
    procs::data(rel).display().to_string()
}

fn ex1_tree() -> String {
    data("dlt/example1-tree.csv")
}

fn ex1_speeds() -> String {
    data("dlt/example1.toml")
}

fn ml_tree() -> String {
    data("dlt/multilevel-tree.json")
}

fn ml_speeds() -> String {
    data("dlt/multilevel.toml")
}

/// Files in one temporary directory (kept alive by the guard).
struct Temp(tempfile::TempDir);

impl Temp {
    fn new() -> Temp {
        Temp(tempfile::tempdir().unwrap())
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path: PathBuf = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

fn nodes(s: &Value) -> &Vec<Value> {
    s["nodes"].as_array().unwrap()
}

fn node(s: &Value, id: u64) -> &Value {
    nodes(s)
        .iter()
        .find(|n| n["node"].as_u64() == Some(id))
        .unwrap()
}

fn send_order(n: &Value) -> Vec<u64> {
    n["send_order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["child"].as_u64().unwrap())
        .collect()
}

/// Shares add up (kept over all nodes = 1; at every node kept + sent = received) and every node
/// finishes at the predicted instant, to `tol` relative.
fn assert_consistent(s: &Value, tol: f64) {
    let kept: f64 = nodes(s).iter().map(|n| f(&n["fraction_kept"])).sum();
    assert!((kept - 1.0).abs() < 1e-12, "kept sums to {kept}");
    for n in nodes(s) {
        let sent: f64 = n["send_order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| f(&x["fraction"]))
            .sum();
        let received = f(&n["fraction_received"]);
        assert!(
            (f(&n["fraction_kept"]) + sent - received).abs() < 1e-12,
            "{n}"
        );
    }
    let t = f(&s["predicted_finish_s"]);
    for n in nodes(s) {
        let ti = f(&n["predicted_finish_s"]);
        assert!(
            ((ti - t) / t).abs() < tol,
            "node {} finishes at {ti}, not {t}",
            n["node"]
        );
    }
}

fn dlt(tree: &str, speeds: &str, order: &str, json: bool) -> Vec<String> {
    let mut args: Vec<String> = ["dlt", "--tree", tree, "--speeds", speeds, "--order", order]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if json {
        args.push("--json".into());
    }
    args
}

fn run_ok(args: &[String]) -> String {
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn run_json(args: &[String]) -> Value {
    ok_json(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn example1_table_both_orders() {
    let out = run_ok(&dlt(&ex1_tree(), &ex1_speeds(), "optimal", false));
    assert!(out.contains("alpha_0 = 0.628429"), "{out}");
    assert!(
        out.contains("finish time of the whole load: 0.628429 s"),
        "{out}"
    );
    // The root sends fastest link first, each child's share of the total load beside it.
    assert!(
        out.contains("4: 0.314214, 3: 0.052369, 2: 0.004761, 1: 0.000227"),
        "{out}"
    );
    assert!(out.contains("add up to 1.000000"), "{out}");

    let out = run_ok(&dlt(&ex1_tree(), &ex1_speeds(), "given", false));
    assert!(out.contains("alpha_0 = 0.949640"), "{out}");
    assert!(out.contains("1: 0.045221, 2: 0.004111"), "{out}");
    assert!(out.contains("the order of the tree file's lines"), "{out}");

    // --order optimal is the default.
    let default = ok(&["dlt", "--tree", &ex1_tree(), "--speeds", &ex1_speeds()]);
    assert!(default.contains("alpha_0 = 0.628429"), "{default}");
}

#[test]
fn example1_json_is_exact() {
    let s = run_json(&dlt(&ex1_tree(), &ex1_speeds(), "optimal", true));
    assert_eq!(s["policy"], "optimal");
    assert_eq!(s["root"], 0);
    let root = node(&s, 0);
    assert!((f(&root["fraction_kept"]) - 252.0 / 401.0).abs() < 1e-12);
    assert!((f(&s["predicted_finish_s"]) - 252.0 / 401.0).abs() < 1e-12);
    assert_eq!(send_order(root), [4, 3, 2, 1]);
    assert_eq!(nodes(&s).len(), 5);
    assert_consistent(&s, 1e-12);

    let s = run_json(&dlt(&ex1_tree(), &ex1_speeds(), "given", true));
    assert_eq!(s["policy"], "given");
    let root = node(&s, 0);
    assert!((f(&root["fraction_kept"]) - 132.0 / 139.0).abs() < 1e-12);
    assert_eq!(send_order(root), [1, 2, 3, 4]);
    assert_consistent(&s, 1e-12);
}

#[test]
fn csv_speeds_and_json_tree_give_the_same_schedule() {
    let t = Temp::new();
    let speeds = t.file(
        "ex1.csv",
        "# Example 1\nnode,compute_s_per_unit,link_s_per_unit\n0,1,-\n1,1,20\n2,1,10\n3,1,5\n4,1,1\n",
    );
    let tree = t.file("ex1.json", r#"{"parents": [null, 0, 0, 0, 0]}"#);
    for order in ["optimal", "given"] {
        let reference = run_json(&dlt(&ex1_tree(), &ex1_speeds(), order, true));
        assert_eq!(run_json(&dlt(&ex1_tree(), &speeds, order, true)), reference);
        // JSON without `children`: given = ascending id = the file's line order here.
        assert_eq!(run_json(&dlt(&tree, &ex1_speeds(), order, true)), reference);
    }
}

#[test]
fn multilevel_every_node_finishes_together() {
    let best = run_json(&dlt(&ml_tree(), &ml_speeds(), "optimal", true));
    assert_eq!(nodes(&best).len(), 10);
    assert_consistent(&best, 1e-9);
    // Fastest link first at every parent.
    assert_eq!(send_order(node(&best, 0)), [2, 3, 1]);
    assert_eq!(send_order(node(&best, 2)), [7, 8, 6]);
    assert_eq!(send_order(node(&best, 1)), [5, 4]);

    // The file's `children` lists.
    let given = run_json(&dlt(&ml_tree(), &ml_speeds(), "given", true));
    assert_consistent(&given, 1e-9);
    assert_eq!(send_order(node(&given, 0)), [1, 2, 3]);
    assert_eq!(send_order(node(&given, 2)), [6, 7, 8]);
    assert!(f(&best["predicted_finish_s"]) < f(&given["predicted_finish_s"]));

    let out = run_ok(&dlt(&ml_tree(), &ml_speeds(), "given", false));
    assert!(out.contains("the tree file's `children` lists"), "{out}");
}

#[test]
fn tree_build_json_feeds_dlt() {
    let built = ok(&[
        "tree",
        "build",
        "--costs",
        &data("paper/table1.csv"),
        "--algo",
        "balanced-path",
        "--root",
        "0",
        "--json",
    ]);
    let b: Value = serde_json::from_str(&built).unwrap();
    let children = b["children"].as_array().unwrap();
    let parents = b["parents"].as_array().unwrap();
    assert_eq!(children.len(), 8);
    // `children` agrees with `parents`.
    for (p, kids) in children.iter().enumerate() {
        for c in kids.as_array().unwrap() {
            assert_eq!(parents[c.as_u64().unwrap() as usize], p as u64);
        }
    }
    let t = Temp::new();
    let tree = t.file("tree.json", &built);
    let mut toml = String::from("[compute_s_per_unit]\n");
    for n in 0..8 {
        toml.push_str(&format!("{n} = {}\n", 1.0 + n as f64 / 4.0));
    }
    toml.push_str("[link_s_per_unit]\n");
    for n in 1..8 {
        toml.push_str(&format!("{n} = {}\n", 0.1 * ((n * 5) % 8 + 1) as f64));
    }
    let speeds = t.file("speeds.toml", &toml);
    let given = run_json(&dlt(&tree, &speeds, "given", true));
    assert_consistent(&given, 1e-9);
    for (p, kids) in children.iter().enumerate() {
        let kids: Vec<u64> = kids
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(send_order(node(&given, p as u64)), kids, "node {p}");
    }
    let best = run_json(&dlt(&tree, &speeds, "optimal", true));
    assert_consistent(&best, 1e-9);
    assert!(f(&best["predicted_finish_s"]) <= f(&given["predicted_finish_s"]) * (1.0 + 1e-12));
}

#[test]
fn reproduce_dlt_matches_the_paper() {
    let t = Temp::new();
    let out_dir = t.0.path().join("out");
    let out = ok(&["reproduce", "dlt", "--out", out_dir.to_str().unwrap()]);
    for needle in [
        "0.9496",
        "0.6284",
        "132/139 = 0.949640",
        "252/401 = 0.628429",
        "24 of 24",
        "✓ best: ascending a",
        "✓ worst: the paper's left to right",
        "All 9 checks agree with the paper.",
    ] {
        assert!(out.contains(needle), "{needle}:\n{out}");
    }
    assert!(!out.contains('✗'), "{out}");
    let csv = std::fs::read_to_string(out_dir.join("dlt-example1-orders.csv")).unwrap();
    assert_eq!(csv.lines().count(), 25);
    let files: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
    assert_eq!(files.len(), 1, "no temporary files left");
    // Without --out nothing is written.
    let out = ok(&["reproduce", "dlt"]);
    assert!(!out.contains("wrote"), "{out}");
}

#[test]
fn help_documents_the_formats() {
    let help = ok(&["dlt", "--help"]);
    for needle in [
        "compute_s_per_unit",
        "link_s_per_unit",
        "node,parent",
        "tree build --json",
        "optimal",
        "given",
        "MB/s",
    ] {
        assert!(help.contains(needle), "{needle}:\n{help}");
    }
}

#[test]
fn bad_speeds_exit_2_naming_file_and_line() {
    let t = Temp::new();
    let good = std::fs::read_to_string(ex1_speeds()).unwrap();
    let line_of =
        |text: &str, needle: &str| text.lines().position(|l| l.starts_with(needle)).unwrap() + 1;
    let cases: Vec<(&str, String, String)> = vec![
        (
            "zero compute time",
            good.replace("2 = 1.0", "2 = 0"),
            format!(
                ":{}:5: compute_s_per_unit of node 2 must be a positive finite number of seconds, got 0",
                line_of(&good, "2 = 1.0")
            ),
        ),
        (
            "negative compute time",
            good.replace("3 = 1.0", "3 = -1.0"),
            "compute_s_per_unit of node 3 must be a positive finite number of seconds, got -1"
                .into(),
        ),
        (
            "NaN link time",
            format!("{}4 = nan\n", good.strip_suffix("4 = 1.0\n").unwrap()),
            format!(
                ":{}:5: link_s_per_unit of the link 0-4 must be a finite number of seconds >= 0, \
                 got NaN",
                good.lines().count()
            ),
        ),
        (
            "negative link time",
            good.replace("2 = 10.0", "2 = -10.0"),
            "link_s_per_unit of the link 0-2 must be a finite number of seconds >= 0, got -10"
                .into(),
        ),
        (
            "a node the tree does not have",
            format!("{good}7 = 1.0\n"),
            format!(
                ":{}:1: node 7 is not in the tree {} (nodes 0 to 4)",
                good.lines().count() + 1,
                ex1_tree()
            ),
        ),
        (
            "a node without a compute time",
            good.replacen("3 = 1.0\n", "", 1),
            "[compute_s_per_unit] has no entry for node 3".into(),
        ),
        (
            "a node without a link",
            good.replacen("3 = 5.0\n", "", 1),
            "[link_s_per_unit] has no entry for node 3 (the link 0-3)".into(),
        ),
        (
            "a link the tree does not have",
            good.replacen("3 = 5.0", "1-3 = 5.0", 1),
            "no link 1-3 in the tree".into(),
        ),
        (
            "speeds in MB/s instead of seconds",
            "[compute_mb_s]\n0 = 100\n".into(),
            ":1:2: unknown field `compute_mb_s`, expected `compute_s_per_unit` or `link_s_per_unit`"
                .into(),
        ),
        (
            "not TOML",
            "[compute_s_per_unit\n".into(),
            ":1:".into(),
        ),
    ];
    for (what, text, expected) in cases {
        let speeds = t.file("speeds.toml", &text);
        let e = bad(&["dlt", "--tree", &ex1_tree(), "--speeds", &speeds]);
        assert!(e.starts_with(&format!("error: {speeds}:")), "{what}: {e}");
        assert!(e.contains(&expected), "{what}: {e}\nexpected: {expected}");
    }
    // CSV speeds.
    let speeds = t.file(
        "speeds.csv",
        "node,compute_s_per_unit,link_s_per_unit\n0,1,-\n1,1,20\n2,1,10\n3,inf,5\n4,1,1\n",
    );
    let e = bad(&["dlt", "--tree", &ex1_tree(), "--speeds", &speeds]);
    assert!(
        e.contains("speeds.csv:5:3: compute_s_per_unit of node 3 must be a positive finite number of seconds, got inf"),
        "{e}"
    );
    let speeds = t.file("speeds.txt", "whatever");
    let e = bad(&["dlt", "--tree", &ex1_tree(), "--speeds", &speeds]);
    assert!(e.contains("must end in .toml or .csv"), "{e}");
    let e = bad(&[
        "dlt",
        "--tree",
        &ex1_tree(),
        "--speeds",
        "/nonexistent/speeds.toml",
    ]);
    assert!(e.contains("/nonexistent/speeds.toml"), "{e}");
}

#[test]
fn bad_trees_exit_2_naming_file_and_line() {
    let t = Temp::new();
    let cases = [
        (
            "t.csv",
            "0,-\n1,0\n2,3\n3,2\n4,0\n",
            ":3:1: node 2 is not connected to the root 0: its parents form a cycle (2 -> 3 -> 2)",
        ),
        (
            "t.csv",
            "0,-\n1,0\n2,0\n3,-\n4,0\n",
            ":4:3: a second root: node 3 has no parent",
        ),
        (
            "t.csv",
            "0,-\n1,0\n2,0\n3,0\n4,9\n",
            ":5:3: the parent 9 of node 4 is not a node of the tree",
        ),
        (
            "t.csv",
            "0,-\n1,0\n2,0\n3,0\n3,0\n",
            ":5:1: node 3 appears more than once",
        ),
        (
            "t.csv",
            "0,-\n1,0\n2,0\n3,0\n7,0\n",
            ":5:1: node 7 is out of range",
        ),
        (
            "t.csv",
            "0,-\n1,0\n2,0\n3,0\n4,zero\n",
            ":5:3: expected a parent id or `-` for the root, found 'zero'",
        ),
        (
            "t.json",
            r#"{"parents": [null, 0, 0, 0, 0], "children": [[1, 2, 3], [], [], [], []]}"#,
            ": node 4 is missing from children[0]",
        ),
        ("t.json", r#"{"parents": [null, 0, 0, 0, 0,]}"#, ":1:"),
        (
            "t.json",
            r#"{"positions": [0, 1, 2, 3, 4]}"#,
            "no \"parents\" array",
        ),
    ];
    for (name, text, expected) in cases {
        let tree = t.file(name, text);
        let e = bad(&["dlt", "--tree", &tree, "--speeds", &ex1_speeds()]);
        assert!(e.starts_with(&format!("error: {tree}")), "{e}");
        assert!(e.contains(expected), "{text}: {e}\nexpected: {expected}");
    }
    // A tree with fewer nodes than the speeds file: the ids do not match.
    let tree = t.file("small.csv", "0,-\n1,0\n2,0\n");
    let e = bad(&["dlt", "--tree", &tree, "--speeds", &ex1_speeds()]);
    assert!(
        e.contains("example1.toml:") && e.contains("node 3 is not in the tree"),
        "{e}"
    );
    // Usage errors (clap's own multi-line message) exit with code 2 too.
    windrose()
        .args([
            "dlt",
            "--tree",
            &ex1_tree(),
            "--speeds",
            &ex1_speeds(),
            "--order",
            "fastest",
        ])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("'fastest'"));
    windrose()
        .args(["dlt", "--tree", &ex1_tree()])
        .assert()
        .code(2);
}
