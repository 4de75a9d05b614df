//! The application's side of a collective: the effects a protocol asks for but never performs
//! itself, behind one trait so every driver performs them the same way.
//!
//! A machine says *that* bytes are delivered ([`Output::Deliver`](crate::Output::Deliver)),
//! *that* a share is to be processed ([`Output::Compute`](crate::Output::Compute)) and checks
//! each received piece through a [`PieceVerifier`]; *what* that means belongs to the
//! application:
//!
//! | application            | deliver                      | compute               | verify        |
//! |------------------------|------------------------------|-----------------------|---------------|
//! | [`Blake3App`] (default)| the driver's sink (file, memory) | BLAKE3 of the share | BLAKE3 per piece |
//! | an MPI program         | into the caller's buffer     | none                  | BLAKE3        |
//! | a distributed sort     | runs into the local run list | sort the share        | BLAKE3        |
//!
//! A collective whose members all start with data (HeteroSort) takes each member's share from
//! [`local_input`](Application::local_input) when the Host builds that member's machine.
//!
//! The runtime calls [`compute`](Application::compute) on a worker thread and answers the
//! machine with `Command::ComputeDone` when it returns; the simulator charges the node's
//! `ComputeModel` time instead of running it (its results are not needed to time a run), and
//! both hand [`verifier`](Application::verifier) to the machines they build.
//!
//! # Work a machine needs back: [`Job`] and [`Work`]
//! Some machines need the *result* of heavy work (a sort needs its records sorted), and a
//! machine's `handle()` runs on the Host's event loop: work done there stops the node
//! answering its peers (a 0.05-core member sorting 67 MB is silent for 10 s, and the others
//! give it up). Such a machine wraps the work in a [`Job`] and hands its [`Work`] out with the
//! task ([`ComputeTask::work`]). A driver that runs computes off the event loop (windrose-net)
//! runs the work on the same blocking thread, before the application's `compute`, and answers
//! `ComputeDone` after both; the machine then takes the result ([`Job::result`]). A driver that
//! does not run it (the simulator, which charges the task's time by the node's speed, and the
//! tests' pumps) loses nothing: [`Job::result`] runs a job nobody ran yet, inline, when the
//! machine takes its result at `ComputeDone`. The work is a pure function of what the machine
//! captured, so both give the same result, and a simulated run stays deterministic.

use crate::collective::CollectiveSpec;
use crate::frame::TransferId;
use crate::node::ComputeTask;
use crate::pieces::{Blake3Verifier, PieceVerifier};
use bytes::Bytes;
use std::fmt;
use std::sync::{Arc, Mutex};

/// What a node's application does with the collectives' data.
pub trait Application: Send + Sync + fmt::Debug {
    /// Bytes `offset..offset + data.len()` of `transfer` arrived, in order. Drivers call it in
    /// addition to their own sinks (files, progress); the default keeps nothing.
    fn deliver(&self, transfer: TransferId, offset: u64, data: &Bytes) {
        let _ = (transfer, offset, data);
    }

    /// Processes a share (the bytes of `task`, in order) and describes the result for the
    /// node's report: e.g. a digest, a record count. May take long: the runtime runs it off
    /// the event loop.
    fn compute(&self, task: &ComputeTask) -> String;

    /// How received pieces are checked before they are stored, announced or forwarded.
    fn verifier(&self) -> Arc<dyn PieceVerifier>;

    /// This node's own input to collective `transfer` of `spec`, for collectives where every
    /// member starts with data (a sort: its share of the records); the default has none. The
    /// Host asks once per collective when it builds the node's machine (at the initiator and
    /// at every member), and passes the bytes in
    /// [`BuildContext::local_input`](crate::collective::BuildContext::local_input); protocols
    /// whose data comes from a root ignore it.
    fn local_input(&self, transfer: TransferId, spec: &CollectiveSpec) -> Bytes {
        let _ = (transfer, spec);
        Bytes::new()
    }

    /// A fresh digest of the bytes one collective delivers here, for hosts that report one
    /// ([`HostConfig::digest_deliveries`](crate::host::HostConfig::digest_deliveries)): the
    /// initiator then checks that every member got the root's bytes. None: no digest (the
    /// default).
    fn delivery_digest(&self) -> Option<Box<dyn DeliveryDigest>> {
        None
    }
}

/// A running digest of the bytes a collective delivered to a node, fed in delivery order.
pub trait DeliveryDigest: Send {
    /// The next delivered bytes.
    fn update(&mut self, data: &[u8]);
    /// The digest of everything fed so far.
    fn finish(&self) -> [u8; 32];
}

impl DeliveryDigest for blake3::Hasher {
    fn update(&mut self, data: &[u8]) {
        blake3::Hasher::update(self, data);
    }

    fn finish(&self) -> [u8; 32] {
        *self.finalize().as_bytes()
    }
}

/// The default application: a share's "compute" is its BLAKE3 hash (hex), and pieces are
/// checked with BLAKE3 against the manifest. One hash function for both, so a report's digest
/// can be compared with `b3sum` of the same bytes.
#[derive(Copy, Clone, Debug, Default)]
pub struct Blake3App;

impl Application for Blake3App {
    fn compute(&self, task: &ComputeTask) -> String {
        let mut h = blake3::Hasher::new();
        for piece in &task.data {
            h.update(piece);
        }
        h.finalize().to_hex().to_string()
    }

    fn verifier(&self) -> Arc<dyn PieceVerifier> {
        Arc::new(Blake3Verifier)
    }

    fn delivery_digest(&self) -> Option<Box<dyn DeliveryDigest>> {
        Some(Box::new(blake3::Hasher::new()))
    }
}

/// The default application, shared.
pub fn default_app() -> Arc<dyn Application> {
    Arc::new(Blake3App)
}

/// Work handed to a driver with a compute task ([`ComputeTask::work`]): run it with
/// [`run`](Work::run), on any thread, before answering `ComputeDone`. Running it twice, or
/// not at all, is harmless (see [`Job`]).
#[derive(Clone)]
pub struct Work(Arc<dyn Runnable>);

impl Work {
    /// Runs the work unless it ran already; when another thread is running it, waits until it
    /// is done.
    pub fn run(&self) {
        self.0.run();
    }
}

impl fmt::Debug for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Work")
    }
}

impl PartialEq for Work {
    fn eq(&self, other: &Work) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Work {}

trait Runnable: Send + Sync {
    fn run(&self);
}

enum JobState<T> {
    Pending(Box<dyn FnOnce() -> T + Send>),
    Done(T),
    Taken,
}

impl<T: Send> Runnable for Mutex<JobState<T>> {
    fn run(&self) {
        // The lock is held while the job runs, so a second `run` (or `result`) waits for it.
        let mut state = self.lock().unwrap_or_else(|e| e.into_inner());
        if let JobState::Pending(_) = &*state {
            let JobState::Pending(f) = std::mem::replace(&mut *state, JobState::Taken) else {
                unreachable!("matched above");
            };
            *state = JobState::Done(f());
        }
    }
}

/// A machine's handle on heavy work whose result it needs: see the [module docs](self).
pub struct Job<T>(Arc<Mutex<JobState<T>>>);

impl<T> Clone for Job<T> {
    fn clone(&self) -> Job<T> {
        Job(self.0.clone())
    }
}

impl<T> fmt::Debug for Job<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Job")
    }
}

impl<T: Send + 'static> Job<T> {
    /// Work to be done later, by a driver's thread or by [`result`](Job::result).
    pub fn new(f: impl FnOnce() -> T + Send + 'static) -> Job<T> {
        Job(Arc::new(Mutex::new(JobState::Pending(Box::new(f)))))
    }

    /// The handle a driver runs ([`ComputeTask::work`]).
    pub fn work(&self) -> Work {
        Work(self.0.clone())
    }

    /// The result: runs the job here if no driver did (waits if one is running it). None
    /// when the result was taken before.
    pub fn result(&self) -> Option<T> {
        self.0.run();
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *state, JobState::Taken) {
            JobState::Done(t) => Some(t),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::TaskId;
    use crate::pieces::Manifest;

    #[test]
    fn blake3_compute_hashes_the_share_in_order_and_verifies_pieces() {
        let task = ComputeTask {
            task: TaskId(1),
            offset: 0,
            len: 11,
            data: vec![Bytes::from_static(b"hello "), Bytes::from_static(b"world")],
            work: None,
        };
        assert_eq!(
            Blake3App.compute(&task),
            blake3::hash(b"hello world").to_hex().to_string()
        );
        let data = Bytes::from_static(b"0123456789");
        let manifest = Manifest::build(&data, 4).unwrap();
        let v = Blake3App.verifier();
        assert!(v.verify(&manifest, 1, &data.slice(4..8)));
        assert!(!v.verify(&manifest, 1, &data.slice(0..4)));
    }

    #[test]
    fn a_job_runs_once_wherever_it_runs() {
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = runs.clone();
        let job = Job::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            vec![3, 1, 2].into_iter().max()
        });
        // A driver's thread runs it; the machine's `result` then only takes it.
        let work = job.work();
        std::thread::spawn(move || work.run()).join().unwrap();
        job.work().run();
        assert_eq!(job.result(), Some(Some(3)));
        assert_eq!(job.result(), None, "a result is taken once");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Nobody ran it: `result` runs it inline.
        let inline = Job::new(|| 7u8);
        assert_eq!(inline.result(), Some(7));
        assert_eq!(inline.work(), inline.work());
        assert_ne!(inline.work(), Job::new(|| 7u8).work());
    }
}
