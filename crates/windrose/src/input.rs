//! Reading what the user gives the commands: the cost model (a file, or the paper's Table 1 when
//! none is given), cluster assignments, tree files (binomial positions, or any rooted tree as
//! `node,parent` lines or `tree build --json`) and `--raise` specifications. Every problem
//! becomes a [`crate::error::BadInput`] naming the file, line and column.

use crate::error::{bad_input, OrBadInput};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use windrose_model::load::{load_clusters, load_costs, CostModel};
use windrose_model::{fixtures, ClusterId, LinkCosts, NodeId};
use windrose_trees::Tree;

/// Where the cost model came from, as shown in output headers.
pub const DEFAULT_COSTS: &str =
    "built-in default, Table 1 of Figueira & Mendes (pass --costs FILE for your own network)";

/// A loaded cost model and a description of its source.
pub struct Costs {
    /// The model.
    pub model: CostModel,
    /// The file it came from, or [`DEFAULT_COSTS`].
    pub source: String,
}

/// Loads `--costs FILE`, or the paper's Table 1 when no file is given.
pub fn costs(path: Option<&Path>) -> anyhow::Result<Costs> {
    Ok(match path {
        Some(p) => Costs {
            model: load_costs(p).or_bad_input()?,
            source: p.display().to_string(),
        },
        None => Costs {
            model: CostModel::Dense(fixtures::table1()),
            source: DEFAULT_COSTS.to_string(),
        },
    })
}

/// The clusters for cluster-aware algorithms: `--clusters FILE` when given, else the model's own
/// clusters when it is a cluster model, else none.
pub fn clusters(path: Option<&Path>, model: &CostModel) -> anyhow::Result<Option<Vec<ClusterId>>> {
    Ok(match (path, model) {
        (Some(p), _) => Some(load_clusters(p, model.node_count()).or_bad_input()?),
        (None, CostModel::Cluster(c)) => Some(c.clusters().to_vec()),
        (None, CostModel::Dense(_)) => None,
    })
}

/// Checks a node id given on the command line against the model.
pub fn node(costs: &impl LinkCosts, node: u32, what: &str) -> anyhow::Result<NodeId> {
    let node = NodeId(node);
    costs.check_node(node).or_bad_input_about(what)?;
    Ok(node)
}

/// The part of a `tree build --json` file that `tree adapt` reads.
#[derive(Deserialize)]
struct TreeJson {
    positions: Option<Vec<u32>>,
}

/// Reads a binomial tree as the node at each position: either the JSON written by
/// `tree build --json` / `tree adapt --json` (its `positions` array), or plain text listing node
/// ids in position order, separated by commas or whitespace, with `#` starting a comment.
/// Ids are checked against `node_count` and for repeats.
pub fn tree_positions(path: &Path, node_count: usize) -> anyhow::Result<Vec<NodeId>> {
    let text =
        std::fs::read_to_string(path).or_bad_input_about(format_args!("{}", path.display()))?;
    let at = |line: usize, col: usize, msg: String| bad_input(at_place(path, line, col, &msg));
    // (node, line, column) of every entry; line 0 when the format has no lines (JSON).
    let mut entries: Vec<(u32, usize, usize)> = Vec::new();
    if text.trim_start().starts_with('{') {
        let tree: TreeJson =
            serde_json::from_str(&text).map_err(|e| at(e.line(), e.column(), json_message(&e)))?;
        let positions = tree.positions.ok_or_else(|| {
            at(
                0,
                0,
                "no \"positions\" array: tree adapt needs a binomial-shaped tree \
                      (from tree build --algo balanced-path or binomial)"
                    .into(),
            )
        })?;
        entries.extend(positions.into_iter().map(|n| (n, 0, 0)));
    } else {
        for (l, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            let mut col = 0;
            for token in line.split(|c: char| c == ',' || c.is_whitespace()) {
                let token_col = col + 1;
                col += token.len() + 1;
                if token.is_empty() {
                    continue;
                }
                let id: u32 = token.parse().map_err(|_| {
                    at(
                        l + 1,
                        token_col,
                        format!("expected a node id, found '{token}'"),
                    )
                })?;
                entries.push((id, l + 1, token_col));
            }
        }
    }
    if entries.is_empty() {
        return Err(at(
            0,
            0,
            "no node ids: expected the node at each position, e.g. '0 5 7 4 3 2 6 1'".into(),
        ));
    }
    let mut seen = vec![false; node_count];
    for (position, &(id, line, col)) in entries.iter().enumerate() {
        let place = |msg: String| {
            if line == 0 {
                at(0, 0, format!("positions[{position}]: {msg}"))
            } else {
                at(line, col, msg)
            }
        };
        match seen.get_mut(id as usize) {
            None => {
                return Err(place(format!(
                    "unknown node {id}: the cost model has {node_count} nodes ({})",
                    windrose_model::error::ids_in_words(node_count)
                )))
            }
            Some(true) => return Err(place(format!("node {id} appears more than once"))),
            Some(s) => *s = true,
        }
    }
    Ok(entries.into_iter().map(|(id, _, _)| NodeId(id)).collect())
}

/// `file:line:col: message`, leaving out a zero line or column (as [`windrose_model::ModelError`]
/// does).
pub(crate) fn at_place(path: &Path, line: usize, col: usize, msg: &str) -> String {
    windrose_model::ModelError::File {
        path: PathBuf::from(path),
        line,
        column: col,
        message: msg.to_string(),
    }
    .to_string()
}

/// serde_json's message without its own " at line L column C" suffix (we print `file:L:C:`).
pub(crate) fn json_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    }
}

/// Where `--order given` takes each parent's send order from, for a tree read by
/// [`parent_tree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOrderSource {
    /// The `children` lists of a `tree build --json` file.
    ChildrenLists,
    /// Ascending child id (a JSON file without `children` lists).
    AscendingId,
    /// The order of the lines of a `node,parent` text file.
    FileOrder,
}

impl SendOrderSource {
    /// For output headers.
    pub fn describe(self) -> &'static str {
        match self {
            SendOrderSource::ChildrenLists => "the tree file's `children` lists",
            SendOrderSource::AscendingId => "ascending child id (the tree file has no `children`)",
            SendOrderSource::FileOrder => "the order of the tree file's lines",
        }
    }
}

/// A rooted tree read by [`parent_tree`]: ids `0..N` (every one a member), children in the
/// file's send order.
pub struct ParentTree {
    /// The tree.
    pub tree: Tree,
    /// Where the children's order came from.
    pub send_order: SendOrderSource,
}

/// The parts of a `tree build --json` file that [`parent_tree`] reads.
#[derive(Deserialize)]
struct ParentsJson {
    parents: Option<Vec<Option<u32>>>,
    children: Option<Vec<Vec<u32>>>,
}

/// Where a node or parent id was written, for error messages.
#[derive(Clone, Copy)]
enum Place {
    /// Line and column of a text file (1-based).
    Text { line: usize, col: usize },
    /// `parents[i]` of a JSON file (serde_json keeps no positions for values it accepted).
    Parents(usize),
}

/// One `node,parent` entry of a tree file.
struct TreeEntry {
    node: u32,
    parent: Option<u32>,
    node_at: Place,
    parent_at: Place,
}

/// `file:line:col: message` for a [`Place`].
fn place_error(path: &Path, at: Place, msg: &str) -> anyhow::Error {
    bad_input(match at {
        Place::Text { line, col } => at_place(path, line, col, msg),
        Place::Parents(i) => at_place(path, 0, 0, &format!("parents[{i}]: {msg}")),
    })
}

/// Reads a rooted tree over nodes `0..N`, either
///
/// - the JSON of `windrose tree build --json`: its `parents` array (indexed by node id, the
///   parent's id or `null` for the root) and, when present, its `children` array (indexed by node
///   id, each node's children in send order); other fields are ignored; or
/// - plain text, one `node,parent` pair per line (comma and/or whitespace separated), `-` as the
///   root's parent, `#` starting a comment, an optional `node,parent` header. Each parent's
///   children are in the order of their lines.
///
/// Every id `0..N` must appear exactly once, exactly one node is the root, every parent is a node
/// of the file and every node is connected to the root (no cycles).
pub fn parent_tree(path: &Path) -> anyhow::Result<ParentTree> {
    let text =
        std::fs::read_to_string(path).or_bad_input_about(format_args!("{}", path.display()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let at = |line: usize, col: usize, msg: String| bad_input(at_place(path, line, col, &msg));
    if text.trim_start().starts_with('{') {
        let doc: ParentsJson =
            serde_json::from_str(text).map_err(|e| at(e.line(), e.column(), json_message(&e)))?;
        let parents = doc.parents.ok_or_else(|| {
            at(
                0,
                0,
                "no \"parents\" array: expected the JSON of `windrose tree build --json` \
                 (or a text file of `node,parent` lines)"
                    .into(),
            )
        })?;
        let entries: Vec<TreeEntry> = parents
            .iter()
            .enumerate()
            .map(|(i, &parent)| TreeEntry {
                node: i as u32,
                parent,
                node_at: Place::Parents(i),
                parent_at: Place::Parents(i),
            })
            .collect();
        let (root, parent) = check_tree_entries(path, &entries)?;
        let (edges, send_order) = match doc.children {
            Some(children) => (
                json_children_edges(path, &parent, root, &children)?,
                SendOrderSource::ChildrenLists,
            ),
            None => (
                (0..parent.len())
                    .filter_map(|c| parent[c].map(|p| (NodeId::from(c), NodeId(p))))
                    .collect(),
                SendOrderSource::AscendingId,
            ),
        };
        let tree = Tree::from_edges(parent.len(), NodeId(root), &edges)
            .or_bad_input_about(path.display())?;
        return Ok(ParentTree { tree, send_order });
    }
    let mut entries = Vec::new();
    for (l, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let mut tokens = Vec::new();
        let mut col = 0;
        for token in line.split(|c: char| c == ',' || c.is_whitespace()) {
            let token_col = col + 1;
            col += token.chars().count() + 1;
            if !token.is_empty() {
                tokens.push((token, token_col));
            }
        }
        if tokens.is_empty() {
            continue;
        }
        let [(node, node_col), (parent, parent_col)] = tokens[..] else {
            return Err(at(
                l + 1,
                1,
                format!(
                    "expected `node,parent` (two ids, the root's parent `-`), found {} field{}",
                    tokens.len(),
                    if tokens.len() == 1 { "" } else { "s" }
                ),
            ));
        };
        if entries.is_empty()
            && node.eq_ignore_ascii_case("node")
            && parent.eq_ignore_ascii_case("parent")
        {
            continue; // header
        }
        let id = |token: &str, col: usize, what: &str| {
            token
                .parse::<u32>()
                .map_err(|_| at(l + 1, col, format!("expected {what}, found '{token}'")))
        };
        entries.push(TreeEntry {
            node: id(node, node_col, "a node id")?,
            parent: match parent {
                "-" => None,
                p => Some(id(p, parent_col, "a parent id or `-` for the root")?),
            },
            node_at: Place::Text {
                line: l + 1,
                col: node_col,
            },
            parent_at: Place::Text {
                line: l + 1,
                col: parent_col,
            },
        });
    }
    let (root, parent) = check_tree_entries(path, &entries)?;
    let edges: Vec<(NodeId, NodeId)> = entries
        .iter()
        .filter_map(|e| e.parent.map(|p| (NodeId(e.node), NodeId(p))))
        .collect();
    let tree =
        Tree::from_edges(parent.len(), NodeId(root), &edges).or_bad_input_about(path.display())?;
    Ok(ParentTree {
        tree,
        send_order: SendOrderSource::FileOrder,
    })
}

/// Checks that `entries` describe a tree over `0..N` (`N = entries.len()`): every id once, one
/// root, every parent a node, everybody connected to the root. Returns the root and each node's
/// parent, indexed by id.
fn check_tree_entries(
    path: &Path,
    entries: &[TreeEntry],
) -> anyhow::Result<(u32, Vec<Option<u32>>)> {
    let n = entries.len();
    if n == 0 {
        return Err(bad_input(at_place(
            path,
            0,
            0,
            "no nodes: expected `node,parent` lines (the root's parent `-`) or the JSON of \
             `windrose tree build --json`",
        )));
    }
    let last = n - 1;
    // Entry index of each id; ids must be dense.
    let mut slot: Vec<Option<usize>> = vec![None; n];
    for (i, e) in entries.iter().enumerate() {
        match slot.get_mut(e.node as usize) {
            None => {
                return Err(place_error(
                    path,
                    e.node_at,
                    &format!(
                        "node {} is out of range: the {n} nodes of a tree file must be numbered \
                         0 to {last}, one entry each",
                        e.node
                    ),
                ))
            }
            Some(Some(first)) => {
                let first = match entries[*first].node_at {
                    Place::Text { line, .. } => format!(" (first on line {line})"),
                    Place::Parents(_) => String::new(),
                };
                return Err(place_error(
                    path,
                    e.node_at,
                    &format!("node {} appears more than once{first}", e.node),
                ));
            }
            Some(s) => *s = Some(i),
        }
    }
    let mut parent = vec![None; n];
    let mut root: Option<&TreeEntry> = None;
    for e in entries {
        match e.parent {
            None => {
                if let Some(r) = root {
                    let first = match r.node_at {
                        Place::Text { line, .. } => format!(" (line {line})"),
                        Place::Parents(i) => format!(" (parents[{i}] is null too)"),
                    };
                    return Err(place_error(
                        path,
                        e.parent_at,
                        &format!(
                            "a second root: node {} has no parent but node {}{first} is \
                             already the root",
                            e.node, r.node
                        ),
                    ));
                }
                root = Some(e);
            }
            Some(p) if p as usize >= n => {
                return Err(place_error(
                    path,
                    e.parent_at,
                    &format!(
                        "the parent {p} of node {} is not a node of the tree (nodes 0 to {last})",
                        e.node
                    ),
                ))
            }
            Some(p) if p == e.node => {
                return Err(place_error(
                    path,
                    e.parent_at,
                    &format!("node {p} is its own parent"),
                ))
            }
            Some(p) => parent[e.node as usize] = Some(p),
        }
    }
    let Some(root) = root.map(|r| r.node) else {
        return Err(bad_input(at_place(
            path,
            0,
            0,
            "no root: every node has a parent (give the root the parent `-`, or null in JSON)",
        )));
    };
    // Reach every node from the root through the parent links, reversed.
    let mut children = vec![Vec::new(); n];
    for (c, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[*p as usize].push(c as u32);
        }
    }
    let mut reached = vec![false; n];
    reached[root as usize] = true;
    let mut stack = vec![root];
    while let Some(u) = stack.pop() {
        for &c in &children[u as usize] {
            reached[c as usize] = true;
            stack.push(c);
        }
    }
    if let Some(e) = entries.iter().find(|e| !reached[e.node as usize]) {
        // Its parent chain never reaches the root, so it runs into a cycle.
        let mut chain = vec![e.node];
        let mut seen = vec![false; n];
        seen[e.node as usize] = true;
        let mut u = e.node;
        while let Some(p) = parent[u as usize] {
            chain.push(p);
            if std::mem::replace(&mut seen[p as usize], true) {
                break;
            }
            u = p;
        }
        let shown: Vec<String> = chain.iter().take(8).map(u32::to_string).collect();
        let more = if chain.len() > 8 { " -> ..." } else { "" };
        return Err(place_error(
            path,
            e.node_at,
            &format!(
                "node {} is not connected to the root {root}: its parents form a cycle ({}{more})",
                e.node,
                shown.join(" -> ")
            ),
        ));
    }
    Ok((root, parent))
}

/// The edges of a JSON tree in the send order of its `children` lists, after checking that the
/// lists agree with `parents` (same length, every non-root node listed once, under its parent).
fn json_children_edges(
    path: &Path,
    parent: &[Option<u32>],
    root: u32,
    children: &[Vec<u32>],
) -> anyhow::Result<Vec<(NodeId, NodeId)>> {
    let n = parent.len();
    let err = |msg: String| bad_input(at_place(path, 0, 0, &msg));
    if children.len() != n {
        return Err(err(format!(
            "\"children\" has {} entries but \"parents\" has {n}: both are indexed by node id",
            children.len()
        )));
    }
    let mut listed = vec![false; n];
    let mut edges = Vec::with_capacity(n.saturating_sub(1));
    for (p, kids) in children.iter().enumerate() {
        for (j, &c) in kids.iter().enumerate() {
            let here = format!("children[{p}][{j}]");
            let Some(&c_parent) = parent.get(c as usize) else {
                return Err(err(format!(
                    "{here}: node {c} is not a node of the tree (nodes 0 to {})",
                    n - 1
                )));
            };
            if c_parent != Some(p as u32) {
                let actual = c_parent.map_or("null (the root)".to_string(), |q| q.to_string());
                return Err(err(format!(
                    "{here}: node {c} is listed as a child of {p} but parents[{c}] is {actual}"
                )));
            }
            if std::mem::replace(&mut listed[c as usize], true) {
                return Err(err(format!("{here}: node {c} is listed twice")));
            }
            edges.push((NodeId(c), NodeId(p as u32)));
        }
    }
    if let Some(c) = (0..n).find(|&c| c != root as usize && !listed[c]) {
        let p = parent[c].unwrap_or(root);
        return Err(err(format!(
            "node {c} is missing from children[{p}] (parents[{c}] is {p})"
        )));
    }
    Ok(edges)
}

/// `--raise A,B,FACTOR`: the link A–B becomes FACTOR times as costly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Raise {
    /// One end of the link.
    pub a: u32,
    /// The other end.
    pub b: u32,
    /// New cost = old cost × factor (finite, > 0).
    pub factor: f64,
}

/// Parses `A,B,FACTOR`.
pub fn raise(spec: &str) -> anyhow::Result<Raise> {
    let usage =
        "expected A,B,FACTOR (two node ids and a positive cost factor), e.g. --raise 0,3,2.5";
    let fail = |why: &str| bad_input(format!("--raise '{spec}': {why}"));
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    let [a, b, factor] = parts[..] else {
        return Err(fail(usage));
    };
    let id = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| fail(&format!("'{s}' is not a node id; {usage}")))
    };
    let (a, b) = (id(a)?, id(b)?);
    let factor: f64 = factor
        .parse()
        .map_err(|_| fail(&format!("'{factor}' is not a number; {usage}")))?;
    if !(factor.is_finite() && factor > 0.0) {
        return Err(fail("the factor must be a finite number greater than 0"));
    }
    if a == b {
        return Err(fail("a link needs two different nodes"));
    }
    Ok(Raise { a, b, factor })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn reads_plain_and_json_trees() {
        let f = write("# paper tree\n0, 5 7 4\n3 2 6 1 # last\n");
        let ids: Vec<u32> = tree_positions(f.path(), 8)
            .unwrap()
            .iter()
            .map(|n| n.0)
            .collect();
        assert_eq!(ids, [0, 5, 7, 4, 3, 2, 6, 1]);
        let f = write(r#"{"algorithm": "balanced-path", "positions": [0, 2, 1]}"#);
        assert_eq!(tree_positions(f.path(), 3).unwrap().len(), 3);
    }

    #[test]
    fn tree_errors_name_the_place() {
        let f = write("0 1\n2 x\n");
        let e = tree_positions(f.path(), 8).unwrap_err().to_string();
        assert!(e.ends_with(":2:3: expected a node id, found 'x'"), "{e}");
        let f = write("0 1\n 9\n");
        let e = tree_positions(f.path(), 8).unwrap_err().to_string();
        assert!(e.contains(":2:2: unknown node 9"), "{e}");
        let f = write("0 1 1\n");
        let e = tree_positions(f.path(), 8).unwrap_err().to_string();
        assert!(e.contains(":1:5: node 1 appears more than once"), "{e}");
        let f = write("{\"positions\": [0,\n 1,]}");
        let e = tree_positions(f.path(), 8).unwrap_err().to_string();
        assert!(e.contains(":2:"), "{e}");
        let f = write("# nothing\n");
        assert!(tree_positions(f.path(), 8).is_err());
    }

    fn tree_of(text: &str) -> anyhow::Result<ParentTree> {
        parent_tree(write(text).path())
    }

    fn children(t: &Tree, n: u32) -> Vec<u32> {
        t.children(NodeId(n)).iter().map(|c| c.0).collect()
    }

    #[test]
    fn reads_parent_trees() {
        // Text: header, comments, whitespace or commas; children in line order.
        let t = tree_of("# a tree\nnode,parent\n2 0\n0,-\n3, 0 # late\n1,0\n\n").unwrap();
        assert_eq!(t.send_order, SendOrderSource::FileOrder);
        assert_eq!(t.tree.root(), NodeId(0));
        assert_eq!(children(&t.tree, 0), [2, 3, 1]);
        // JSON with children lists: their order.
        let t =
            tree_of(r#"{"parents": [1, null, 1, 0], "children": [[3], [2, 0], [], []]}"#).unwrap();
        assert_eq!(t.send_order, SendOrderSource::ChildrenLists);
        assert_eq!(t.tree.root(), NodeId(1));
        assert_eq!(children(&t.tree, 1), [2, 0]);
        // JSON without: ascending id.
        let t = tree_of(r#"{"algorithm": "x", "parents": [null, 0, 0, 0]}"#).unwrap();
        assert_eq!(t.send_order, SendOrderSource::AscendingId);
        assert_eq!(children(&t.tree, 0), [1, 2, 3]);
        // A single node.
        assert_eq!(tree_of("0,-\n").unwrap().tree.len(), 1);
    }

    #[test]
    fn parent_tree_errors_name_the_place() {
        let cases = [
            (
                "0,-\n1,0\n1,0\n",
                ":3:1: node 1 appears more than once (first on line 2)",
            ),
            (
                "0,-\n1,0\n5,0\n",
                ":3:1: node 5 is out of range: the 3 nodes of a tree file",
            ),
            (
                "0,-\n1,0\n2,-\n",
                ":3:3: a second root: node 2 has no parent but node 0 (line 1)",
            ),
            ("0,1\n1,0\n", ": no root: every node has a parent"),
            (
                "0,-\n1,7\n",
                ":2:3: the parent 7 of node 1 is not a node of the tree (nodes 0 to 1)",
            ),
            ("0,-\n1,1\n", ":2:3: node 1 is its own parent"),
            (
                "0,-\n1,0\n2,3\n3,4\n4,2\n",
                ":3:1: node 2 is not connected to the root 0: its parents form a cycle \
                 (2 -> 3 -> 4 -> 2)",
            ),
            (
                "0,-\n1,x\n",
                ":2:3: expected a parent id or `-` for the root, found 'x'",
            ),
            ("0,-\n-1,0\n", ":2:1: expected a node id, found '-1'"),
            (
                "0,-\n1,0,2\n",
                ":2:1: expected `node,parent` (two ids, the root's parent `-`), found 3 fields",
            ),
            ("# empty\n", ": no nodes"),
            (r#"{"parents": [null, 0,]}"#, ":1:"),
            (r#"{"positions": [0, 1]}"#, ": no \"parents\" array"),
            (
                r#"{"parents": [null, null]}"#,
                ": parents[1]: a second root",
            ),
            (r#"{"parents": [1, 0]}"#, ": no root"),
            (
                r#"{"parents": [null, 0, 3, 2]}"#,
                ": parents[2]: node 2 is not connected",
            ),
            (
                r#"{"parents": [null, 0], "children": [[1]]}"#,
                "\"children\" has 1 entries",
            ),
            (
                r#"{"parents": [null, 0, 1], "children": [[1, 2], [], []]}"#,
                ": children[0][1]: node 2 is listed as a child of 0 but parents[2] is 1",
            ),
            (
                r#"{"parents": [null, 0, 0], "children": [[1], [], []]}"#,
                ": node 2 is missing from children[0] (parents[2] is 0)",
            ),
            (
                r#"{"parents": [null, 0], "children": [[1, 1], []]}"#,
                ": children[0][1]: node 1 is listed twice",
            ),
            (
                r#"{"parents": [null, 0], "children": [[9], []]}"#,
                ": children[0][0]: node 9 is not a node of the tree",
            ),
        ];
        for (text, expected) in cases {
            let e = format!("{:#}", tree_of(text).err().expect(text));
            assert!(e.contains(expected), "{text}\n=> {e}\nexpected {expected}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn raise_specs() {
        assert_eq!(
            raise("1, 4,2.5").unwrap(),
            Raise {
                a: 1,
                b: 4,
                factor: 2.5
            }
        );
        for bad in [
            "1,4", "1,4,x", "a,4,2", "1,4,0", "1,4,-2", "1,4,NaN", "1,1,2", "1,4,2,3",
        ] {
            assert!(raise(bad).is_err(), "{bad}");
        }
    }
}
