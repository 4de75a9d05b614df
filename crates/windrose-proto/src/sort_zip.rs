//! Compression of the records the sorts exchange (issue 19), the same for HeteroSort's
//! splitters ([`crate::heterosort`]) and the sample sort ([`crate::sample_sort`]).
//!
//! On the heterogeneous testbed both sorts were WAN-bound: three quarters of the records
//! cross 3-5 MB/s links whatever the split. The sort benchmark's records are ASCII after the
//! 10-byte key and compress well, so, as Spark and Hadoop compress their shuffles, a sort with
//! [`Compress::Lz4`] sends each exchange frame to a member of *another cluster* as one LZ4 block
//! (frames inside a cluster cross fast links and stay raw; with the clusters unknown every
//! frame is compressed). Measured on 64 MB of `windrose gensort` records, one core: LZ4
//! (lz4_flex) keeps 23 % of unsorted records and 29 % of sorted ones at 430-470 MB/s, and
//! decompresses at about 1,600 MB/s; zstd level 1 keeps 13 % and 21 % at 270-350 MB/s and
//! decompresses at about 1,000 MB/s; the sort itself runs at 60-80 MB/s. LZ4 is the default:
//! with it the WAN floor falls below the members' CPU time, where zstd's better ratio buys
//! nothing and its extra CPU falls on the 0.05-core members.
//!
//! The work runs off the Host's event loop: the sender compresses its buckets in a compute
//! task ([`crate::app::Job`]) once it has cut them, and a receiver decompresses inside the
//! tasks that sort what arrived. The simulator runs the same code and charges each task's
//! sort-equivalent bytes ([`compress_cost`], [`decompress_cost`]) by the node's speed, so the
//! simulated and the real runs pay for it alike. A frame carries whether it is compressed (its
//! kind: `hsort_zslice`, `ssort_zbucket`) and the raw length; a frame that does not shrink is
//! sent raw. A payload that does not decompress to exactly its raw length is the sender's
//! protocol error, reported with its id.

use crate::frame::{FrameError, MessageKind};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// How a sort compresses the records it exchanges.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compress {
    /// Raw records (the default of a spec that says nothing, as before compression existed).
    #[default]
    None,
    /// One LZ4 block per frame, for frames between clusters.
    Lz4,
}

impl Compress {
    /// Every choice, in the order help texts list them.
    pub const ALL: [Compress; 2] = [Compress::Lz4, Compress::None];

    /// No compression (a spec leaves the field out then, as before it existed).
    pub fn is_none(&self) -> bool {
        *self == Compress::None
    }

    /// Its name in files and on the command line (its serde name).
    pub fn name(self) -> &'static str {
        match self {
            Compress::None => "none",
            Compress::Lz4 => "lz4",
        }
    }

    /// The choice named `name`.
    pub fn from_name(name: &str) -> Option<Compress> {
        Compress::ALL.into_iter().find(|c| c.name() == name.trim())
    }
}

/// What compressing a byte costs, as a fraction of sorting it (the ratio of the measured
/// speeds above: a sort at about 70 MB/s, LZ4 at about 450 MB/s).
pub const COMPRESS_COST: f64 = 1.0 / 6.0;

/// What decompressing a byte costs, as a fraction of sorting it (about 1,600 MB/s).
pub const DECOMPRESS_COST: f64 = 1.0 / 20.0;

/// The sort-equivalent bytes of compressing `bytes`: a compute task's `len`, which the
/// simulator charges and the Host's compute timing divides by the task's time.
pub fn compress_cost(bytes: usize) -> u64 {
    (bytes as f64 * COMPRESS_COST).ceil() as u64
}

/// The sort-equivalent bytes of decompressing to `bytes`.
pub fn decompress_cost(bytes: usize) -> u64 {
    (bytes as f64 * DECOMPRESS_COST).ceil() as u64
}

/// One frame's payload `raw`, compressed when that makes it smaller: `(Some(raw length),
/// the LZ4 block)`, or `(None, raw)` as it was.
pub fn pack(raw: Bytes) -> (Option<u32>, Bytes) {
    if raw.is_empty() {
        return (None, raw);
    }
    let z = lz4_flex::block::compress(&raw);
    if z.len() < raw.len() {
        (Some(raw.len() as u32), Bytes::from(z))
    } else {
        (None, raw)
    }
}

/// The `raw_len` bytes an LZ4 block `z` holds; an error saying what is wrong when it does
/// not decompress to exactly that many.
pub fn unpack(raw_len: u32, z: &[u8]) -> Result<Bytes, String> {
    let mut out = vec![0u8; raw_len as usize];
    match lz4_flex::block::decompress_into(z, &mut out) {
        Ok(n) if n == out.len() => Ok(Bytes::from(out)),
        Ok(n) => Err(format!(
            "the LZ4 payload of {} bytes holds {n} bytes, the frame says {raw_len}",
            z.len()
        )),
        Err(e) => Err(format!(
            "the LZ4 payload of {} bytes (raw {raw_len}) does not decompress: {e}",
            z.len()
        )),
    }
}

/// A compressed frame's fixed fields checked: its raw length `raw_len` is whole records of
/// `record_len` bytes, at least one, and no more than a frame of `max` raw bytes holds (one
/// record when a record is larger), and its payload of `payload` bytes is not empty.
pub fn check_packed(
    kind: MessageKind,
    raw_len: u32,
    payload: usize,
    record_len: usize,
    max: usize,
) -> Result<(), FrameError> {
    let raw = raw_len as usize;
    let what = if raw == 0 || !raw.is_multiple_of(record_len) {
        format!("a raw length of {raw} bytes is not whole records of {record_len} bytes")
    } else if raw > max.max(record_len) {
        format!("a raw length of {raw} bytes is above a frame's {max}")
    } else if payload == 0 {
        "an empty compressed payload".to_string()
    } else {
        return Ok(());
    };
    Err(FrameError::Invalid { kind, what })
}

/// Packed records cut into one `Bytes` per record (no copy).
pub fn records(packed: &Bytes, record_len: usize) -> impl Iterator<Item = Bytes> + '_ {
    (0..packed.len() / record_len).map(move |i| packed.slice(i * record_len..(i + 1) * record_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_unpacks_to_its_bytes_and_a_cut_one_is_refused() {
        let raw = Bytes::from(
            b"key0000001  AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".repeat(40),
        );
        let (n, z) = pack(raw.clone());
        assert_eq!(n, Some(raw.len() as u32));
        assert!(z.len() < raw.len());
        assert_eq!(unpack(raw.len() as u32, &z).unwrap(), raw);
        assert!(unpack(raw.len() as u32, &z[..z.len() - 3]).is_err());
        assert!(unpack(raw.len() as u32 + 1, &z).is_err());
        assert!(unpack(raw.len() as u32 - 1, &z).is_err());
        // Incompressible bytes travel raw.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(pack(Bytes::from(noise)).0, None);
    }
}
