//! Reading a Host's outputs in the host tests.

use bytes::Bytes;
use windrose_proto::frame::TransferId;
use windrose_proto::{Output, Report};

/// Bytes a node was handed, in offset order.
pub fn delivered(seen: &[Output]) -> Vec<u8> {
    let mut pieces: Vec<(u64, Bytes)> = seen
        .iter()
        .filter_map(|o| match o {
            Output::Deliver { offset, data, .. } => Some((*offset, data.clone())),
            _ => None,
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    pieces.into_iter().flat_map(|(_, d)| d.to_vec()).collect()
}

/// `(finished, failed)` of the first collective an initiator reported complete (of `t` only,
/// when given).
pub fn completion(seen: &[Output], t: Option<TransferId>) -> Option<(u32, u32)> {
    seen.iter().find_map(|o| match o {
        Output::Report(Report::CollectiveComplete {
            transfer,
            finished,
            failed,
        }) if t.is_none_or(|t| t == *transfer) => Some((*finished, *failed)),
        _ => None,
    })
}
