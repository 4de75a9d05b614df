//! Loading cost models and cluster maps from files: golden paper tables, every error with its
//! position, atomic writing and round trips, and robustness against arbitrary input.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use windrose_model::fixtures::{table1, table5};
use windrose_model::{
    load_clusters, load_costs, parse_clusters_csv, parse_clusters_toml, parse_cost_row,
    parse_costs_csv, parse_costs_toml, write_costs_csv, ClusterCosts, ClusterId, CostModel,
    CostUnit, DenseCostMatrix, LinkCosts, LinkCostsMut, ModelError, NodeId,
};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(rel)
}

fn rows_of(m: &impl LinkCosts) -> Vec<Vec<f64>> {
    let n = m.node_count();
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| m.cost(NodeId::from(i), NodeId::from(j)))
                .collect()
        })
        .collect()
}

/// The (line, column, message) of a file error; panics on any other result.
fn pos<T: std::fmt::Debug>(r: Result<T, ModelError>) -> (usize, usize, String) {
    match r {
        Err(ModelError::File {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected a file error, got {other:?}"),
    }
}

/// Asserts a CSV cost file fails with exactly this `path:line:col: message` text.
fn csv_err(text: &str, expected: &str) {
    let e = parse_costs_csv(text, Path::new("data/x.csv")).unwrap_err();
    assert_eq!(e.to_string(), expected, "input:\n{text}");
}

fn toml_err(text: &str, expected: &str) {
    let e = parse_costs_toml(text, Path::new("x.toml")).unwrap_err();
    assert_eq!(e.to_string(), expected, "input:\n{text}");
}

fn dense(m: CostModel) -> DenseCostMatrix<f64> {
    match m {
        CostModel::Dense(d) => d,
        CostModel::Cluster(c) => panic!("expected a dense model, got {c:?}"),
    }
}

fn cluster(m: CostModel) -> ClusterCosts {
    match m {
        CostModel::Cluster(c) => c,
        CostModel::Dense(d) => panic!("expected a cluster model, got {d:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Golden: the paper's tables

#[test]
fn table1_file_is_the_papers_table_1() {
    let path = data("paper/table1.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let first_data = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.trim().starts_with('#'))
        .unwrap();
    assert_eq!(
        first_data, ",0,1,2,3,4,5,6,7",
        "header + label layout, as in the paper"
    );
    let m = dense(load_costs(&path).unwrap());
    assert_eq!(m.unit(), CostUnit::Hops);
    assert_eq!(m.to_rows(), table1().to_rows());
}

#[test]
fn table5_file_is_the_papers_table_5() {
    let m = dense(load_costs(&data("paper/table5.csv")).unwrap());
    assert_eq!(m.unit(), CostUnit::Hops);
    assert_eq!(m.to_rows(), table5().to_rows());
}

// ---------------------------------------------------------------------------------------------
// CSV: accepted input

#[test]
fn csv_plain_with_unit_comments_blanks_and_spaces() {
    let text = "# measured\n\n# unit: latency_ms\n  0 , 2.5,10\n2.5,0, 7\r\n\n10 ,7 ,0\n# end\n";
    let m = parse_costs_csv(text, Path::new("m.csv")).unwrap();
    assert_eq!(m.unit(), CostUnit::LatencyMs);
    assert_eq!(
        m.to_rows(),
        vec![
            vec![0.0, 2.5, 10.0],
            vec![2.5, 0.0, 7.0],
            vec![10.0, 7.0, 0.0]
        ]
    );
}

#[test]
fn csv_header_with_named_corner_and_bandwidth_unit() {
    let text = "#unit:bandwidth_mb_s\nnode, 0, 1\n0, 0, 100\n1, 100, 0\n";
    let m = parse_costs_csv(text, Path::new("m.csv")).unwrap();
    assert_eq!(m.unit(), CostUnit::BandwidthMbS);
    assert_eq!(m.cost(NodeId(0), NodeId(1)), 100.0);
}

#[test]
fn csv_other_comments_are_not_units() {
    let m = parse_costs_csv("# units below are hops\n0\n", Path::new("m.csv")).unwrap();
    assert_eq!(m.unit(), CostUnit::Hops);
    assert_eq!(m.node_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// CSV: errors, each with its line and column

#[test]
fn csv_not_a_number() {
    csv_err(
        "0,1,2\n1,0,3\n2,3,abc\n",
        "data/x.csv:3:5: \"abc\" is not a number",
    );
    csv_err(
        "0,1,2\n1,0,3\n2, 3 ,  abc \n",
        "data/x.csv:3:9: \"abc\" is not a number",
    );
}

#[test]
fn csv_short_and_long_rows() {
    csv_err(
        "0,1,1\n1,0,1\n1,1,0\n1,1\n",
        "data/x.csv:4:1: row 3 is one row too many: row 0 has 3 values, so the matrix has 3 rows (the matrix must be square)",
    );
    csv_err(
        "0,1,1,1\n1,0,1,1\n1,1,0,1\n1,1\n",
        "data/x.csv:4:1: row 3 has 2 values, expected 4 (the matrix must be square)",
    );
    csv_err(
        "0,1,1\n1,0,1,7,8\n1,1,0\n",
        "data/x.csv:2:7: row 1 has 5 values, expected 3 (the matrix must be square)",
    );
    csv_err(
        ",0,1\n0,0,1\n1,1,0,5\n",
        "data/x.csv:3:7: row 1 has 3 values, expected 2 (the matrix must be square)",
    );
}

#[test]
fn csv_missing_rows() {
    csv_err(
        "0,1,1\n\n1,0,1\n# no row 2\n",
        "data/x.csv:3:1: the matrix ends after 2 rows but has 3 columns (the matrix must be square)",
    );
}

#[test]
fn csv_negative_and_not_finite() {
    csv_err(
        "0,1,2,2\n1,0,5,-2\n",
        "data/x.csv:2:7: cost between nodes 1 and 3 is negative (-2)",
    );
    csv_err(
        "0,inf\ninf,0\n",
        "data/x.csv:1:3: cost between nodes 0 and 1 is not a finite number (inf)",
    );
    csv_err(
        "0,NaN\nNaN,0\n",
        "data/x.csv:1:3: cost between nodes 0 and 1 is not a finite number (NaN)",
    );
}

#[test]
fn csv_diagonal_must_be_zero() {
    csv_err(
        "0,1\n1,0.5\n",
        "data/x.csv:2:3: cost of node 1 to itself must be 0, found 0.5",
    );
}

#[test]
fn csv_asymmetric_names_the_second_of_the_pair() {
    // Line 5 is row 4; its field 1 (column 3) is 5 while row 1 has 3 in column 4.
    let text = "0,1,1,1,1\n1,0,1,1,3\n1,1,0,1,1\n1,1,1,0,1\n1,5,1,1,0\n";
    csv_err(
        text,
        "data/x.csv:5:3: matrix is not symmetric: cost 4->1 is 5 but 1->4 is 3",
    );
}

#[test]
fn csv_empty_fields() {
    csv_err(
        "0,1\n1,,\n",
        "data/x.csv:2:4: row 1 has 3 values, expected 2 (the matrix must be square)",
    );
    csv_err(
        "0,1\n1, \n",
        "data/x.csv:2:4: empty value where a cost was expected",
    );
    csv_err(
        "0,1,\n1,0,\n",
        "data/x.csv:1:5: empty value where a cost was expected",
    );
}

#[test]
fn csv_labels_must_be_node_ids_in_order() {
    csv_err(
        ",0,1\n0,0,1\n2,1,0\n",
        "data/x.csv:3:1: row label \"2\" should be 1: with a header, every row starts with its node id, in order 0, 1, 2, ...",
    );
    csv_err(
        "node,0,x\n0,0,1\n1,1,0\n",
        "data/x.csv:1:8: header label \"x\" should be 1: columns are labelled with their node ids 0, 1, 2, ... (this line is read as a header because its first field \"node\" is not a number)",
    );
    csv_err(
        "node\n0\n",
        "data/x.csv:1:1: this line is read as a header because its first field \"node\" is not a number, but it has no column labels",
    );
    csv_err(
        "# c\n,0,1\n",
        "data/x.csv:2:1: the header is not followed by any cost rows",
    );
}

#[test]
fn csv_units() {
    csv_err(
        "# unit: furlongs\n0\n",
        "data/x.csv:1:9: unknown unit \"furlongs\": expected hops, latency_ms or bandwidth_mb_s",
    );
    csv_err(
        "# unit: hops\n0,1\n  # unit: latency_ms\n1,0\n",
        "data/x.csv:3:11: the unit is given twice (first on line 1)",
    );
}

#[test]
fn csv_empty_files() {
    for text in ["", "\n\n", "# just a comment\n\n  # another\n"] {
        csv_err(text, "data/x.csv: empty file: no cost rows");
        assert_eq!(
            pos(parse_costs_csv(text, Path::new("a.csv"))),
            (0, 0, "empty file: no cost rows".to_string())
        );
    }
}

// ---------------------------------------------------------------------------------------------
// load_costs: files

#[test]
fn load_costs_checks_the_extension() {
    let (line, col, msg) = pos(load_costs(Path::new("costs.txt")));
    assert_eq!((line, col), (0, 0));
    assert!(
        msg.contains(".csv") && msg.contains(".toml") && msg.contains(".txt"),
        "{msg}"
    );
    let (_, _, msg) = pos(load_costs(Path::new("costs")));
    assert!(
        msg.contains("no extension") && msg.contains(".csv"),
        "{msg}"
    );
}

#[test]
fn load_costs_reports_unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.csv");
    let e = load_costs(&missing).unwrap_err();
    let (line, col, msg) = pos(Err::<(), _>(e.clone()));
    assert_eq!((line, col), (0, 0));
    assert!(msg.starts_with("cannot read: "), "{msg}");
    let io_text = std::fs::read(&missing).unwrap_err().to_string();
    assert!(msg.contains(&io_text), "{msg} should contain {io_text}");
    assert!(e.to_string().starts_with(&missing.display().to_string()));

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, b"0,1\n1,\xff\n").unwrap();
    let (line, col, msg) = pos(load_costs(&bad));
    assert_eq!((line, col), (2, 3));
    assert!(msg.contains("UTF-8"), "{msg}");
}

#[test]
fn load_costs_empty_files() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["e.csv", "e.toml"] {
        let p = dir.path().join(name);
        std::fs::write(&p, "# nothing yet\n\n").unwrap();
        let (line, _, msg) = pos(load_costs(&p));
        assert_eq!((line, msg.as_str()), (0, "empty file: no cost rows"));
    }
}

#[test]
fn load_costs_by_extension_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("M.TOML");
    std::fs::write(&p, "matrix = [[0, 3], [3, 0]]\n").unwrap();
    assert_eq!(load_costs(&p).unwrap().cost(NodeId(0), NodeId(1)), 3.0);
}

// ---------------------------------------------------------------------------------------------
// TOML: dense

#[test]
fn toml_dense_matrix() {
    let m = dense(
        parse_costs_toml(
            "unit = \"latency_ms\"\nmatrix = [[0, 2.5], [2.5, 0]]\n",
            Path::new("m.toml"),
        )
        .unwrap(),
    );
    assert_eq!(m.unit(), CostUnit::LatencyMs);
    assert_eq!(m.to_rows(), vec![vec![0.0, 2.5], vec![2.5, 0.0]]);
    let m = parse_costs_toml("matrix = [[0]]", Path::new("m.toml")).unwrap();
    assert_eq!(m.unit(), CostUnit::Hops);
}

#[test]
fn toml_dense_with_link_override() {
    let text = "matrix = [[0, 1, 1], [1, 0, 1], [1, 1, 0]]\n[[link]]\na = 2\nb = 0\ncost = 9\n";
    let m = parse_costs_toml(text, Path::new("m.toml")).unwrap();
    assert_eq!(m.cost(NodeId(0), NodeId(2)), 9.0);
    assert_eq!(m.cost(NodeId(1), NodeId(2)), 1.0);
}

#[test]
fn toml_syntax_errors_use_the_parser_span() {
    let (line, col, msg) = pos(parse_costs_toml(
        "unit = \"hops\"\nmatrix = [[0, 1], [1 0]]\n",
        Path::new("x.toml"),
    ));
    assert_eq!((line, col), (2, 22), "{msg}");
    let (line, col, _) = pos(parse_costs_toml(
        "# c\nmatrix = [[0]]\nunit = \n",
        Path::new("x.toml"),
    ));
    assert_eq!((line, col), (3, 8));
}

#[test]
fn toml_type_and_key_errors_are_placed() {
    let (line, col, msg) = pos(parse_costs_toml(
        "matrix = [[0, 1],\n          [\"a\", 0]]\n",
        Path::new("x.toml"),
    ));
    assert_eq!((line, col), (2, 12), "{msg}");
    assert!(msg.contains("string"), "{msg}");
    let (line, col, msg) = pos(parse_costs_toml(
        "unit = \"hops\"\nmatrx = [[0]]\n",
        Path::new("x.toml"),
    ));
    assert_eq!((line, col), (2, 1), "{msg}");
    assert!(msg.contains("unknown field `matrx`"), "{msg}");
}

#[test]
fn toml_dense_semantic_errors() {
    // matrix[2][3] is negative: line 4 (row 2), column of the value.
    toml_err(
        "matrix = [\n  [0, 1, 1, 1],\n  [1, 0, 1, 1],\n  [1, 1, 0, -2],\n  [1, 1, -2, 0],\n]\n",
        "x.toml:4:13: cost between nodes 2 and 3 is negative (-2)",
    );
    toml_err(
        "matrix = [[0, 1], [3, 0]]\n",
        "x.toml:1:20: matrix is not symmetric: cost 1->0 is 3 but 0->1 is 1",
    );
    toml_err(
        "matrix = [[0, 1], [1, 4]]\n",
        "x.toml:1:23: cost of node 1 to itself must be 0, found 4",
    );
    toml_err(
        "matrix = [[0, 1, 1],\n          [1, 0],\n          [1, 1, 0]]\n",
        "x.toml:2:11: row 1 has 2 values, expected 3 (the matrix has 3 rows and must be square)",
    );
    toml_err(
        "matrix = [[0, nan], [nan, 0]]\n",
        "x.toml:1:15: cost between nodes 0 and 1 is not a finite number (NaN)",
    );
    toml_err("matrix = []\n", "x.toml:1:10: the matrix has no rows");
    // A ragged row after the one being checked (found by the fuzzer: once an index panic).
    toml_err(
        "matrix = [[0, 1], []]\n",
        "x.toml:1:19: row 1 has 0 values, expected 2 (the matrix has 2 rows and must be square)",
    );
    toml_err(
        "unit = \"parsecs\"\nmatrix = [[0]]\n",
        "x.toml:1:8: unknown unit \"parsecs\": expected hops, latency_ms or bandwidth_mb_s",
    );
}

#[test]
fn toml_needs_exactly_one_model() {
    toml_err(
        "unit = \"hops\"\n",
        "x.toml: no cost model found: expected `matrix = [[...]]` (dense) or a `[clusters]` table (cluster model)",
    );
    toml_err(
        "matrix = [[0]]\n[clusters]\nsizes = [1]\nintra = [0]\ninter = [[0]]\n",
        "x.toml:2:1: a file holds either a dense `matrix` or a `[clusters]` model, not both",
    );
    toml_err(
        "clusters = { sizes = [1], intra = [0], inter = [[0]] }\nmatrix = [[0]]\n",
        "x.toml:1:12: a file holds either a dense `matrix` or a `[clusters]` model, not both",
    );
    toml_err(
        "[[link]]\na = 0\nb = 1\ncost = 1\n",
        "x.toml: no cost model found: expected `matrix = [[...]]` (dense) or a `[clusters]` table (cluster model)",
    );
    toml_err("\n# only comments\n", "x.toml: empty file: no cost rows");
}

// ---------------------------------------------------------------------------------------------
// TOML: cluster model

#[test]
fn four_clusters_example_gives_the_costs_it_states() {
    let c = cluster(load_costs(&data("examples/four-clusters.toml")).unwrap());
    assert_eq!(c.unit(), CostUnit::LatencyMs);
    assert_eq!(c.node_count(), 16);
    assert_eq!(c.cluster_count(), 4);
    let of: Vec<u32> = c.clusters().iter().map(|c| c.0).collect();
    assert_eq!(of, [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
    let cost = |a: u32, b: u32| c.cost(NodeId(a), NodeId(b));
    // intra = [0.1, 0.2, 0.15, 0.5]
    assert_eq!(cost(0, 2), 0.1);
    assert_eq!(cost(3, 7), 0.2);
    assert_eq!(cost(8, 11), 0.15);
    assert_eq!(cost(12, 15), 0.5);
    // inter table
    assert_eq!(cost(0, 3), 8.0);
    assert_eq!(cost(2, 8), 45.0);
    assert_eq!(cost(15, 0), 120.0);
    assert_eq!(cost(5, 10), 50.0);
    assert_eq!(cost(7, 12), 125.0);
    assert_eq!(cost(11, 12), 90.0);
    // [[link]] overrides
    assert_eq!(cost(4, 9), 200.0);
    assert_eq!(cost(9, 4), 200.0);
    assert_eq!(cost(1, 0), 0.05);
    assert_eq!(c.override_count(), 2);
    assert_eq!(cost(6, 6), 0.0);
}

#[test]
fn toml_cluster_model_with_of_node() {
    let text = "[clusters]\nof_node = [1, 0, 1]\nintra = [3, 4]\ninter = [[99, 10], [10, -5]]\n";
    let c = cluster(parse_costs_toml(text, Path::new("c.toml")).unwrap());
    assert_eq!(c.unit(), CostUnit::Hops);
    assert_eq!(c.cluster_of(NodeId(0)), ClusterId(1));
    assert_eq!(c.cost(NodeId(0), NodeId(2)), 4.0);
    assert_eq!(
        c.cost(NodeId(0), NodeId(1)),
        10.0,
        "diagonal of inter ignored"
    );
}

#[test]
fn toml_cluster_model_errors() {
    let base = |clusters: &str| format!("unit = \"latency_ms\"\n[clusters]\n{clusters}");
    toml_err(
        &base("of_node = [0, 1,\n  2, 0]\nintra = [1, 1]\ninter = [[0, 5], [5, 0]]\n"),
        "x.toml:4:3: node 2 is in cluster 2, but `intra` gives costs for 2 clusters (ids 0 to 1)",
    );
    toml_err(
        &base("of_node = [0, -1]\nintra = [1, 1]\ninter = [[0, 5], [5, 0]]\n"),
        "x.toml:3:15: node 1 is in cluster -1, but cluster ids are 0, 1, 2, ...",
    );
    toml_err(
        &base("sizes = [2, 2]\nintra = [1, 1, 1]\ninter = [[0, 5], [5, 0]]\n"),
        "x.toml:5:9: `inter` has 2 rows, expected 3 (one per cluster, as `intra` has 3 values)",
    );
    toml_err(
        &base("sizes = [2, 2, 1]\nintra = [1, 1]\ninter = [[0, 5], [5, 0]]\n"),
        "x.toml:4:9: `intra` has 2 values but `sizes` describes 3 clusters: give one intra-cluster cost per cluster",
    );
    toml_err(
        &base("sizes = [2, 0]\nintra = [1, 1]\ninter = [[0, 5], [5, 0]]\n"),
        "x.toml:3:13: cluster 1 has size 0: every cluster needs at least one node",
    );
    toml_err(
        &base("sizes = [2, 2]\nintra = [1, -1]\ninter = [[0, 5], [5, 0]]\n"),
        "x.toml:4:13: intra-cluster cost of cluster 1 is negative (-1)",
    );
    toml_err(
        &base("sizes = [2, 2]\nintra = [1, 1]\ninter = [[0, 5],\n         [6, 0]]\n"),
        "x.toml:6:11: `inter` is not symmetric: cost 1->0 is 6 but 0->1 is 5",
    );
    toml_err(
        &base("sizes = [2, 2]\nintra = [1, 1]\ninter = [[0, 5], [5]]\n"),
        "x.toml:5:18: `inter` row 1 has 1 values, expected 2 (one per cluster)",
    );
    toml_err(
        &base("sizes = [1]\nof_node = [0]\nintra = [1]\ninter = [[0]]\n"),
        "x.toml:4:11: give either `sizes` or `of_node`, not both",
    );
    toml_err(
        &base("sizes = [1000000000000]\nintra = [1]\ninter = [[0]]\n"),
        "x.toml:3:9: `sizes` adds up to 1000000000000 nodes, more than the 67108864 a file may describe",
    );
    // Missing keys are reported at the [clusters] table.
    toml_err(
        &base("sizes = [1]\ninter = [[0]]\n"),
        "x.toml:2:1: the [clusters] table needs `intra = [...]`: the cost inside each cluster",
    );
    toml_err(
        &base("sizes = [1]\nintra = [0]\n"),
        "x.toml:2:1: the [clusters] table needs `inter = [[...], ...]`: the C×C costs between clusters",
    );
    toml_err(
        &base("intra = [1]\ninter = [[0]]\n"),
        "x.toml:2:1: no cluster map: expected `sizes = [...]` (nodes per cluster, numbered consecutively) or `of_node = [...]` (the cluster of each node)",
    );
}

#[test]
fn toml_link_errors() {
    let model = "[clusters]\nsizes = [2, 2]\nintra = [1, 1]\ninter = [[0, 5], [5, 0]]\n";
    let with = |links: &str| format!("{model}{links}");
    toml_err(
        &with("[[link]]\na = 1\nb = 4\ncost = 3\n"),
        "x.toml:7:5: node 4 does not exist: the model has 4 nodes (ids 0 to 3)",
    );
    toml_err(
        &with("[[link]]\na = 2\nb = 2\ncost = 3\n"),
        "x.toml:7:5: a link joins two different nodes, but `a` and `b` are both 2",
    );
    toml_err(
        &with("[[link]]\na = 0\nb = 3\ncost = -3.5\n"),
        "x.toml:8:8: cost of link 0-3 is negative (-3.5)",
    );
    toml_err(
        &with("[[link]]\na = 0\nb = 3\ncost = 1\n[[link]]\na = 3\nb = 0\ncost = 2\n"),
        "x.toml:10:5: link 3-0 is given twice (first on line 6)",
    );
    toml_err(
        &with("[[link]]\na = 0\ncost = 1\n"),
        "x.toml:5:1: missing field `b`",
    );
    toml_err(
        &with("[[link]]\na = 0\nb = 1\ncost = 1\nc = 3\n"),
        "x.toml:9:1: unknown field `c`, expected one of `a`, `b`, `cost`",
    );
}

// ---------------------------------------------------------------------------------------------
// Cluster maps

#[test]
fn cluster_map_examples_agree() {
    let want = cluster(load_costs(&data("examples/four-clusters.toml")).unwrap())
        .clusters()
        .to_vec();
    assert_eq!(
        load_clusters(&data("examples/clusters.csv"), 16).unwrap(),
        want
    );
    assert_eq!(
        load_clusters(&data("examples/four-clusters.toml"), 16).unwrap(),
        want
    );
    let (_, _, msg) = pos(load_clusters(&data("examples/four-clusters.toml"), 15));
    assert!(
        msg.contains("adds up to 16 nodes but the model has 15"),
        "{msg}"
    );
}

#[test]
fn cluster_csv_any_order_no_header() {
    let got = parse_clusters_csv("# map\n2,0\n0,1\n\n1,1\n", Path::new("c.csv"), 3).unwrap();
    assert_eq!(got, vec![ClusterId(1), ClusterId(1), ClusterId(0)]);
}

fn clusters_csv_err(text: &str, n: usize, expected: &str) {
    let e = parse_clusters_csv(text, Path::new("c.csv"), n).unwrap_err();
    assert_eq!(e.to_string(), expected, "input:\n{text}");
}

#[test]
fn cluster_csv_errors() {
    clusters_csv_err(
        "node,cluster\n0,0\n2,1\n",
        3,
        "c.csv:3:1: node 1 is missing: each of the 3 nodes (ids 0 to 2) must be listed exactly once",
    );
    clusters_csv_err(
        "node,cluster\n0,0\n1,0\n0,1\n",
        2,
        "c.csv:4:1: node 0 is listed twice (first on line 2)",
    );
    clusters_csv_err(
        "0,0\n1, 0\n5, 1\n",
        3,
        "c.csv:3:1: node 5 is out of range: the model has 3 nodes (ids 0 to 2)",
    );
    clusters_csv_err(
        "0,0\n1,2\n2,2\n",
        3,
        "c.csv:2:3: cluster 2 is used but cluster 1 is not: cluster ids must be dense (0, 1, 2, ... with every cluster used)",
    );
    clusters_csv_err(
        "0,0\n1,0,3\n",
        2,
        "c.csv:2:5: expected two fields, node,cluster, found 3",
    );
    clusters_csv_err(
        "0,0\n1,x\n",
        2,
        "c.csv:2:3: cluster \"x\" is not a cluster id (0, 1, 2, ...)",
    );
    clusters_csv_err(
        "0,0\n-1,0\n",
        2,
        "c.csv:2:1: node \"-1\" is not a node id (0, 1, 2, ...)",
    );
    clusters_csv_err("# none\n", 2, "c.csv: empty file: no nodes listed");
}

fn clusters_toml_err(text: &str, n: usize, expected: &str) {
    let e = parse_clusters_toml(text, Path::new("c.toml"), n).unwrap_err();
    assert_eq!(e.to_string(), expected, "input:\n{text}");
}

#[test]
fn cluster_toml_forms() {
    let p = Path::new("c.toml");
    let ids = |v: &[u32]| v.iter().map(|&c| ClusterId(c)).collect::<Vec<_>>();
    assert_eq!(
        parse_clusters_toml("of_node = [0, 1, 0]", p, 3).unwrap(),
        ids(&[0, 1, 0])
    );
    assert_eq!(
        parse_clusters_toml("sizes = [1, 2]", p, 3).unwrap(),
        ids(&[0, 1, 1])
    );
    assert_eq!(
        parse_clusters_toml("[clusters]\nof_node = [1, 0]", p, 2).unwrap(),
        ids(&[1, 0])
    );
}

#[test]
fn cluster_toml_errors() {
    clusters_toml_err(
        "of_node = [0, 1]\n",
        3,
        "c.toml:1:11: `of_node` lists 2 nodes but the model has 3",
    );
    clusters_toml_err(
        "sizes = [1, 1]\n",
        3,
        "c.toml:1:9: `sizes` adds up to 2 nodes but the model has 3",
    );
    clusters_toml_err(
        "of_node = [0, 2, 2]\n",
        3,
        "c.toml:1:15: cluster 2 is used but cluster 1 is not: cluster ids must be dense (0, 1, 2, ... with every cluster used)",
    );
    clusters_toml_err(
        "of_node = [0, 3, 2]\n",
        3,
        "c.toml:1:15: node 1 is in cluster 3, but there can be at most 3 clusters (one per node): cluster ids must be dense (0, 1, 2, ...)",
    );
    clusters_toml_err(
        "matrix = [[0]]\n",
        1,
        "c.toml:1:10: this file holds a dense `matrix`, not a cluster map (`sizes` or `of_node`)",
    );
    let (_, _, msg) = pos(parse_clusters_toml(
        "of_nodes = [0]\n",
        Path::new("c.toml"),
        1,
    ));
    assert!(msg.contains("unknown field `of_nodes`"), "{msg}");
}

#[test]
fn load_clusters_checks_the_extension() {
    let (_, _, msg) = pos(load_clusters(Path::new("map.json"), 3));
    assert!(msg.contains(".csv or .toml"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Writing

#[test]
fn write_then_load_round_trips_table5() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t5.csv");
    write_costs_csv(&table5(), &p).unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains("# unit: hops\n"), "{text}");
    assert!(text.contains("\nnode,0,1,2,3,4,5,6,7,8\n"), "{text}");
    assert!(text.contains("\n8,4,2,5,0,0,4,4,3,0\n"), "{text}");
    let m = dense(load_costs(&p).unwrap());
    assert_eq!(m.to_rows(), table5().to_rows());
    // Only the target remains: no temporary files.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("t5.csv")]);
}

#[test]
fn write_saves_a_cluster_model_as_dense() {
    let c = load_costs(&data("examples/four-clusters.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("four.csv");
    write_costs_csv(&c, &p).unwrap();
    let back = load_costs(&p).unwrap();
    assert_eq!(back.unit(), CostUnit::LatencyMs);
    assert_eq!(rows_of(&back), rows_of(&c));
}

#[test]
fn write_replaces_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.csv");
    std::fs::write(&p, "old content").unwrap();
    write_costs_csv(&table1(), &p).unwrap();
    assert_eq!(dense(load_costs(&p).unwrap()).to_rows(), table1().to_rows());
}

/// A model that lies: a NaN cost between nodes 2 and 3.
struct Broken;
impl LinkCosts for Broken {
    fn node_count(&self) -> usize {
        4
    }
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        if a == b {
            0.0
        } else if (a.0.min(b.0), a.0.max(b.0)) == (2, 3) {
            f64::NAN
        } else {
            1.0
        }
    }
    fn unit(&self) -> CostUnit {
        CostUnit::Hops
    }
}

#[test]
fn failed_write_leaves_the_old_file_and_no_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.csv");
    std::fs::write(&p, "0\n").unwrap();
    let e = write_costs_csv(&Broken, &p).unwrap_err();
    assert!(matches!(e, ModelError::NotFinite { .. }), "{e:?}");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "0\n");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let nowhere = dir.path().join("no/such/dir/m.csv");
    let (line, _, msg) = pos(write_costs_csv(&table1(), &nowhere));
    assert_eq!(line, 0);
    assert!(msg.contains("temporary file"), "{msg}");
    assert!(!nowhere.exists());
}

#[test]
fn write_refuses_an_empty_model() {
    let empty = DenseCostMatrix::<f64>::zeros(CostUnit::Hops, 0);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.csv");
    assert_eq!(write_costs_csv(&empty, &p), Err(ModelError::Empty));
    assert!(!p.exists());
}

// ---------------------------------------------------------------------------------------------
// CostModel and the command-line row

#[test]
fn cost_model_delegates_to_its_variant() {
    let mut d = CostModel::from(table1());
    d.set_cost(NodeId(0), NodeId(4), 7.0).unwrap();
    assert_eq!(d.cost(NodeId(4), NodeId(0)), 7.0);
    assert_eq!(d.node_count(), 8);
    let mut c =
        CostModel::from(ClusterCosts::uniform(CostUnit::LatencyMs, 2, 2, 1.0, 9.0).unwrap());
    assert_eq!(c.unit(), CostUnit::LatencyMs);
    c.set_cost(NodeId(0), NodeId(3), 2.0).unwrap();
    assert_eq!(c.cost(NodeId(3), NodeId(0)), 2.0);
    assert!(c.set_cost(NodeId(0), NodeId(4), 2.0).is_err());
    let copy = c.clone();
    assert_eq!(rows_of(&copy), rows_of(&c));
}

#[test]
fn cost_row_from_the_command_line() {
    assert_eq!(
        parse_cost_row("4,2,5,0,0,4,4,3").unwrap(),
        vec![4.0, 2.0, 5.0, 0.0, 0.0, 4.0, 4.0, 3.0]
    );
    assert_eq!(parse_cost_row(" 1.5 , 2 ").unwrap(), vec![1.5, 2.0]);
    assert_eq!(
        parse_cost_row("4,2,x,0").unwrap_err(),
        "field 3: \"x\" is not a number"
    );
    assert_eq!(parse_cost_row("4,,1").unwrap_err(), "field 2 is empty");
    assert_eq!(
        parse_cost_row("4,-1").unwrap_err(),
        "field 2: cost is negative (-1)"
    );
    assert_eq!(
        parse_cost_row("inf").unwrap_err(),
        "field 1: cost is not a finite number (inf)"
    );
    assert!(parse_cost_row("  ").unwrap_err().contains("no costs given"));
}

// ---------------------------------------------------------------------------------------------
// Properties

const VALUES: [f64; 10] = [0.0, 1.0, 2.0, 3.0, 0.5, 0.25, 0.1, 1.0 / 3.0, 12.75, 1e-3];

fn unit_strategy() -> impl Strategy<Value = CostUnit> {
    prop_oneof![
        Just(CostUnit::Hops),
        Just(CostUnit::LatencyMs),
        Just(CostUnit::BandwidthMbS)
    ]
}

fn matrix_strategy() -> impl Strategy<Value = DenseCostMatrix<f64>> {
    (1usize..=12, unit_strategy()).prop_flat_map(|(n, unit)| {
        prop::collection::vec(0..VALUES.len(), n * n).prop_map(move |picks| {
            DenseCostMatrix::from_fn(unit, n, |i, j| VALUES[picks[i * n + j]])
        })
    })
}

/// Text made of the characters the formats use, to reach deep into the parsers.
fn format_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "0",
            "1",
            "2",
            "-3",
            "0.5",
            "1e9",
            "nan",
            "inf",
            ",",
            ", ",
            "\n",
            "\r\n",
            "#",
            "# unit:",
            " hops",
            "x",
            "node",
            "[",
            "]",
            "[[",
            "]]",
            "=",
            "\"",
            "matrix",
            "clusters",
            "[clusters]",
            "[[link]]",
            "sizes",
            "of_node",
            "intra",
            "inter",
            "a",
            "b",
            "cost",
            "unit",
            " ",
            "\t",
            "\u{feff}",
            "é",
            "99999999999999999999",
        ]),
        0..60,
    )
    .prop_map(|parts| parts.concat())
}

/// TOML documents with the right keys but random shapes and values: ragged rows, negative,
/// fractional and huge numbers, out-of-range ids.
fn toml_shaped() -> impl Strategy<Value = String> {
    // Mostly valid values, so that the checks past the first one run too.
    let num = prop_oneof![
        6 => Just("0"),
        3 => prop::sample::select(vec!["1", "2.5", "7"]),
        1 => prop::sample::select(vec!["-1", "nan", "-inf", "1e300"]),
    ];
    let list = prop::collection::vec(num.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", ")));
    let table =
        prop::collection::vec(list.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", ")));
    let ids = prop::collection::vec(prop::sample::select(vec!["0", "1", "2", "-1", "5"]), 0..5)
        .prop_map(|v| format!("[{}]", v.join(", ")));
    let link = (0i64..6, -1i64..6, num.clone())
        .prop_map(|(a, b, c)| format!("[[link]]\na = {a}\nb = {b}\ncost = {c}\n"));
    prop_oneof![
        (table.clone(), prop::collection::vec(link.clone(), 0..3))
            .prop_map(|(m, l)| format!("matrix = {m}\n{}", l.concat())),
        (
            prop::option::of(ids.clone()),
            prop::option::of(ids),
            prop::option::of(list),
            prop::option::of(table),
            prop::collection::vec(link, 0..3)
        )
            .prop_map(|(sizes, of_node, intra, inter, links)| {
                let mut s = String::from("unit = \"latency_ms\"\n[clusters]\n");
                for (k, v) in [
                    ("sizes", sizes),
                    ("of_node", of_node),
                    ("intra", intra),
                    ("inter", inter),
                ] {
                    if let Some(v) = v {
                        s.push_str(&format!("{k} = {v}\n"));
                    }
                }
                s + &links.concat()
            }),
    ]
}

proptest! {
    #[test]
    fn written_matrices_load_back_exactly(m in matrix_strategy()) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.csv");
        write_costs_csv(&m, &p).unwrap();
        let back = dense(load_costs(&p).unwrap());
        prop_assert_eq!(back.unit(), m.unit());
        prop_assert_eq!(back.to_rows(), m.to_rows());
    }

    #[test]
    fn arbitrary_text_never_panics(s in any::<String>()) {
        let p = Path::new("fuzz");
        let _ = parse_costs_csv(&s, p);
        let _ = parse_costs_toml(&s, p);
        let _ = parse_clusters_csv(&s, p, 4);
        let _ = parse_clusters_toml(&s, p, 4);
        let _ = parse_cost_row(&s);
    }

    #[test]
    fn format_like_text_never_panics(s in format_soup(), n in 0usize..6) {
        let p = Path::new("fuzz");
        match parse_costs_csv(&s, p) {
            Ok(m) => prop_assert!(m.node_count() > 0),
            Err(e) => prop_assert!(matches!(e, ModelError::File { .. }), "{:?}", e),
        }
        match parse_costs_toml(&s, p) {
            Ok(m) => prop_assert!(m.node_count() > 0),
            Err(e) => prop_assert!(matches!(e, ModelError::File { .. }), "{:?}", e),
        }
        if let Ok(v) = parse_clusters_csv(&s, p, n) {
            prop_assert_eq!(v.len(), n);
        }
        if let Ok(v) = parse_clusters_toml(&s, p, n) {
            prop_assert_eq!(v.len(), n);
        }
        let _ = parse_cost_row(&s);
    }

    #[test]
    fn toml_shaped_text_never_panics(s in toml_shaped(), n in 0usize..6) {
        let p = Path::new("fuzz.toml");
        match parse_costs_toml(&s, p) {
            Ok(m) => prop_assert!(m.node_count() > 0),
            Err(e) => prop_assert!(matches!(e, ModelError::File { .. }), "{:?}", e),
        }
        if let Ok(v) = parse_clusters_toml(&s, p, n) {
            prop_assert_eq!(v.len(), n);
        }
    }
}
