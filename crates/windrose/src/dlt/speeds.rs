//! The speeds file of `windrose dlt`: how long each node needs to process the WHOLE load and how
//! long each tree link needs to carry the WHOLE load, in seconds.
//!
//! Two spellings of the same content, chosen by the extension:
//!
//! `.toml`: two tables keyed by node id. A link is keyed by the node it leads to (its child), or
//! by `parent-child` to say both ends (checked against the tree). The root has no link.
//!
//! ```toml
//! [compute_s_per_unit]   # node = seconds it needs for the whole load alone (w T_cp), > 0
//! 0 = 1.0
//! 1 = 1.0
//! [link_s_per_unit]      # child = seconds to send it the whole load from its parent (z T_cm), >= 0
//! 1 = 20.0
//! 0-2 = 10.0             # the same, naming the parent too
//! ```
//!
//! `.csv`: a header, then one line per node; the root's link is `-`.
//!
//! ```text
//! node,compute_s_per_unit,link_s_per_unit
//! 0,1.0,-
//! 1,1.0,20.0
//! ```
//!
//! With speeds in MB/s and a load of `L` MB: `compute_s_per_unit = L / compute_mb_s` and
//! `link_s_per_unit = L / bandwidth_mb_s`. Only the ratios matter for the fractions; the times
//! scale with the load.

use crate::error::bad_input;
use crate::input::at_place;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;
use windrose_model::NodeId;
use windrose_trees::Tree;

/// Per-node and per-link times read from a speeds file, indexed by node id, checked against the
/// tree: every node has a positive finite compute time, every non-root node a finite
/// non-negative link time (the root's entry is 0 and unused).
#[derive(Debug, Clone, PartialEq)]
pub struct Speeds {
    /// Seconds node `n` needs to process the whole load alone.
    pub compute_s_per_unit: Vec<f64>,
    /// Seconds to send the whole load over the link from `n`'s parent to `n`.
    pub link_s_per_unit: Vec<f64>,
}

/// The two spellings of a speeds file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Toml,
    Csv,
}

/// 1-based line and column (0 when unknown).
#[derive(Clone, Copy, Debug, Default)]
struct Loc {
    line: usize,
    col: usize,
}

/// What an entry is about: a node, or a link named by both ends.
#[derive(Clone, Copy, Debug)]
enum Key {
    Node(u32),
    Link { parent: u32, child: u32 },
}

/// One `key = seconds` entry and where it was written.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Key,
    key_at: Loc,
    value: f64,
    value_at: Loc,
}

/// The entries of one table (`compute_s_per_unit` or `link_s_per_unit`) in file order.
#[derive(Debug, Default)]
struct Table {
    entries: Vec<Entry>,
    /// Where the table starts (TOML), for "no entry for node N" errors.
    at: Option<Loc>,
    /// CSV: the line of every node, with the column of this table's field.
    rows: BTreeMap<u32, Loc>,
}

/// A speeds file as written, before it is checked against the tree.
#[derive(Debug)]
struct Raw {
    format: Format,
    compute: Table,
    link: Table,
}

/// Reads `path` and checks it against `tree` (read from `tree_path`, named in errors).
pub fn load(path: &Path, tree: &Tree, tree_path: &Path) -> anyhow::Result<Speeds> {
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("toml") => Format::Toml,
        Some(e) if e.eq_ignore_ascii_case("csv") => Format::Csv,
        _ => {
            return Err(bad_input(at_place(
                path,
                0,
                0,
                "a speeds file must end in .toml or .csv (see `windrose dlt --help`)",
            )))
        }
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let raw = match format {
        Format::Toml => parse_toml(text, path)?,
        Format::Csv => parse_csv(text, path)?,
    };
    resolve(raw, tree, path, tree_path)
}

/// 1-based (line, column) of a byte offset; columns count characters.
fn line_col(text: &str, offset: usize) -> Loc {
    let mut off = offset.min(text.len());
    while !text.is_char_boundary(off) {
        off -= 1;
    }
    let before = &text[..off];
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    Loc {
        line: before.matches('\n').count() + 1,
        col: text[line_start..off].chars().count() + 1,
    }
}

fn err_at(path: &Path, at: Loc, msg: &str) -> anyhow::Error {
    bad_input(at_place(path, at.line, at.col, msg))
}

type TomlTable = Spanned<BTreeMap<Spanned<String>, Spanned<f64>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlDoc {
    compute_s_per_unit: Option<TomlTable>,
    link_s_per_unit: Option<TomlTable>,
}

/// A TOML key: `3` (a node) or `0-3` / `0->3` (a link).
fn parse_key(s: &str) -> Option<Key> {
    let s = s.trim();
    let id = |t: &str| t.trim().parse::<u32>().ok();
    match s.split_once("->").or_else(|| s.split_once('-')) {
        Some((p, c)) => Some(Key::Link {
            parent: id(p)?,
            child: id(c)?,
        }),
        None => id(s).map(Key::Node),
    }
}

fn parse_toml(text: &str, path: &Path) -> anyhow::Result<Raw> {
    let span_loc = |span: Range<usize>| line_col(text, span.start);
    let doc: TomlDoc = toml::from_str(text).map_err(|e| {
        let at = e.span().map(&span_loc).unwrap_or_default();
        let message: Vec<&str> = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        err_at(path, at, &message.join(": "))
    })?;
    let table = |t: Option<TomlTable>, name: &str| -> anyhow::Result<Table> {
        let Some(t) = t else {
            return Ok(Table::default());
        };
        let at = span_loc(t.span());
        let mut entries = Vec::new();
        for (k, v) in t.into_inner() {
            let key_at = span_loc(k.span());
            let key = parse_key(k.get_ref()).ok_or_else(|| {
                err_at(
                    path,
                    key_at,
                    &format!(
                        "[{name}]: expected a node id (e.g. `3`){}, found `{}`",
                        if name == "link_s_per_unit" {
                            " or a link `parent-child` (e.g. `0-3`)"
                        } else {
                            ""
                        },
                        k.get_ref()
                    ),
                )
            })?;
            entries.push(Entry {
                key,
                key_at,
                value: *v.get_ref(),
                value_at: span_loc(v.span()),
            });
        }
        entries.sort_by_key(|e| (e.key_at.line, e.key_at.col));
        Ok(Table {
            entries,
            at: Some(at),
            rows: BTreeMap::new(),
        })
    };
    Ok(Raw {
        format: Format::Toml,
        compute: table(doc.compute_s_per_unit, "compute_s_per_unit")?,
        link: table(doc.link_s_per_unit, "link_s_per_unit")?,
    })
}

const CSV_HEADER: [&str; 3] = ["node", "compute_s_per_unit", "link_s_per_unit"];

fn parse_csv(text: &str, path: &Path) -> anyhow::Result<Raw> {
    let mut compute = Table::default();
    let mut link = Table::default();
    let mut header = false;
    for (l, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        if line.trim().is_empty() {
            continue;
        }
        // (trimmed field, its 1-based column)
        let mut fields = Vec::new();
        let mut col = 0;
        for f in line.split(',') {
            let lead = f.chars().take_while(|c| c.is_whitespace()).count();
            fields.push((f.trim(), col + lead + 1));
            col += f.chars().count() + 1;
        }
        let at = |col: usize| Loc { line: l + 1, col };
        if !header {
            let names: Vec<&str> = fields.iter().map(|f| f.0).collect();
            if names.len() != 3
                || names
                    .iter()
                    .zip(CSV_HEADER)
                    .any(|(a, b)| !a.eq_ignore_ascii_case(b))
            {
                return Err(err_at(
                    path,
                    at(1),
                    "expected the header `node,compute_s_per_unit,link_s_per_unit` (seconds for \
                     the whole load) as the first line",
                ));
            }
            header = true;
            continue;
        }
        let [(node, node_col), (comp, comp_col), (lnk, link_col)] = fields[..] else {
            return Err(err_at(
                path,
                at(1),
                &format!(
                    "expected 3 fields `node,compute_s_per_unit,link_s_per_unit`, found {}",
                    fields.len()
                ),
            ));
        };
        let node_id: u32 = node.parse().map_err(|_| {
            err_at(
                path,
                at(node_col),
                &format!("expected a node id, found '{node}'"),
            )
        })?;
        let number = |s: &str, col: usize, what: &str| {
            s.parse::<f64>().map_err(|_| {
                err_at(
                    path,
                    at(col),
                    &format!("{what} of node {node_id}: '{s}' is not a number"),
                )
            })
        };
        compute.entries.push(Entry {
            key: Key::Node(node_id),
            key_at: at(node_col),
            value: number(comp, comp_col, "compute_s_per_unit")?,
            value_at: at(comp_col),
        });
        compute.rows.entry(node_id).or_insert(at(comp_col));
        link.rows.entry(node_id).or_insert(at(link_col));
        if !(lnk == "-" || lnk.is_empty()) {
            link.entries.push(Entry {
                key: Key::Node(node_id),
                key_at: at(node_col),
                value: number(lnk, link_col, "link_s_per_unit")?,
                value_at: at(link_col),
            });
        }
    }
    if !header {
        return Err(err_at(
            path,
            Loc::default(),
            "empty file: expected the header `node,compute_s_per_unit,link_s_per_unit` and one \
             line per node",
        ));
    }
    Ok(Raw {
        format: Format::Csv,
        compute,
        link,
    })
}

/// Checks the entries against the tree and lays them out by node id.
fn resolve(raw: Raw, tree: &Tree, path: &Path, tree_path: &Path) -> anyhow::Result<Speeds> {
    let n = tree.node_count();
    let tree_file = tree_path.display();
    let nodes = format!("nodes 0 to {}", n.saturating_sub(1));
    let not_in_tree = |node: u32| format!("node {node} is not in the tree {tree_file} ({nodes})");
    let mut compute = vec![0.0; n];
    let mut have = vec![false; n];
    for e in &raw.compute.entries {
        let node = match e.key {
            Key::Node(node) => node,
            Key::Link { parent, child } => {
                return Err(err_at(
                    path,
                    e.key_at,
                    &format!(
                        "[compute_s_per_unit] is keyed by node, found the link `{parent}-{child}` \
                         (links go in [link_s_per_unit])"
                    ),
                ))
            }
        };
        let i = node as usize;
        if i >= n || !tree.contains(NodeId(node)) {
            return Err(err_at(path, e.key_at, &not_in_tree(node)));
        }
        if std::mem::replace(&mut have[i], true) {
            return Err(err_at(
                path,
                e.key_at,
                &format!("node {node} is given more than once"),
            ));
        }
        if !(e.value.is_finite() && e.value > 0.0) {
            return Err(err_at(
                path,
                e.value_at,
                &format!(
                    "compute_s_per_unit of node {node} must be a positive finite number of \
                     seconds, got {}",
                    e.value
                ),
            ));
        }
        compute[i] = e.value;
    }
    let mut link = vec![0.0; n];
    let mut have_link = vec![false; n];
    for e in &raw.link.entries {
        let (given_parent, child) = match e.key {
            Key::Node(c) => (None, c),
            Key::Link { parent, child } => (Some(parent), child),
        };
        let i = child as usize;
        if i >= n || !tree.contains(NodeId(child)) {
            return Err(err_at(path, e.key_at, &not_in_tree(child)));
        }
        let Some(parent) = tree.parent(NodeId(child)) else {
            let hint = match raw.format {
                Format::Toml => "leave it out of [link_s_per_unit]",
                Format::Csv => "write `-`",
            };
            return Err(err_at(
                path,
                match raw.format {
                    Format::Toml => e.key_at,
                    Format::Csv => e.value_at,
                },
                &format!(
                    "node {child} is the root of the tree: nothing is sent to it, so it has no \
                     link_s_per_unit ({hint})"
                ),
            ));
        };
        if let Some(p) = given_parent {
            if p != parent.0 {
                return Err(err_at(
                    path,
                    e.key_at,
                    &format!(
                        "no link {p}-{child} in the tree {tree_file}: the parent of node {child} \
                         is {parent}"
                    ),
                ));
            }
        }
        if std::mem::replace(&mut have_link[i], true) {
            return Err(err_at(
                path,
                e.key_at,
                &format!("the link {parent}-{child} is given more than once"),
            ));
        }
        if !(e.value.is_finite() && e.value >= 0.0) {
            return Err(err_at(
                path,
                e.value_at,
                &format!(
                    "link_s_per_unit of the link {parent}-{child} must be a finite number of \
                     seconds >= 0, got {}",
                    e.value
                ),
            ));
        }
        link[i] = e.value;
    }
    // Every node of the tree needs its numbers.
    for &u in tree.nodes() {
        let i = u.index();
        if !have[i] {
            return Err(match (raw.format, raw.compute.at) {
                (Format::Toml, Some(at)) => err_at(
                    path,
                    at,
                    &format!(
                        "[compute_s_per_unit] has no entry for node {u} (every node of the tree \
                         needs one)"
                    ),
                ),
                (Format::Toml, None) => err_at(
                    path,
                    Loc::default(),
                    "no [compute_s_per_unit] table: every node of the tree needs the seconds it \
                     takes to process the whole load",
                ),
                (Format::Csv, _) => err_at(
                    path,
                    Loc::default(),
                    &format!(
                        "no line for node {u} of the tree {tree_file} (every node needs \
                         `node,compute_s_per_unit,link_s_per_unit`)"
                    ),
                ),
            });
        }
        if let Some(p) = tree.parent(u) {
            if !have_link[i] {
                let what = format!("the link {p}-{u}");
                return Err(match (raw.format, raw.link.at) {
                    (Format::Csv, _) => err_at(
                        path,
                        raw.link.rows.get(&u.0).copied().unwrap_or_default(),
                        &format!(
                            "node {u} is not the root (its parent is {p}): it needs a \
                             link_s_per_unit, only the root's is `-`"
                        ),
                    ),
                    (Format::Toml, Some(at)) => err_at(
                        path,
                        at,
                        &format!("[link_s_per_unit] has no entry for node {u} ({what})"),
                    ),
                    (Format::Toml, None) => err_at(
                        path,
                        Loc::default(),
                        &format!(
                            "no [link_s_per_unit] table: every node but the root needs the \
                             seconds its link takes to carry the whole load (first: {what})"
                        ),
                    ),
                });
            }
        }
    }
    Ok(Speeds {
        compute_s_per_unit: compute,
        link_s_per_unit: link,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn star() -> Tree {
        let n = NodeId;
        Tree::from_edges(3, n(0), &[(n(1), n(0)), (n(2), n(0))]).unwrap()
    }

    fn write(ext: &str, text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(ext).tempfile().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn load_str(ext: &str, text: &str) -> anyhow::Result<Speeds> {
        let f = write(ext, text);
        load(f.path(), &star(), Path::new("tree.csv"))
    }

    fn err(ext: &str, text: &str) -> String {
        format!("{:#}", load_str(ext, text).unwrap_err())
    }

    #[test]
    fn toml_and_csv_agree() {
        let t = load_str(
            ".toml",
            "[compute_s_per_unit]\n0 = 1\n1 = 2.5\n2 = 3\n[link_s_per_unit]\n1 = 20\n0-2 = 0\n",
        )
        .unwrap();
        let c = load_str(
            ".csv",
            "# comment\nnode, compute_s_per_unit, link_s_per_unit\n0,1,-\n1,2.5,20 # x\n2,3,0\n",
        )
        .unwrap();
        assert_eq!(t, c);
        assert_eq!(t.compute_s_per_unit, [1.0, 2.5, 3.0]);
        assert_eq!(t.link_s_per_unit, [0.0, 20.0, 0.0]);
        // Inline tables and the `->` spelling.
        let i = load_str(
            ".toml",
            "compute_s_per_unit = { 0 = 1, 1 = 2.5, 2 = 3 }\n\
             link_s_per_unit = { \"0->1\" = 20, 2 = 0 }\n",
        )
        .unwrap();
        assert_eq!(i, t);
    }

    #[test]
    fn toml_errors_name_line_and_column() {
        const C: &str = "[compute_s_per_unit]\n0 = 1\n1 = 1\n2 = 1\n";
        const L: &str = "[link_s_per_unit]\n1 = 1\n2 = 1\n";
        assert!(load_str(".toml", &format!("{C}{L}")).is_ok());
        let cases = [
            (
                format!("{}{L}", C.replace("1 = 1", "1 = 0")),
                ":3:5: compute_s_per_unit of node 1 must be a positive finite number of seconds, \
                 got 0",
            ),
            (
                format!("{}{L}", C.replace("2 = 1", "2 = nan")),
                ":4:5: compute_s_per_unit of node 2 must be a positive finite number of seconds, \
                 got NaN",
            ),
            (
                format!("{C}{}", L.replace("2 = 1", "2 = -1")),
                ":7:5: link_s_per_unit of the link 0-2 must be a finite number of seconds >= 0, \
                 got -1",
            ),
            (
                format!("{C}{L}9 = 1\n"),
                ":8:1: node 9 is not in the tree tree.csv (nodes 0 to 2)",
            ),
            (
                format!("{C}{L}0 = 1\n"),
                ":8:1: node 0 is the root of the tree",
            ),
            (
                format!("{C}{}", L.replace("2 = 1", "1-2 = 1")),
                ":7:1: no link 1-2 in the tree tree.csv: the parent of node 2 is 0",
            ),
            (
                format!("{}{L}", C.replace("2 = 1\n", "")),
                ":1:1: [compute_s_per_unit] has no entry for node 2 (every node of the tree",
            ),
            (
                format!("{C}{}", L.replace("2 = 1\n", "")),
                ":5:1: [link_s_per_unit] has no entry for node 2 (the link 0-2)",
            ),
            (C.to_string(), ": no [link_s_per_unit] table"),
            (L.to_string(), ": no [compute_s_per_unit] table"),
            (
                format!("{C}{L}0-1 = 1\n"),
                ":8:1: the link 0-1 is given more than once",
            ),
            (
                format!("{C}01 = 1\n{L}"),
                ":5:1: node 1 is given more than once",
            ),
            (
                format!("{C}0-1 = 1\n{L}"),
                ":5:1: [compute_s_per_unit] is keyed by node, found the link `0-1`",
            ),
            (
                "[compute_s_per_unit]\nx = 1\n".into(),
                ":2:1: [compute_s_per_unit]: expected a node id (e.g. `3`), found `x`",
            ),
            ("[compute_s_per_unit]\n0 = \"fast\"\n".into(), ":2:5: "),
            (
                "[compute_mb_s]\n0 = 1\n".into(),
                ":1:2: unknown field `compute_mb_s`",
            ),
            ("[compute_s_per_unit\n".into(), ":1:"),
        ];
        for (text, expected) in cases {
            let e = err(".toml", &text);
            assert!(e.contains(expected), "{text}\n=> {e}\nexpected {expected}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn csv_errors_name_line_and_column() {
        let h = "node,compute_s_per_unit,link_s_per_unit\n";
        let e = err(".csv", "0,1,-\n");
        assert!(e.contains(":1:1: expected the header"), "{e}");
        let e = err(".csv", &format!("{h}0,1,-\n1,1,1\n2, 0,1\n"));
        assert!(e.ends_with(":4:4: compute_s_per_unit of node 2 must be a positive finite number of seconds, got 0"), "{e}");
        let e = err(".csv", &format!("{h}0,1,-\n1,1,1\n2,1,-\n"));
        assert!(
            e.contains(":4:5: node 2 is not the root (its parent is 0)"),
            "{e}"
        );
        let e = err(".csv", &format!("{h}0,1,3\n1,1,1\n2,1,1\n"));
        assert!(e.contains(":2:5: node 0 is the root of the tree"), "{e}");
        let e = err(".csv", &format!("{h}0,1,-\n1,1,1\n"));
        assert!(e.contains("no line for node 2"), "{e}");
        let e = err(".csv", &format!("{h}0,1,-\n1,1,x\n"));
        assert!(
            e.contains(":3:5: link_s_per_unit of node 1: 'x' is not a number"),
            "{e}"
        );
        let e = err(".csv", &format!("{h}0,1,-\n1,1,1,\n"));
        assert!(e.contains(":3:1: expected 3 fields"), "{e}");
        let e = err(".csv", &format!("{h}0,1,-\n1,1,-2\n2,1,1\n"));
        assert!(e.contains(":3:5: link_s_per_unit of the link 0-1 must be a finite number of seconds >= 0, got -2"), "{e}");
        let e = err(".csv", &format!("{h}0,1,-\n1,1,1\n2,1,1\n2,1,1\n"));
        assert!(e.contains(":5:1: node 2 is given more than once"), "{e}");
        let e = err(".txt", "");
        assert!(e.contains("must end in .toml or .csv"), "{e}");
        let e = err(".csv", "# nothing\n");
        assert!(e.contains("empty file"), "{e}");
    }
}
