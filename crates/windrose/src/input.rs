//! Reading what the user gives the tree commands: the cost model (a file, or the paper's Table 1
//! when none is given), cluster assignments, tree files and `--raise` specifications. Every
//! problem becomes a [`crate::error::BadInput`] naming the file, line and column.

use crate::error::{bad_input, OrBadInput};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use windrose_model::load::{load_clusters, load_costs, CostModel};
use windrose_model::{fixtures, ClusterId, LinkCosts, NodeId};

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
                    "unknown node {id}: the cost model has {node_count} nodes (ids 0..{node_count})"
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
fn at_place(path: &Path, line: usize, col: usize, msg: &str) -> String {
    windrose_model::ModelError::File {
        path: PathBuf::from(path),
        line,
        column: col,
        message: msg.to_string(),
    }
    .to_string()
}

/// serde_json's message without its own " at line L column C" suffix (we print `file:L:C:`).
fn json_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    }
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
