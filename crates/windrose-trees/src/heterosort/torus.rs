//! The conceptual torus of HeteroSort: the snake sort order over an `R x C` grid of nodes and
//! each node's trading partners, with wrap-around at the edges.
//!
//! # Snake order
//! Row 0 runs west to east, row 1 east to west, and so on (Fig. 1): consecutive ranks are
//! always grid neighbours, so the sort axis never needs an express pathway.
//!
//! # Partners
//! A node trades with its north, south, west and east neighbours on the torus. The paper names
//! two kinds besides the neighbours along the snake: *transcoil* partners, grid neighbours that
//! are not adjacent on the sort sequence (node 7's partners 2 and 10 in Fig. 1, the "express
//! pathways across the coils"), and *transedge* partners, reached only through the torus's
//! wrap-around from the north edge to the south edge or from the east edge to the west edge.
//!
//! On small tori directions coincide: with 2 rows north and south are the same node, with 1 row
//! both are the node itself (likewise for columns). Every list holds each partner **once** and
//! never holds the node as its own partner, so a node has 4 partners only when `R, C >= 3`,
//! and its list has `1 + partners` entries (5 on the paper's 4 x 4, 1 on a 1 x 1 torus).
//!
//! # Cycles (Table 1)
//! In odd cycles a node's list is itself and its partners in ascending snake order: it keeps the
//! slice of its sorted data that falls at its own place and sends each partner the slice at that
//! partner's place. In even cycles the list is the partners below it in descending order, then
//! itself, then the partners above it in descending order, which reproduces 14 of Table 1's 16
//! even-cycle lists; the paper's lists for its nodes 1 and 16 swap two middle entries (see
//! [`Torus::trading_list`]).

use super::HeteroSortError;
use serde::{Deserialize, Serialize};

/// A grid position: row 0 is the north edge, column 0 the west edge.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Position {
    pub row: usize,
    pub col: usize,
}

/// The four torus directions.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    North,
    South,
    West,
    East,
}

impl Direction {
    /// All four, in the order [`Neighbours`] lists them.
    pub const ALL: [Direction; 4] = [
        Direction::North,
        Direction::South,
        Direction::West,
        Direction::East,
    ];
}

/// A node's neighbour in each direction, with wrap-around; on small tori some coincide or are
/// the node itself.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Neighbours {
    pub north: usize,
    pub south: usize,
    pub west: usize,
    pub east: usize,
}

impl Neighbours {
    /// The neighbour in direction `d`.
    pub fn get(&self, d: Direction) -> usize {
        match d {
            Direction::North => self.north,
            Direction::South => self.south,
            Direction::West => self.west,
            Direction::East => self.east,
        }
    }
}

/// Why two nodes trade: the paper's three kinds of partner.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartnerKind {
    /// Adjacent on the sort sequence (snake ranks differ by one): the major sort axis.
    Sequence,
    /// A grid neighbour across a coil of the snake, not adjacent on the sequence.
    Transcoil,
    /// Reached only through the torus's wrap-around at the grid's edge.
    Transedge,
}

/// One trading partner of a node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Partner {
    /// The partner's snake rank.
    pub node: usize,
    /// How it is reached.
    pub kind: PartnerKind,
}

/// Odd or even trading cycle. The paper counts cycles from 1, so the first cycle is odd.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cycle {
    Odd,
    Even,
}

impl Cycle {
    /// The parity of cycle number `n`, counting from 1 as the paper does.
    pub fn of(n: u64) -> Cycle {
        if n % 2 == 1 {
            Cycle::Odd
        } else {
            Cycle::Even
        }
    }
}

/// An `R x C` conceptual torus whose nodes are numbered by snake rank.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Torus {
    rows: usize,
    cols: usize,
}

impl Torus {
    /// A torus of `rows x cols` nodes; both must be at least 1.
    pub fn new(rows: usize, cols: usize) -> Result<Torus, HeteroSortError> {
        if rows == 0 || cols == 0 {
            return Err(HeteroSortError::EmptyTorus { rows, cols });
        }
        rows.checked_mul(cols)
            .ok_or(HeteroSortError::TooLarge { rows, cols })?;
        Ok(Torus { rows, cols })
    }

    /// Rows of the grid.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the grid.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Number of nodes, `rows * cols`.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Always false: a torus has at least one node.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn check_node(&self, node: usize) -> Result<(), HeteroSortError> {
        if node < self.len() {
            Ok(())
        } else {
            Err(HeteroSortError::NodeOutsideTorus {
                node,
                rows: self.rows,
                cols: self.cols,
            })
        }
    }

    /// The snake rank of a grid position.
    pub fn rank_of(&self, p: Position) -> Result<usize, HeteroSortError> {
        if p.row >= self.rows || p.col >= self.cols {
            return Err(HeteroSortError::PositionOutside {
                row: p.row,
                col: p.col,
                rows: self.rows,
                cols: self.cols,
            });
        }
        Ok(self.rank_unchecked(p))
    }

    fn rank_unchecked(&self, p: Position) -> usize {
        let along = if p.row.is_multiple_of(2) {
            p.col
        } else {
            self.cols - 1 - p.col
        };
        p.row * self.cols + along
    }

    /// The grid position of snake rank `node`.
    pub fn position_of(&self, node: usize) -> Result<Position, HeteroSortError> {
        self.check_node(node)?;
        let row = node / self.cols;
        let along = node % self.cols;
        let col = if row.is_multiple_of(2) {
            along
        } else {
            self.cols - 1 - along
        };
        Ok(Position { row, col })
    }

    /// The grid as rows of snake ranks, north row first (Fig. 1 with 0-based numbers).
    pub fn grid(&self) -> Vec<Vec<usize>> {
        (0..self.rows)
            .map(|row| {
                (0..self.cols)
                    .map(|col| self.rank_unchecked(Position { row, col }))
                    .collect()
            })
            .collect()
    }

    /// The 0-based node of paper number `number` (1-based).
    pub fn from_paper(&self, number: usize) -> Result<usize, HeteroSortError> {
        if number == 0 || number > self.len() {
            return Err(HeteroSortError::PaperNumberOutside {
                number,
                rows: self.rows,
                cols: self.cols,
            });
        }
        Ok(number - 1)
    }

    /// The neighbour of `node` in each direction, wrapping around the edges.
    pub fn neighbours(&self, node: usize) -> Result<Neighbours, HeteroSortError> {
        let p = self.position_of(node)?;
        let (r, c) = (self.rows, self.cols);
        let at = |row, col| self.rank_unchecked(Position { row, col });
        Ok(Neighbours {
            north: at((p.row + r - 1) % r, p.col),
            south: at((p.row + 1) % r, p.col),
            west: at(p.row, (p.col + c - 1) % c),
            east: at(p.row, (p.col + 1) % c),
        })
    }

    /// The distinct trading partners of `node` (never itself), in ascending snake order.
    pub fn partners(&self, node: usize) -> Result<Vec<Partner>, HeteroSortError> {
        let p = self.position_of(node)?;
        let n = self.neighbours(node)?;
        // A direction wraps when it leaves the grid at an edge.
        let wraps = |d: Direction| match d {
            Direction::North => p.row == 0,
            Direction::South => p.row + 1 == self.rows,
            Direction::West => p.col == 0,
            Direction::East => p.col + 1 == self.cols,
        };
        let mut out: Vec<Partner> = Vec::with_capacity(4);
        for d in Direction::ALL {
            let m = n.get(d);
            if m == node {
                continue;
            }
            let kind = if m.abs_diff(node) == 1 && !wraps(d) {
                PartnerKind::Sequence
            } else if wraps(d) {
                PartnerKind::Transedge
            } else {
                PartnerKind::Transcoil
            };
            match out.iter_mut().find(|q| q.node == m) {
                // Reached two ways (2 rows or 2 columns): the direct way names it.
                Some(q) => {
                    if q.kind == PartnerKind::Transedge {
                        q.kind = kind;
                    }
                }
                None => out.push(Partner { node: m, kind }),
            }
        }
        out.sort_by_key(|q| q.node);
        Ok(out)
    }

    /// The ordered list of `node`'s cycle: slice `i` of its sorted data (ascending keys) goes
    /// to entry `i`, and the node keeps the slice at its own entry.
    ///
    /// Odd cycles: itself and its partners ascending. Even cycles: partners below it
    /// descending, itself, partners above it descending. The paper prints
    /// `1 16 4 8 2` for its node 1 and `15 9 13 1 16` for its node 16 where this rule gives
    /// `1 16 8 4 2` and `15 13 9 1 16` (two middle entries swapped); the other 14 even lists
    /// agree, and we found no simple rule that fits all 16, so we take the two for typos.
    pub fn trading_list(&self, node: usize, cycle: Cycle) -> Result<Vec<usize>, HeteroSortError> {
        let partners = self.partners(node)?;
        let mut list = Vec::with_capacity(partners.len() + 1);
        match cycle {
            Cycle::Odd => {
                list.extend(partners.iter().map(|q| q.node).filter(|&m| m < node));
                list.push(node);
                list.extend(partners.iter().map(|q| q.node).filter(|&m| m > node));
            }
            Cycle::Even => {
                list.extend(partners.iter().rev().map(|q| q.node).filter(|&m| m < node));
                list.push(node);
                list.extend(partners.iter().rev().map(|q| q.node).filter(|&m| m > node));
            }
        }
        Ok(list)
    }

    /// [`Torus::trading_list`] in the paper's 1-based numbers, for paper node `number`.
    pub fn paper_list(&self, number: usize, cycle: Cycle) -> Result<Vec<usize>, HeteroSortError> {
        let node = self.from_paper(number)?;
        Ok(self
            .trading_list(node, cycle)?
            .into_iter()
            .map(|m| m + 1)
            .collect())
    }
}
