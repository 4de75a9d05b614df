//! Loading cost models and cluster maps from files, and saving cost matrices.
//!
//! Every parse error is a [`ModelError::File`] naming the file, the 1-based line and column of
//! the offending field, and what is wrong in plain words, e.g.
//! `data/x.csv:3:7: "abc" is not a number`. Bad input never panics.
//!
//! # Cost files ([`load_costs`])
//!
//! The extension selects the format: `.csv` (dense matrix) or `.toml` (dense or cluster model).
//!
//! ## CSV: dense matrix
//!
//! One row of the matrix per line, values separated by commas (whitespace around values is
//! allowed). A line whose first non-blank character is `#` is a comment; blank lines are ignored.
//! The comment `# unit: hops` (or `latency_ms`, `bandwidth_mb_s`) sets the unit; the default is
//! hops. Values must be finite and non-negative, the diagonal 0, the matrix square and symmetric.
//!
//! ```text
//! # unit: latency_ms
//! 0, 2.5, 10
//! 2.5, 0, 7
//! 10, 7, 0
//! ```
//!
//! Optionally, the first data line is a header: when its first field is empty or not a number
//! (`,0,1,2` or `node,0,1,2`), the remaining fields label the columns with their node ids
//! `0, 1, 2, ...`, and every following row starts with a label column holding the row's node id:
//!
//! ```text
//! node,0,1,2
//! 0,0,2,3
//! 1,2,0,5
//! 2,3,5,0
//! ```
//!
//! ## TOML: dense matrix
//!
//! ```toml
//! unit = "hops"          # optional, default hops
//! matrix = [[0, 2], [2, 0]]
//! ```
//!
//! ## TOML: cluster model ([`ClusterCosts`])
//!
//! Nodes are numbered consecutively through the clusters (`sizes`), or each node's cluster is
//! given (`of_node`). `intra` is the cost between two nodes of the same cluster, one value per
//! cluster; `inter` is the C×C table of costs between clusters (symmetric, diagonal ignored).
//! Optional `[[link]]` entries override single links (and may also follow a dense `matrix`).
//!
//! ```toml
//! unit = "latency_ms"
//! [clusters]
//! sizes = [2, 3]               # nodes 0-1 in cluster 0, nodes 2-4 in cluster 1
//! # of_node = [0, 0, 1, 1, 1]  # the same, node by node
//! intra = [0.1, 0.2]
//! inter = [[0, 20.0],
//!          [20.0, 0]]
//! [[link]]
//! a = 1
//! b = 4
//! cost = 50.0
//! ```
//!
//! # Cluster maps ([`load_clusters`])
//!
//! Which cluster each node belongs to. Every node `0..node_count` appears exactly once and the
//! cluster ids are dense: `0, 1, ..., C-1`, each used by at least one node.
//!
//! CSV: one `node,cluster` pair per line, in any order, with an optional `node,cluster` header;
//! `#` comments and blank lines as above.
//!
//! ```text
//! node,cluster
//! 0,0
//! 1,0
//! 2,1
//! ```
//!
//! TOML: `of_node = [0, 0, 1]` or `sizes = [2, 1]` (consecutive numbering), either at top level
//! or inside a `[clusters]` table, so a cluster cost-model file is also a cluster map.
//!
//! # Example
//!
//! ```
//! use std::path::Path;
//! use windrose_model::{load::CostModel, parse_costs_csv, parse_costs_toml, LinkCosts, NodeId};
//!
//! let m = parse_costs_csv("# unit: hops\n0,2\n2,0\n", Path::new("two.csv")).unwrap();
//! assert_eq!(m.cost(NodeId(0), NodeId(1)), 2.0);
//!
//! let toml = "unit = \"latency_ms\"\n[clusters]\nsizes = [2, 2]\nintra = [1, 2]\n\
//!             inter = [[0, 30], [30, 0]]\n";
//! let c = parse_costs_toml(toml, Path::new("c.toml")).unwrap();
//! assert!(matches!(c, CostModel::Cluster(_)));
//! assert_eq!(c.cost(NodeId(2), NodeId(3)), 2.0);
//! assert_eq!(c.cost(NodeId(0), NodeId(3)), 30.0);
//!
//! let err = parse_costs_csv("0,1\n1,abc\n", Path::new("bad.csv")).unwrap_err();
//! assert_eq!(err.to_string(), "bad.csv:2:3: \"abc\" is not a number");
//! ```

use crate::error::line_col;
use crate::{
    ClusterCosts, ClusterId, CostUnit, DenseCostMatrix, LinkCosts, LinkCostsMut, ModelError, NodeId,
};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use toml::Spanned;

/// The largest node count a cluster-model TOML file may describe (its `sizes` add up to at most
/// this), so that a typo such as `sizes = [1000000000000]` is an error rather than an attempt to
/// allocate terabytes.
pub const MAX_FILE_NODES: usize = 1 << 26;

/// A cost model loaded from a file: a dense matrix or a cluster model. Implements
/// [`LinkCosts`] and [`LinkCostsMut`] by delegating to the model it holds.
#[derive(Clone, Debug)]
pub enum CostModel {
    /// Every pair stored (CSV files, TOML `matrix`).
    Dense(DenseCostMatrix<f64>),
    /// Per-cluster tables plus per-link overrides (TOML `[clusters]`).
    Cluster(ClusterCosts),
}

impl From<DenseCostMatrix<f64>> for CostModel {
    fn from(m: DenseCostMatrix<f64>) -> Self {
        CostModel::Dense(m)
    }
}

impl From<ClusterCosts> for CostModel {
    fn from(m: ClusterCosts) -> Self {
        CostModel::Cluster(m)
    }
}

impl LinkCosts for CostModel {
    #[inline]
    fn node_count(&self) -> usize {
        match self {
            CostModel::Dense(m) => m.node_count(),
            CostModel::Cluster(m) => m.node_count(),
        }
    }
    #[inline]
    fn cost(&self, a: NodeId, b: NodeId) -> f64 {
        match self {
            CostModel::Dense(m) => m.cost(a, b),
            CostModel::Cluster(m) => m.cost(a, b),
        }
    }
    fn unit(&self) -> CostUnit {
        match self {
            CostModel::Dense(m) => m.unit(),
            CostModel::Cluster(m) => m.unit(),
        }
    }
}

impl LinkCostsMut for CostModel {
    fn set_cost(&mut self, a: NodeId, b: NodeId, value: f64) -> Result<(), ModelError> {
        match self {
            CostModel::Dense(m) => m.set_cost(a, b, value),
            CostModel::Cluster(m) => m.set_cost(a, b, value),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and positions

fn file_err(path: &Path, line: usize, column: usize, message: impl Into<String>) -> ModelError {
    ModelError::File {
        path: path.to_path_buf(),
        line,
        column,
        message: message.into(),
    }
}

/// Source text and its path, to turn byte spans into file errors.
struct Src<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Src<'_> {
    fn err(&self, span: &Range<usize>, message: impl Into<String>) -> ModelError {
        let (line, column) = line_col(self.text, span.start);
        file_err(self.path, line, column, message)
    }

    fn no_pos(&self, message: impl Into<String>) -> ModelError {
        file_err(self.path, 0, 0, message)
    }
}

fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// True when the text has nothing but blank lines and `#` comments.
fn is_blank(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    })
}

fn fmt_num(v: f64) -> String {
    format!("{v}")
}

/// Checks a cost read from a file: a finite, non-negative number.
fn cost_problem(v: f64, what: impl FnOnce() -> String) -> Option<String> {
    if !v.is_finite() {
        Some(format!("{} is not a finite number ({v})", what()))
    } else if v < 0.0 {
        Some(format!("{} is negative ({})", what(), fmt_num(v)))
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Reading files

enum Format {
    Csv,
    Toml,
}

fn format_of(path: &Path, kind: &str) -> Result<Format, ModelError> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("csv") => Ok(Format::Csv),
        Some("toml") => Ok(Format::Toml),
        Some(other) => Err(file_err(
            path,
            0,
            0,
            format!("unsupported extension \".{other}\": {kind} files must end in .csv or .toml"),
        )),
        None => Err(file_err(
            path,
            0,
            0,
            format!("the file name has no extension: {kind} files must end in .csv or .toml"),
        )),
    }
}

fn read_text(path: &Path) -> Result<String, ModelError> {
    let bytes =
        std::fs::read(path).map_err(|e| file_err(path, 0, 0, format!("cannot read: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let prefix = std::str::from_utf8(&e.as_bytes()[..good]).unwrap_or("");
        let (line, column) = line_col(prefix, prefix.len());
        file_err(path, line, column, "the file is not UTF-8 text")
    })
}

/// Loads a cost model from a `.csv` (dense matrix) or `.toml` (dense matrix or cluster model)
/// file; the formats are described in the [module documentation](self).
pub fn load_costs(path: &Path) -> Result<CostModel, ModelError> {
    let format = format_of(path, "cost")?;
    let text = read_text(path)?;
    match format {
        Format::Csv => parse_costs_csv(&text, path).map(CostModel::Dense),
        Format::Toml => parse_costs_toml(&text, path),
    }
}

/// Loads the cluster of each of `node_count` nodes from a `.csv` (`node,cluster` lines) or
/// `.toml` (`of_node` or `sizes`) file; see the [module documentation](self).
pub fn load_clusters(path: &Path, node_count: usize) -> Result<Vec<ClusterId>, ModelError> {
    let format = format_of(path, "cluster map")?;
    let text = read_text(path)?;
    match format {
        Format::Csv => parse_clusters_csv(&text, path, node_count),
        Format::Toml => parse_clusters_toml(&text, path, node_count),
    }
}

// ---------------------------------------------------------------------------------------------
// CSV

/// One comma-separated field: its trimmed text and the 1-based column where it starts.
struct Field<'a> {
    text: &'a str,
    column: usize,
}

fn split_fields(line: &str) -> Vec<Field<'_>> {
    let mut out = Vec::new();
    let mut col = 1;
    for piece in line.split(',') {
        let rest = piece.trim_start();
        let lead = piece[..piece.len() - rest.len()].chars().count();
        out.push(Field {
            text: rest.trim_end(),
            column: col + lead,
        });
        col += piece.chars().count() + 1;
    }
    out
}

/// If `line` is a `# unit: NAME` comment, the name and its column.
fn unit_comment(line: &str) -> Option<(&str, usize)> {
    let after_hash = line.trim_start().strip_prefix('#')?;
    let rest = after_hash.trim_start().strip_prefix("unit")?;
    let rest = rest.trim_start().strip_prefix(':')?;
    let value = rest.trim_start();
    let column = line[..line.len() - value.len()].chars().count() + 1;
    Some((value.trim_end(), column))
}

fn parse_unit(name: &str) -> Result<CostUnit, String> {
    CostUnit::parse(name).ok_or_else(|| {
        format!("unknown unit \"{name}\": expected hops, latency_ms or bandwidth_mb_s")
    })
}

/// Parses a dense cost matrix in the CSV format of the [module documentation](self). `path` is
/// only used in error messages.
pub fn parse_costs_csv(text: &str, path: &Path) -> Result<DenseCostMatrix<f64>, ModelError> {
    let text = strip_bom(text);
    let err = |line: usize, column: usize, msg: String| file_err(path, line, column, msg);
    let mut unit: Option<(CostUnit, usize)> = None;
    // Line of the header, and its corner field, when the file has one.
    let mut header: Option<(usize, String)> = None;
    let mut seen_data = false;
    let mut n: Option<usize> = None;
    let mut rows: Vec<Vec<f64>> = Vec::new();
    let mut last_row_line = 0;

    for (idx, line) in text.lines().enumerate() {
        let line_no = idx + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with('#') {
            if let Some((name, column)) = unit_comment(line) {
                if let Some((_, first)) = unit {
                    return Err(err(
                        line_no,
                        column,
                        format!("the unit is given twice (first on line {first})"),
                    ));
                }
                let u = parse_unit(name).map_err(|m| err(line_no, column, m))?;
                unit = Some((u, line_no));
            }
            continue;
        }
        let fields = split_fields(line);
        if !seen_data {
            seen_data = true;
            let first = fields[0].text;
            if first.is_empty() || first.parse::<f64>().is_err() {
                let why = if first.is_empty() {
                    "line is read as a header because its first field is empty".to_string()
                } else {
                    format!("line is read as a header because its first field \"{first}\" is not a number")
                };
                if fields.len() < 2 {
                    return Err(err(
                        line_no,
                        fields[0].column,
                        format!("this {why}, but it has no column labels"),
                    ));
                }
                for (k, f) in fields[1..].iter().enumerate() {
                    if f.text.parse::<usize>().ok() != Some(k) {
                        return Err(err(
                            line_no,
                            f.column,
                            format!(
                                "header label \"{}\" should be {k}: columns are labelled with \
                                 their node ids 0, 1, 2, ... (this {why})",
                                f.text
                            ),
                        ));
                    }
                }
                n = Some(fields.len() - 1);
                header = Some((line_no, first.to_string()));
                continue;
            }
        }

        let i = rows.len();
        let values = if header.is_some() {
            let label = &fields[0];
            if label.text.parse::<usize>().ok() != Some(i) {
                return Err(err(
                    line_no,
                    label.column,
                    format!(
                        "row label \"{}\" should be {i}: with a header, every row starts with \
                         its node id, in order 0, 1, 2, ...",
                        label.text
                    ),
                ));
            }
            &fields[1..]
        } else {
            &fields[..]
        };
        let expected = *n.get_or_insert(values.len());
        if i >= expected {
            let first = if header.is_some() {
                format!("the header has {expected} columns")
            } else {
                format!("row 0 has {expected} values")
            };
            return Err(err(
                line_no,
                1,
                format!(
                    "row {i} is one row too many: {first}, so the matrix has {expected} rows \
                     (the matrix must be square)"
                ),
            ));
        }
        if values.len() != expected {
            let column = if values.len() > expected {
                values[expected].column
            } else {
                1
            };
            return Err(err(
                line_no,
                column,
                format!(
                    "row {i} has {} values, expected {expected} (the matrix must be square)",
                    values.len()
                ),
            ));
        }
        let mut row = Vec::with_capacity(expected);
        for (j, f) in values.iter().enumerate() {
            if f.text.is_empty() {
                return Err(err(
                    line_no,
                    f.column,
                    "empty value where a cost was expected".into(),
                ));
            }
            let v: f64 = f
                .text
                .parse()
                .map_err(|_| err(line_no, f.column, format!("\"{}\" is not a number", f.text)))?;
            if let Some(m) = cost_problem(v, || format!("cost between nodes {i} and {j}")) {
                return Err(err(line_no, f.column, m));
            }
            if i == j && v != 0.0 {
                return Err(err(
                    line_no,
                    f.column,
                    format!("cost of node {i} to itself must be 0, found {}", fmt_num(v)),
                ));
            }
            if j < i && rows[j][i] != v {
                return Err(err(
                    line_no,
                    f.column,
                    format!(
                        "matrix is not symmetric: cost {i}->{j} is {} but {j}->{i} is {}",
                        fmt_num(v),
                        fmt_num(rows[j][i])
                    ),
                ));
            }
            row.push(v);
        }
        rows.push(row);
        last_row_line = line_no;
    }

    if !seen_data {
        return Err(err(0, 0, "empty file: no cost rows".into()));
    }
    if rows.is_empty() {
        let (line, _) = header.expect("data seen but no rows: the line was a header");
        return Err(err(
            line,
            1,
            "the header is not followed by any cost rows".into(),
        ));
    }
    let n = n.unwrap_or(0);
    if rows.len() < n {
        return Err(err(
            last_row_line,
            1,
            format!(
                "the matrix ends after {} rows but has {n} columns (the matrix must be square)",
                rows.len()
            ),
        ));
    }
    let unit = unit.map_or(CostUnit::Hops, |(u, _)| u);
    DenseCostMatrix::from_rows(unit, &rows).map_err(|e| err(0, 0, e.to_string()))
}

/// Parses a cluster map in CSV form (`node,cluster` lines, optional `node,cluster` header) for
/// `node_count` nodes. `path` is only used in error messages.
pub fn parse_clusters_csv(
    text: &str,
    path: &Path,
    node_count: usize,
) -> Result<Vec<ClusterId>, ModelError> {
    let text = strip_bom(text);
    let err = |line: usize, column: usize, msg: String| file_err(path, line, column, msg);
    let mut of_node: Vec<Option<(ClusterId, usize)>> = vec![None; node_count];
    // First use of each cluster id: (line, column).
    let mut first_use: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    let mut seen_data = false;
    let mut last_line = 0;
    for (idx, line) in text.lines().enumerate() {
        let line_no = idx + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields = split_fields(line);
        if !seen_data {
            seen_data = true;
            if fields.len() == 2
                && fields[0].text.eq_ignore_ascii_case("node")
                && fields[1].text.eq_ignore_ascii_case("cluster")
            {
                continue;
            }
        }
        last_line = line_no;
        if fields.len() != 2 {
            let column = fields.get(2).map_or(1, |f| f.column);
            return Err(err(
                line_no,
                column,
                format!("expected two fields, node,cluster, found {}", fields.len()),
            ));
        }
        let (nf, cf) = (&fields[0], &fields[1]);
        let node: usize = nf.text.parse().map_err(|_| {
            err(
                line_no,
                nf.column,
                format!("node \"{}\" is not a node id (0, 1, 2, ...)", nf.text),
            )
        })?;
        if node >= node_count {
            return Err(err(
                line_no,
                nf.column,
                format!(
                    "node {node} is out of range: the model has {node_count} nodes ({})",
                    crate::error::ids_in_words(node_count)
                ),
            ));
        }
        let cluster: u32 = cf.text.parse().map_err(|_| {
            err(
                line_no,
                cf.column,
                format!("cluster \"{}\" is not a cluster id (0, 1, 2, ...)", cf.text),
            )
        })?;
        if let Some((_, first)) = of_node[node] {
            return Err(err(
                line_no,
                nf.column,
                format!("node {node} is listed twice (first on line {first})"),
            ));
        }
        of_node[node] = Some((ClusterId(cluster), line_no));
        first_use.entry(cluster).or_insert((line_no, cf.column));
    }
    if !seen_data {
        return Err(err(0, 0, "empty file: no nodes listed".into()));
    }
    if let Some(missing) = of_node.iter().position(|c| c.is_none()) {
        return Err(err(
            last_line,
            1,
            format!(
                "node {missing} is missing: each of the {node_count} nodes ({}) must be listed exactly once",
                crate::error::ids_in_words(node_count)
            ),
        ));
    }
    if let Some((id, missing, (line, column))) = first_gap(&first_use) {
        return Err(err(line, column, gap_message(id, missing)));
    }
    Ok(of_node.into_iter().flatten().map(|(c, _)| c).collect())
}

/// The first gap in the used cluster ids, if they are not exactly `0..C`: the smallest id above
/// the gap, the missing id, and where the former is first used.
fn first_gap<P: Clone>(first_use: &BTreeMap<u32, P>) -> Option<(u32, usize, P)> {
    first_use
        .iter()
        .enumerate()
        .find(|(expected, (&id, _))| id as usize != *expected)
        .map(|(expected, (&id, pos))| (id, expected, pos.clone()))
}

fn gap_message(id: u32, missing: usize) -> String {
    format!(
        "cluster {id} is used but cluster {missing} is not: cluster ids must be dense \
         (0, 1, 2, ... with every cluster used)"
    )
}

// ---------------------------------------------------------------------------------------------
// TOML

type SpannedNums<T> = Spanned<Vec<Spanned<T>>>;
type SpannedTable = Spanned<Vec<Spanned<Vec<Spanned<f64>>>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CostsDoc {
    unit: Option<Spanned<String>>,
    matrix: Option<SpannedTable>,
    clusters: Option<Spanned<ClustersDoc>>,
    link: Option<Vec<Spanned<LinkDoc>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClustersDoc {
    sizes: Option<SpannedNums<i64>>,
    of_node: Option<SpannedNums<i64>>,
    intra: Option<SpannedNums<f64>>,
    inter: Option<SpannedTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkDoc {
    a: Spanned<i64>,
    b: Spanned<i64>,
    cost: Spanned<f64>,
}

/// A cluster map file: `sizes`/`of_node` at top level or in `[clusters]`; the other keys of a
/// cost-model file are accepted and ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterMapDoc {
    sizes: Option<SpannedNums<i64>>,
    of_node: Option<SpannedNums<i64>>,
    clusters: Option<Spanned<ClustersDoc>>,
    #[serde(rename = "unit")]
    _unit: Option<toml::Value>,
    #[serde(rename = "link")]
    _link: Option<toml::Value>,
    matrix: Option<Spanned<toml::Value>>,
}

fn from_toml<T: for<'de> Deserialize<'de>>(src: &Src<'_>) -> Result<T, ModelError> {
    toml::from_str(src.text).map_err(|e| {
        let message = e.message().trim().to_string();
        match e.span() {
            Some(span) => src.err(&span, message),
            None => src.no_pos(message),
        }
    })
}

/// Parses a cost model in the TOML format of the [module documentation](self): a dense
/// `matrix` or a `[clusters]` model, with optional `[[link]]` overrides. `path` is only used in
/// error messages.
pub fn parse_costs_toml(text: &str, path: &Path) -> Result<CostModel, ModelError> {
    let text = strip_bom(text);
    let src = Src { text, path };
    if is_blank(text) {
        return Err(src.no_pos("empty file: no cost rows"));
    }
    let doc: CostsDoc = from_toml(&src)?;
    let unit = match &doc.unit {
        Some(u) => parse_unit(u.get_ref()).map_err(|m| src.err(&u.span(), m))?,
        None => CostUnit::Hops,
    };
    let mut model = match (doc.matrix, doc.clusters) {
        (Some(_), Some(c)) => {
            return Err(src.err(
                &c.span(),
                "a file holds either a dense `matrix` or a `[clusters]` model, not both",
            ))
        }
        (None, None) => {
            return Err(src.no_pos(
                "no cost model found: expected `matrix = [[...]]` (dense) or a `[clusters]` \
                 table (cluster model)",
            ))
        }
        (Some(m), None) => CostModel::Dense(toml_matrix(&src, unit, &m)?),
        (None, Some(c)) => CostModel::Cluster(toml_cluster_model(&src, unit, &c)?),
    };
    apply_links(&src, &mut model, doc.link.as_deref().unwrap_or(&[]))?;
    Ok(model)
}

fn toml_matrix(
    src: &Src<'_>,
    unit: CostUnit,
    m: &SpannedTable,
) -> Result<DenseCostMatrix<f64>, ModelError> {
    let rows = m.get_ref();
    let n = rows.len();
    if n == 0 {
        return Err(src.err(&m.span(), "the matrix has no rows"));
    }
    for (i, row) in rows.iter().enumerate() {
        if row.get_ref().len() != n {
            return Err(src.err(
                &row.span(),
                format!(
                    "row {i} has {} values, expected {n} (the matrix has {n} rows and must be \
                     square)",
                    row.get_ref().len()
                ),
            ));
        }
        for (j, v) in row.get_ref().iter().enumerate() {
            let x = *v.get_ref();
            if let Some(msg) = cost_problem(x, || format!("cost between nodes {i} and {j}")) {
                return Err(src.err(&v.span(), msg));
            }
            if i == j && x != 0.0 {
                return Err(src.err(
                    &v.span(),
                    format!("cost of node {i} to itself must be 0, found {}", fmt_num(x)),
                ));
            }
            // Rows before `i` have been checked to be `n` long; later ones not yet.
            let mirror = (j < i).then(|| *rows[j].get_ref()[i].get_ref());
            if let Some(mirror) = mirror.filter(|&m| m != x) {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "matrix is not symmetric: cost {i}->{j} is {} but {j}->{i} is {}",
                        fmt_num(x),
                        fmt_num(mirror)
                    ),
                ));
            }
        }
    }
    let plain: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| r.get_ref().iter().map(|v| *v.get_ref()).collect())
        .collect();
    DenseCostMatrix::from_rows(unit, &plain).map_err(|e| src.err(&m.span(), e.to_string()))
}

/// Each node's cluster from `sizes` (consecutive numbering) or `of_node`.
///
/// `cluster_count`: the number of clusters the model defines (ids must be below it), or `None`
/// for a bare cluster map, whose ids must then be dense. `node_count`: the required number of
/// nodes, or `None` to allow up to [`MAX_FILE_NODES`].
fn toml_assignment(
    src: &Src<'_>,
    sizes: Option<&SpannedNums<i64>>,
    of_node: Option<&SpannedNums<i64>>,
    table: &Range<usize>,
    cluster_count: Option<(usize, &Range<usize>)>,
    node_count: Option<usize>,
) -> Result<Vec<ClusterId>, ModelError> {
    match (sizes, of_node) {
        (Some(_), Some(o)) => Err(src.err(&o.span(), "give either `sizes` or `of_node`, not both")),
        (None, None) => Err(src.err(
            table,
            "no cluster map: expected `sizes = [...]` (nodes per cluster, numbered \
             consecutively) or `of_node = [...]` (the cluster of each node)",
        )),
        (Some(s), None) => {
            let list = s.get_ref();
            if list.is_empty() {
                return Err(src.err(&s.span(), "`sizes` is empty: at least one cluster needed"));
            }
            if let Some((c, at)) = cluster_count {
                if list.len() != c {
                    return Err(src.err(
                        at,
                        format!(
                            "`intra` has {c} values but `sizes` describes {} clusters: give one \
                             intra-cluster cost per cluster",
                            list.len()
                        ),
                    ));
                }
            }
            let mut total: u128 = 0;
            for (k, v) in list.iter().enumerate() {
                let size = *v.get_ref();
                if size < 1 {
                    return Err(src.err(
                        &v.span(),
                        format!(
                            "cluster {k} has size {size}: every cluster needs at least one node"
                        ),
                    ));
                }
                total += size as u128;
            }
            match node_count {
                Some(nc) if total != nc as u128 => {
                    return Err(src.err(
                        &s.span(),
                        format!("`sizes` adds up to {total} nodes but the model has {nc}"),
                    ))
                }
                None if total > MAX_FILE_NODES as u128 => {
                    return Err(src.err(
                        &s.span(),
                        format!(
                            "`sizes` adds up to {total} nodes, more than the {MAX_FILE_NODES} a \
                             file may describe"
                        ),
                    ))
                }
                _ => {}
            }
            let mut out = Vec::with_capacity(total as usize);
            for (k, v) in list.iter().enumerate() {
                let cl = ClusterId::from(k);
                out.resize(out.len() + *v.get_ref() as usize, cl);
            }
            Ok(out)
        }
        (None, Some(o)) => {
            let list = o.get_ref();
            if list.is_empty() {
                return Err(src.err(&o.span(), "`of_node` is empty: at least one node needed"));
            }
            if let Some(nc) = node_count {
                if list.len() != nc {
                    return Err(src.err(
                        &o.span(),
                        format!(
                            "`of_node` lists {} nodes but the model has {nc}",
                            list.len()
                        ),
                    ));
                }
            }
            let mut first_use: BTreeMap<u32, Range<usize>> = BTreeMap::new();
            let mut out = Vec::with_capacity(list.len());
            for (node, v) in list.iter().enumerate() {
                let id = *v.get_ref();
                if id < 0 {
                    return Err(src.err(
                        &v.span(),
                        format!("node {node} is in cluster {id}, but cluster ids are 0, 1, 2, ..."),
                    ));
                }
                let limit = cluster_count.map_or(list.len(), |(c, _)| c);
                if id as u64 >= limit as u64 {
                    let msg = match cluster_count {
                        Some((c, _)) => format!(
                            "node {node} is in cluster {id}, but `intra` gives costs for {c} \
                             clusters ({})",
                            crate::error::ids_in_words(c)
                        ),
                        None => format!(
                            "node {node} is in cluster {id}, but there can be at most {limit} \
                             clusters (one per node): cluster ids must be dense (0, 1, 2, ...)"
                        ),
                    };
                    return Err(src.err(&v.span(), msg));
                }
                first_use.entry(id as u32).or_insert_with(|| v.span());
                out.push(ClusterId(id as u32));
            }
            if cluster_count.is_none() {
                if let Some((id, missing, span)) = first_gap(&first_use) {
                    return Err(src.err(&span, gap_message(id, missing)));
                }
            }
            Ok(out)
        }
    }
}

fn toml_cluster_model(
    src: &Src<'_>,
    unit: CostUnit,
    c: &Spanned<ClustersDoc>,
) -> Result<ClusterCosts, ModelError> {
    let doc = c.get_ref();
    let table = c.span();
    let intra = doc.intra.as_ref().ok_or_else(|| {
        src.err(
            &table,
            "the [clusters] table needs `intra = [...]`: the cost inside each cluster",
        )
    })?;
    let inter = doc.inter.as_ref().ok_or_else(|| {
        src.err(
            &table,
            "the [clusters] table needs `inter = [[...], ...]`: the C×C costs between clusters",
        )
    })?;
    let cc = intra.get_ref().len();
    if cc == 0 {
        return Err(src.err(
            &intra.span(),
            "`intra` is empty: at least one cluster needed",
        ));
    }
    for (k, v) in intra.get_ref().iter().enumerate() {
        if let Some(m) = cost_problem(*v.get_ref(), || {
            format!("intra-cluster cost of cluster {k}")
        }) {
            return Err(src.err(&v.span(), m));
        }
    }
    let rows = inter.get_ref();
    if rows.len() != cc {
        return Err(src.err(
            &inter.span(),
            format!(
                "`inter` has {} rows, expected {cc} (one per cluster, as `intra` has {cc} values)",
                rows.len()
            ),
        ));
    }
    for (i, row) in rows.iter().enumerate() {
        if row.get_ref().len() != cc {
            return Err(src.err(
                &row.span(),
                format!(
                    "`inter` row {i} has {} values, expected {cc} (one per cluster)",
                    row.get_ref().len()
                ),
            ));
        }
    }
    let mut table_rows = vec![vec![0.0; cc]; cc];
    for (i, row) in rows.iter().enumerate() {
        for (j, v) in row.get_ref().iter().enumerate() {
            if i == j {
                continue;
            }
            let x = *v.get_ref();
            if let Some(m) = cost_problem(x, || format!("cost between clusters {i} and {j}")) {
                return Err(src.err(&v.span(), m));
            }
            let mirror = (j < i).then(|| *rows[j].get_ref()[i].get_ref());
            if let Some(mirror) = mirror.filter(|&m| m != x) {
                return Err(src.err(
                    &v.span(),
                    format!(
                        "`inter` is not symmetric: cost {i}->{j} is {} but {j}->{i} is {}",
                        fmt_num(x),
                        fmt_num(mirror)
                    ),
                ));
            }
            table_rows[i][j] = x;
        }
    }
    let of_node = toml_assignment(
        src,
        doc.sizes.as_ref(),
        doc.of_node.as_ref(),
        &table,
        Some((cc, &intra.span())),
        None,
    )?;
    let intra_values = intra.get_ref().iter().map(|v| *v.get_ref()).collect();
    ClusterCosts::new(unit, of_node, intra_values, table_rows)
        .map_err(|e| src.err(&table, e.to_string()))
}

fn apply_links(
    src: &Src<'_>,
    model: &mut CostModel,
    links: &[Spanned<LinkDoc>],
) -> Result<(), ModelError> {
    let n = model.node_count();
    let mut seen: HashMap<(u32, u32), usize> = HashMap::new();
    for link in links {
        let l = link.get_ref();
        let mut ends = [0u32; 2];
        for (k, end) in [&l.a, &l.b].into_iter().enumerate() {
            let id = *end.get_ref();
            if id < 0 || id as u64 >= n as u64 {
                return Err(src.err(
                    &end.span(),
                    format!(
                        "node {id} does not exist: the model has {n} nodes ({})",
                        crate::error::ids_in_words(n)
                    ),
                ));
            }
            ends[k] = id as u32;
        }
        let [a, b] = ends;
        if a == b {
            return Err(src.err(
                &l.b.span(),
                format!("a link joins two different nodes, but `a` and `b` are both {a}"),
            ));
        }
        let cost = *l.cost.get_ref();
        if let Some(m) = cost_problem(cost, || format!("cost of link {a}-{b}")) {
            return Err(src.err(&l.cost.span(), m));
        }
        let (line, _) = line_col(src.text, l.a.span().start);
        if let Some(first) = seen.insert((a.min(b), a.max(b)), line) {
            return Err(src.err(
                &l.a.span(),
                format!("link {a}-{b} is given twice (first on line {first})"),
            ));
        }
        model
            .set_cost(NodeId(a), NodeId(b), cost)
            .map_err(|e| src.err(&l.cost.span(), e.to_string()))?;
    }
    Ok(())
}

/// Parses a cluster map in TOML form (`of_node = [...]` or `sizes = [...]`, at top level or in
/// a `[clusters]` table) for `node_count` nodes. `path` is only used in error messages.
pub fn parse_clusters_toml(
    text: &str,
    path: &Path,
    node_count: usize,
) -> Result<Vec<ClusterId>, ModelError> {
    let text = strip_bom(text);
    let src = Src { text, path };
    if is_blank(text) {
        return Err(src.no_pos("empty file: no nodes listed"));
    }
    let doc: ClusterMapDoc = from_toml(&src)?;
    let top = doc.sizes.is_some() || doc.of_node.is_some();
    match (top, &doc.clusters) {
        (true, Some(c)) => Err(src.err(
            &c.span(),
            "the cluster map is given both at top level and in [clusters]; keep one",
        )),
        (true, None) => toml_assignment(
            &src,
            doc.sizes.as_ref(),
            doc.of_node.as_ref(),
            &(0..0),
            None,
            Some(node_count),
        ),
        (false, Some(c)) => toml_assignment(
            &src,
            c.get_ref().sizes.as_ref(),
            c.get_ref().of_node.as_ref(),
            &c.span(),
            None,
            Some(node_count),
        ),
        (false, None) => match &doc.matrix {
            Some(m) => Err(src.err(
                &m.span(),
                "this file holds a dense `matrix`, not a cluster map (`sizes` or `of_node`)",
            )),
            None => Err(src.no_pos(
                "no cluster map: expected `sizes = [...]` (nodes per cluster, numbered \
                 consecutively) or `of_node = [...]` (the cluster of each node)",
            )),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Shortest text that parses back to exactly `v`.
fn fmt_cost(v: f64) -> String {
    let s = format!("{v}");
    if s.len() > 24 {
        format!("{v:e}")
    } else {
        s
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a file through a temporary file in the same directory and a rename, so that readers
/// see either the old content or the complete new one, never a half-written file.
fn write_atomically(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<File>) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let io = |what: &str, e: std::io::Error| file_err(path, 0, 0, format!("{what}: {e}"));
    let name = path
        .file_name()
        .ok_or_else(|| file_err(path, 0, 0, "not a file path (it has no file name)"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (tmp, file) = {
        let mut attempt = 0;
        loop {
            let tmp = dir.join(format!(
                ".{}.{}-{}.tmp",
                name.to_string_lossy(),
                std::process::id(),
                TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(io(
                        &format!("cannot create a temporary file in {}", dir.display()),
                        e,
                    ))
                }
            }
        }
    };
    let result = (|| {
        let mut w = BufWriter::new(file);
        body(&mut w)?;
        let file = w
            .into_inner()
            .map_err(|e| io("cannot write", e.into_error()))?;
        file.sync_all().map_err(|e| io("cannot write", e))?;
        drop(file);
        std::fs::rename(&tmp, path)
            .map_err(|e| io(&format!("cannot move {} into place", tmp.display()), e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    } else {
        // Make the rename durable too; not all platforms can sync a directory, so best effort.
        #[cfg(unix)]
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
    }
    result
}

/// Saves any cost model as a dense CSV matrix (with a `# unit:` comment and the header and
/// label layout, see the [module documentation](self)) that [`load_costs`] reads back exactly.
///
/// The file is written atomically: to a temporary file in the same directory, then renamed, so
/// a failure never leaves a half-written file. A model that could not be read back (no nodes, a
/// negative, non-finite or asymmetric cost) is refused with the usual [`ModelError`] and the
/// target is left untouched.
pub fn write_costs_csv(costs: &(impl LinkCosts + ?Sized), path: &Path) -> Result<(), ModelError> {
    let n = costs.node_count();
    if n == 0 {
        return Err(ModelError::Empty);
    }
    write_atomically(path, |w| {
        let io = |e: std::io::Error| file_err(path, 0, 0, format!("cannot write: {e}"));
        writeln!(w, "# windrose cost matrix: {n} nodes").map_err(io)?;
        writeln!(w, "# unit: {}", costs.unit().name()).map_err(io)?;
        write!(w, "node").map_err(io)?;
        for j in 0..n {
            write!(w, ",{j}").map_err(io)?;
        }
        writeln!(w).map_err(io)?;
        for i in 0..n {
            let a = NodeId::from(i);
            write!(w, "{i}").map_err(io)?;
            for j in 0..n {
                let b = NodeId::from(j);
                let v = costs.cost(a, b);
                if !v.is_finite() {
                    return Err(ModelError::NotFinite { a, b, value: v });
                }
                if v < 0.0 {
                    return Err(ModelError::Negative { a, b, value: v });
                }
                if i == j && v != 0.0 {
                    return Err(ModelError::NonZeroDiagonal { node: a, value: v });
                }
                if j < i && costs.cost(b, a) != v {
                    return Err(ModelError::Asymmetric {
                        a,
                        b,
                        ab: v,
                        ba: costs.cost(b, a),
                    });
                }
                write!(w, ",{}", fmt_cost(v)).map_err(io)?;
            }
            writeln!(w).map_err(io)?;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Command line

/// Parses a comma-separated row of costs given on a command line, e.g. `4,2,5,0,0,4,4,3` (the
/// costs of a joining node to the existing nodes). Values must be finite and non-negative; the
/// error names the 1-based field at fault.
pub fn parse_cost_row(s: &str) -> Result<Vec<f64>, String> {
    if s.trim().is_empty() {
        return Err("no costs given: expected comma-separated numbers such as 4,2,5,0".into());
    }
    s.split(',')
        .enumerate()
        .map(|(k, f)| {
            let (field, f) = (k + 1, f.trim());
            if f.is_empty() {
                return Err(format!("field {field} is empty"));
            }
            let v: f64 = f
                .parse()
                .map_err(|_| format!("field {field}: \"{f}\" is not a number"))?;
            match cost_problem(v, || format!("field {field}: cost")) {
                Some(m) => Err(m),
                None => Ok(v),
            }
        })
        .collect()
}
