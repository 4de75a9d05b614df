//! Errors of the model crate. Every variant names the node(s) or file position at fault.

use crate::NodeId;
use std::path::PathBuf;

/// Something wrong with a cost model or with the input it was built from.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ModelError {
    /// A node id outside `0..node_count`.
    #[error("unknown node {node}: the model has {node_count} nodes ({})", ids_in_words(*.node_count))]
    UnknownNode { node: NodeId, node_count: usize },
    /// A cost that is NaN or infinite.
    #[error("cost between nodes {a} and {b} is not a finite number ({})", compact(*.value))]
    NotFinite { a: NodeId, b: NodeId, value: f64 },
    /// A negative cost.
    #[error("cost between nodes {a} and {b} is negative ({})", compact(*.value))]
    Negative { a: NodeId, b: NodeId, value: f64 },
    /// A row whose length differs from the number of rows.
    #[error("matrix is not square: row {row} has {len} values, expected {expected}")]
    NotSquare {
        row: usize,
        len: usize,
        expected: usize,
    },
    /// `m[a][b] != m[b][a]`.
    #[error("matrix is not symmetric: cost {a}->{b} is {} but {b}->{a} is {}", compact(*.ab), compact(*.ba))]
    Asymmetric {
        a: NodeId,
        b: NodeId,
        ab: f64,
        ba: f64,
    },
    /// A node with a non-zero cost to itself.
    #[error("cost of node {node} to itself must be 0, found {}", compact(*.value))]
    NonZeroDiagonal { node: NodeId, value: f64 },
    /// No nodes at all.
    #[error("the cost model has no nodes")]
    Empty,
    /// A cluster id outside the cluster tables.
    #[error("unknown cluster {cluster}: the model has {cluster_count} clusters")]
    UnknownCluster { cluster: u32, cluster_count: usize },
    /// A new node's cost row has the wrong length.
    #[error("a joining node needs a cost to each of the {expected} existing nodes, got {len}")]
    JoinRowLength { len: usize, expected: usize },
    /// An input file could not be read or parsed.
    #[error("{}", format_file_error(path, *line, *column, message))]
    File {
        path: PathBuf,
        /// 1-based line, 0 when the error is not tied to a line.
        line: usize,
        /// 1-based column, 0 when the error is not tied to a column.
        column: usize,
        message: String,
    },
}

fn format_file_error(path: &std::path::Path, line: usize, column: usize, message: &str) -> String {
    match (line, column) {
        (0, _) => format!("{}: {message}", path.display()),
        (l, 0) => format!("{}:{l}: {message}", path.display()),
        (l, c) => format!("{}:{l}:{c}: {message}", path.display()),
    }
}

/// 1-based (line, column) of a byte offset in `text` (columns count characters), to report
/// parser spans as `file:line:column`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut off = offset.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    (line, text[line_start..off].chars().count() + 1)
}

/// A number as an error message should print it: as written when that takes at most 10
/// characters (`0.02`, `100`, `1250000000`), else the shorter of that and scientific notation
/// (`1e300` where `{}` gives 301 digits, `1e-12`).
pub fn compact(x: f64) -> String {
    let plain = format!("{x}");
    let sci = format!("{x:e}");
    if plain.len() > 10 && sci.len() < plain.len() {
        sci
    } else {
        plain
    }
}

/// The ids `0..n` in words, for messages: `"ids 0 to 3"`, `"id 0"`, `"no ids"` (a half-open
/// `0..4` reads as if 4 were an id).
pub fn ids_in_words(n: usize) -> String {
    match n {
        0 => "no ids".to_string(),
        1 => "id 0".to_string(),
        n => format!("ids 0 to {}", n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::{compact, ids_in_words, line_col};

    #[test]
    fn numbers_and_id_ranges_read_well() {
        assert_eq!(compact(1e300), "1e300");
        assert_eq!(compact(1e-12), "1e-12");
        assert_eq!(compact(0.02), "0.02");
        assert_eq!(compact(1.25e9), "1250000000");
        assert_eq!(compact(-3.5), "-3.5");
        assert_eq!(compact(100.0), "100");
        assert_eq!(compact(1.0 / 3.0), "0.3333333333333333");
        assert_eq!(compact(f64::INFINITY), "inf");
        assert_eq!(compact(f64::NAN), "NaN");
        assert_eq!(ids_in_words(0), "no ids");
        assert_eq!(ids_in_words(1), "id 0");
        assert_eq!(ids_in_words(16), "ids 0 to 15");
    }

    #[test]
    fn line_col_counts_characters() {
        let t = "ab\nçd\ne";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 5), (2, 2), "ç is two bytes, one column");
        assert_eq!(line_col(t, 4), (2, 1), "inside a character: its start");
        assert_eq!(line_col(t, 99), (3, 2), "past the end: the end");
    }
}
