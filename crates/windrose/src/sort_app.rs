//! A sort's member side, below both `windrose sort` ([`crate::sort_cmd`], which starts a
//! sort and verifies it) and `windrose group serve` ([`crate::group_cmd`], whose members take
//! part): the application that hands the Host a member's input file and writes the range it is
//! delivered under a temporary name, and the types of a sort's outcome.

use bytes::Bytes;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use windrose_model::records::RECORD_LEN;
use windrose_proto::app::{Application, Blake3App};
use windrose_proto::collective::{CollectiveSpec, Delivers};
use windrose_proto::pieces::PieceVerifier;
use windrose_proto::{ComputeTask, TransferId};

/// The temporary name of a member's output while a sort is unverified: beside it, hidden,
/// named by the collective so that a member and the command that verifies agree on it.
pub fn sort_temp_path(output: &Path, t: TransferId) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    output.with_file_name(format!(".{name}.windrose-sort-{}", t.0))
}

/// A sort member's application: its input file is its local input, its delivered range goes
/// to the temporary name of its output file.
#[derive(Debug)]
pub struct SortApp {
    input: PathBuf,
    output: PathBuf,
    /// The sorts this member has taken part in (deliveries of other collectives go elsewhere).
    sorts: Mutex<BTreeSet<TransferId>>,
}

impl SortApp {
    /// The member with these files.
    pub fn new(input: PathBuf, output: PathBuf) -> SortApp {
        SortApp {
            input,
            output,
            sorts: Mutex::new(BTreeSet::new()),
        }
    }

    /// Whether `t` is a sort this member took part in.
    pub fn is_sort(&self, t: TransferId) -> bool {
        self.sorts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&t)
    }
}

impl Application for SortApp {
    fn compute(&self, task: &ComputeTask) -> String {
        if task.work.is_none() {
            // Every compute of the sort machines carries its work (a Job the driver runs
            // before this): a task without one is the driver timing this member's speed at
            // join ([`calibration_sort`]).
            return format!("{} records sorted", calibration_sort(task.len));
        }
        // The machines sort in place; the task stands for that work in the simulator.
        format!("{} records", task.len / RECORD_LEN as u64)
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Blake3App.verifier()
    }

    fn local_input(&self, t: TransferId, spec: &CollectiveSpec) -> Bytes {
        if spec.descriptor().delivers != Delivers::SortedRange {
            return Bytes::new();
        }
        self.sorts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(t);
        // An unreadable file is an empty share, which the machine refuses (and the member
        // reports the collective refused); the command checks the files before it starts.
        match windrose_net::map_file(&self.input) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("sort {t}: input {}: {e}", self.input.display());
                Bytes::new()
            }
        }
    }

    fn deliver(&self, t: TransferId, offset: u64, data: &Bytes) {
        if !self.is_sort(t) {
            return;
        }
        let temp = sort_temp_path(&self.output, t);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(offset == 0)
            .append(offset > 0)
            .open(&temp)
            .and_then(|mut f| f.write_all(data));
        // A failed write shows in the verification as records missing.
        if let Err(e) = written {
            eprintln!("sort {t}: writing {}: {e}", temp.display());
        }
    }
}

/// Sorts `bytes` of pseudo-random records the way the sort machines sort (a vector of
/// record slices, `sort_unstable`) and returns how many: the work the driver times at join
/// so that the member's compute speed is measured, and shared, before the first sort weighs
/// the members by it (`windrose sort` without `--speeds`). The records are generated, not
/// zeros: a sort of equal keys would finish in one pass and time nothing like a real one.
pub fn calibration_sort(bytes: u64) -> usize {
    let n = (bytes / RECORD_LEN as u64) as usize;
    let mut buf = vec![0u8; n * RECORD_LEN];
    // xorshift64: the keys need only be spread; the generator's cost is small beside the sort.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    let buf = Bytes::from(buf);
    let mut records: Vec<Bytes> = (0..n)
        .map(|i| buf.slice(i * RECORD_LEN..(i + 1) * RECORD_LEN))
        .collect();
    records.sort_unstable();
    records.len()
}

/// Each member's time from its machine's start to its end, seconds, by id, as the initiator's
/// Host heard them: None for a member that did not finish (lost mid-sort).
pub type FinishTimes = Vec<Option<f64>>;

/// Each member's named steps by id (a HeteroSort's: samples sent, splitters, exchange start
/// and end, merged, check sent, ready, commit; see `windrose_proto::heterosort`), each as
/// seconds from the member's start on its clock, as the initiator heard them (empty: none
/// reported).
pub type PhaseTimes = Vec<Vec<(String, f64)>>;

/// A sort that did not complete, with its collective when it had started (the members'
/// temporary files are named by it).
pub struct Failed {
    /// What went wrong.
    pub error: anyhow::Error,
    /// The collective, if it started.
    pub transfer: Option<TransferId>,
}

impl Failed {
    /// A failure of collective `transfer`.
    pub fn of(error: anyhow::Error, transfer: Option<TransferId>) -> Failed {
        Failed { error, transfer }
    }
}

impl From<anyhow::Error> for Failed {
    fn from(error: anyhow::Error) -> Failed {
        Failed::of(error, None)
    }
}
