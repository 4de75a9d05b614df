//! The physical network SOO lays the sort path over: a mesh of nodes and links (the paper's
//! buses), any of which may have failed, and the store-and-forward cost between live nodes.
//!
//! A message cannot cross a failed node (the paper's assumption) or a failed link. Two nodes
//! that are consecutive on the sort path but not linked directly talk through other live nodes,
//! each of which stores the whole message before forwarding it, so a step costs the sum of the
//! link costs on the cheapest live route between them.

use super::HeteroSortError;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A network of nodes joined by links with integer costs (hops, or a time unit of the
/// caller's choosing); nodes and links can fail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mesh {
    /// Grid shape, when the mesh was built as a grid.
    shape: Option<(usize, usize)>,
    failed: Vec<bool>,
    /// Per node, its links as (other end, cost, failed), in insertion order.
    adj: Vec<Vec<(usize, u32, bool)>>,
}

impl Mesh {
    /// `nodes` nodes and no link yet.
    pub fn with_nodes(nodes: usize) -> Result<Mesh, HeteroSortError> {
        if nodes == 0 {
            return Err(HeteroSortError::EmptyMesh);
        }
        Ok(Mesh {
            shape: None,
            failed: vec![false; nodes],
            adj: vec![Vec::new(); nodes],
        })
    }

    /// A `rows x cols` grid (no wrap-around) with every link costing 1; node
    /// `row * cols + col` sits at (`row`, `col`).
    pub fn grid(rows: usize, cols: usize) -> Result<Mesh, HeteroSortError> {
        if rows == 0 || cols == 0 {
            return Err(HeteroSortError::EmptyMesh);
        }
        let n = rows
            .checked_mul(cols)
            .ok_or(HeteroSortError::TooLarge { rows, cols })?;
        let mut m = Mesh::with_nodes(n)?;
        m.shape = Some((rows, cols));
        for r in 0..rows {
            for c in 0..cols {
                let id = r * cols + c;
                if c + 1 < cols {
                    m.add_link(id, id + 1, 1)?;
                }
                if r + 1 < rows {
                    m.add_link(id, id + cols, 1)?;
                }
            }
        }
        Ok(m)
    }

    /// Number of nodes, failed ones included.
    pub fn len(&self) -> usize {
        self.failed.len()
    }

    /// Always false: a mesh has at least one node.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `(rows, cols)` for a mesh built by [`Mesh::grid`].
    pub fn shape(&self) -> Option<(usize, usize)> {
        self.shape
    }

    /// The id of grid position (`row`, `col`) on a mesh built by [`Mesh::grid`].
    pub fn grid_id(&self, row: usize, col: usize) -> Result<usize, HeteroSortError> {
        let (rows, cols) = self.shape.ok_or(HeteroSortError::NotAGrid)?;
        if row >= rows || col >= cols {
            return Err(HeteroSortError::PositionOutside {
                row,
                col,
                rows,
                cols,
            });
        }
        Ok(row * cols + col)
    }

    fn check(&self, node: usize) -> Result<(), HeteroSortError> {
        if node < self.len() {
            Ok(())
        } else {
            Err(HeteroSortError::NodeOutsideMesh {
                node,
                nodes: self.len(),
            })
        }
    }

    fn slot(&self, a: usize, b: usize) -> Result<usize, HeteroSortError> {
        self.check(a)?;
        self.check(b)?;
        self.adj[a]
            .iter()
            .position(|e| e.0 == b)
            .ok_or(HeteroSortError::NotALink { a, b })
    }

    /// Adds a link `a`-`b` of cost `cost`, or sets its cost (and repairs it) if it exists.
    pub fn add_link(&mut self, a: usize, b: usize, cost: u32) -> Result<(), HeteroSortError> {
        self.check(a)?;
        self.check(b)?;
        if a == b {
            return Err(HeteroSortError::SelfLink { node: a });
        }
        if cost == 0 {
            return Err(HeteroSortError::ZeroLinkCost { a, b });
        }
        for (x, y) in [(a, b), (b, a)] {
            match self.adj[x].iter_mut().find(|e| e.0 == y) {
                Some(e) => *e = (y, cost, false),
                None => self.adj[x].push((y, cost, false)),
            }
        }
        Ok(())
    }

    /// Sets the cost of the existing link `a`-`b` (a slower or faster bus).
    pub fn set_link_cost(&mut self, a: usize, b: usize, cost: u32) -> Result<(), HeteroSortError> {
        self.slot(a, b)?;
        self.add_link(a, b, cost)
    }

    /// Marks the link `a`-`b` failed: no message crosses it.
    pub fn fail_link(&mut self, a: usize, b: usize) -> Result<(), HeteroSortError> {
        let i = self.slot(a, b)?;
        let j = self.slot(b, a)?;
        self.adj[a][i].2 = true;
        self.adj[b][j].2 = true;
        Ok(())
    }

    /// Marks `node` failed: it is not on the sort path and no message crosses it.
    pub fn fail_node(&mut self, node: usize) -> Result<(), HeteroSortError> {
        self.check(node)?;
        self.failed[node] = true;
        Ok(())
    }

    /// True when `node` exists and has not failed.
    pub fn is_live(&self, node: usize) -> bool {
        node < self.len() && !self.failed[node]
    }

    /// Live nodes, ascending.
    pub fn live_nodes(&self) -> Vec<usize> {
        (0..self.len()).filter(|&n| !self.failed[n]).collect()
    }

    /// The cost of the direct link `a`-`b` when it and both ends are live.
    pub fn link_cost(&self, a: usize, b: usize) -> Option<u32> {
        if !self.is_live(a) || !self.is_live(b) {
            return None;
        }
        self.adj[a].iter().find(|e| e.0 == b && !e.2).map(|e| e.1)
    }

    /// Every live link once, as `(a, b, cost)` with `a < b`, ascending.
    pub fn live_links(&self) -> Vec<(usize, usize, u32)> {
        let mut out: Vec<(usize, usize, u32)> = (0..self.len())
            .filter(|&a| self.is_live(a))
            .flat_map(|a| {
                self.adj[a]
                    .iter()
                    .filter(move |e| e.0 > a && !e.2 && self.is_live(e.0))
                    .map(move |e| (a, e.0, e.1))
            })
            .collect();
        out.sort_unstable();
        out
    }
}

/// The store-and-forward cost and cheapest route between every two live nodes of a mesh.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreForward {
    /// Live node ids, ascending; index `i` here is "live index" `i` below.
    live: Vec<usize>,
    /// Live index of each mesh node (`usize::MAX` for failed ones).
    index: Vec<usize>,
    /// `k x k` costs between live indices.
    cost: Vec<u64>,
    /// `k x k`: `prev[s * k + t]` is the live index before `t` on the route from `s`.
    prev: Vec<usize>,
}

impl StoreForward {
    /// Cheapest live routes between all live nodes (Dijkstra from each; deterministic).
    ///
    /// Errors: no live node; live nodes that no live route joins.
    pub fn new(mesh: &Mesh) -> Result<StoreForward, HeteroSortError> {
        let live = mesh.live_nodes();
        if live.is_empty() {
            return Err(HeteroSortError::NoLiveNodes);
        }
        let k = live.len();
        let mut index = vec![usize::MAX; mesh.len()];
        for (i, &n) in live.iter().enumerate() {
            index[n] = i;
        }
        let mut adj: Vec<Vec<(usize, u64)>> = vec![Vec::new(); k];
        for (a, b, c) in mesh.live_links() {
            adj[index[a]].push((index[b], u64::from(c)));
            adj[index[b]].push((index[a], u64::from(c)));
        }
        let mut cost = vec![u64::MAX; k * k];
        let mut prev = vec![usize::MAX; k * k];
        let mut heap = BinaryHeap::new();
        for s in 0..k {
            let row = s * k;
            cost[row + s] = 0;
            prev[row + s] = s;
            heap.push(Reverse((0u64, s)));
            while let Some(Reverse((d, u))) = heap.pop() {
                if d > cost[row + u] {
                    continue;
                }
                for &(v, w) in &adj[u] {
                    let nd = d + w;
                    if nd < cost[row + v] {
                        cost[row + v] = nd;
                        prev[row + v] = u;
                        heap.push(Reverse((nd, v)));
                    }
                }
            }
            if let Some(t) = (0..k).find(|&t| cost[row + t] == u64::MAX) {
                return Err(HeteroSortError::Split {
                    a: live[s],
                    b: live[t],
                });
            }
        }
        Ok(StoreForward {
            live,
            index,
            cost,
            prev,
        })
    }

    /// Live node ids, ascending.
    pub fn live(&self) -> &[usize] {
        &self.live
    }

    /// Number of live nodes.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Always false: construction needs a live node.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn live_index(&self, node: usize) -> Result<usize, HeteroSortError> {
        match self.index.get(node) {
            Some(&i) if i != usize::MAX => Ok(i),
            _ => Err(HeteroSortError::NotLive { node }),
        }
    }

    /// Cost between live indices (crate use: the search loops work on indices).
    pub(crate) fn cost_ix(&self, i: usize, j: usize) -> u64 {
        self.cost[i * self.live.len() + j]
    }

    /// The store-and-forward cost from `a` to `b`.
    pub fn cost(&self, a: usize, b: usize) -> Result<u64, HeteroSortError> {
        Ok(self.cost_ix(self.live_index(a)?, self.live_index(b)?))
    }

    /// The cheapest live route from `a` to `b`, both ends included.
    pub fn route(&self, a: usize, b: usize) -> Result<Vec<usize>, HeteroSortError> {
        let (s, mut t) = (self.live_index(a)?, self.live_index(b)?);
        let k = self.live.len();
        let mut out = vec![self.live[t]];
        while t != s {
            t = self.prev[s * k + t];
            out.push(self.live[t]);
        }
        out.reverse();
        Ok(out)
    }

    /// Checks that `order` visits every live node exactly once and returns its cost.
    pub fn path_cost(&self, order: &[usize]) -> Result<u64, HeteroSortError> {
        let mut seen_at = vec![usize::MAX; self.live.len()];
        for (step, &n) in order.iter().enumerate() {
            let i = self.live_index(n)?;
            if seen_at[i] != usize::MAX {
                return Err(HeteroSortError::Repeated {
                    node: n,
                    first: seen_at[i],
                    second: step,
                });
            }
            seen_at[i] = step;
        }
        if let Some(i) = seen_at.iter().position(|&s| s == usize::MAX) {
            return Err(HeteroSortError::Missing { node: self.live[i] });
        }
        Ok(order
            .windows(2)
            .map(|w| self.cost_ix(self.index[w[0]], self.index[w[1]]))
            .sum())
    }

    /// Live indices -> a [`SortPath`] of node ids (crate use).
    pub(crate) fn path_from_indices(&self, order: &[usize]) -> SortPath {
        let cost = order.windows(2).map(|w| self.cost_ix(w[0], w[1])).sum();
        SortPath {
            order: order.iter().map(|&i| self.live[i]).collect(),
            cost,
        }
    }
}

/// A sort order over the live nodes: `order[0]` ends with the lowest keys, the last node with the
/// highest, and `cost` sums the store-and-forward costs of consecutive nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SortPath {
    pub order: Vec<usize>,
    pub cost: u64,
}

impl SortPath {
    /// The path laid on a grid mesh as Fig. 2 draws it: each cell holds its node's 1-based
    /// place in the sort order, `None` for a failed node (or one the path leaves out).
    pub fn on_grid(&self, mesh: &Mesh) -> Result<Vec<Vec<Option<usize>>>, HeteroSortError> {
        let (rows, cols) = mesh.shape().ok_or(HeteroSortError::NotAGrid)?;
        let mut cells = vec![vec![None; cols]; rows];
        for (place, &n) in self.order.iter().enumerate() {
            if n >= mesh.len() {
                return Err(HeteroSortError::NodeOutsideMesh {
                    node: n,
                    nodes: mesh.len(),
                });
            }
            cells[n / cols][n % cols] = Some(place + 1);
        }
        Ok(cells)
    }
}
