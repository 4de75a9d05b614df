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

use crate::collective::CollectiveSpec;
use crate::frame::TransferId;
use crate::node::ComputeTask;
use crate::pieces::{Blake3Verifier, PieceVerifier};
use bytes::Bytes;
use std::fmt;
use std::sync::Arc;

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
}
