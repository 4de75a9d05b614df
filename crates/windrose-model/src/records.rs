//! Files of sort-benchmark records: 100 bytes each, the first 10 the key (compared as unsigned
//! bytes, `memcmp` order), the other 90 the payload.
//!
//! - [`RecordGenerator`] writes record `i` from `(seed, i)` alone, so a file can be generated in
//!   parallel chunks and any range regenerated: keys from ChaCha8 (`seed`, stream 0, 128 bits
//!   per record at word position `4 i`), in one of three [`KeyDistribution`]s; the payload is
//!   the record's index and a filler derived from it ([`payload_index`] checks it), as the
//!   benchmark's own generator does.
//! - [`Checksum`]: the sum modulo 2^128 of each record's BLAKE3 truncated to 128 bits, so any
//!   permutation of a set of records has the same checksum and a changed byte changes it.
//! - [`RecordSummary`]: what a checker reports over a sequence of records (count, checksum,
//!   duplicate keys, first and last key, records out of order and the first of them). Summaries
//!   of consecutive parts combine with [`RecordSummary::then`], so nodes holding consecutive key
//!   ranges can summarise their parts and one reader combine them in key-range order.
//!
//! ```
//! use windrose_model::records::{KeyDistribution, RecordGenerator, RecordSummary, RECORD_LEN};
//! let mut gen = RecordGenerator::new(7, KeyDistribution::Uniform).unwrap();
//! let mut buf = vec![0u8; 1000 * RECORD_LEN];
//! gen.fill(&mut buf);
//! let unsorted = RecordSummary::of(&buf);
//! let mut records: Vec<&[u8]> = buf.chunks(RECORD_LEN).collect();
//! records.sort_unstable_by(|a, b| a[..10].cmp(&b[..10]));
//! let sorted = RecordSummary::of(&records.concat());
//! assert_eq!(sorted.checksum, unsorted.checksum);
//! assert_eq!((sorted.records, sorted.unordered), (1000, 0));
//! assert!(unsorted.unordered > 0);
//! ```

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;

/// Bytes in a record.
pub const RECORD_LEN: usize = 100;
/// Bytes of a record's key, at its start.
pub const KEY_LEN: usize = 10;
/// A record's key.
pub type Key = [u8; KEY_LEN];

/// The default exponent of [`KeyDistribution::Skewed`].
pub const DEFAULT_SKEW: f64 = 4.0;
/// The largest exponent [`KeyDistribution::Skewed`] accepts.
pub const MAX_SKEW: f64 = 64.0;

/// ChaCha words (u32) each record's key draws, whatever the distribution.
const WORDS_PER_RECORD: u128 = 4;
/// The ChaCha stream of the keys of [`KeyDistribution::Duplicates`]'s distinct set.
const DISTINCT_STREAM: u64 = 1;

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDistribution {
    /// Every key uniform over the 2^80 keys.
    Uniform,
    /// A power law over the key space: the key, read as a fraction `x` of the key space, is
    /// `u^exponent` with `u` uniform in [0, 1), so the lowest fraction `t` of the key space holds
    /// a fraction `t^(1/exponent)` of the records. 1 is uniform; with 4 ([`DEFAULT_SKEW`]) the
    /// keys starting with byte 0x00 (1/256 of the space) are a quarter of the records, those
    /// starting with 0x0000 one in 16. At most [`MAX_SKEW`]. The bits below the 53 that the
    /// power carries are drawn uniformly, so keys rarely repeat.
    Skewed {
        /// The exponent, in `1..=MAX_SKEW`.
        exponent: f64,
    },
    /// Keys drawn uniformly from a set of `distinct` keys (themselves uniform over the key space,
    /// from ChaCha stream 1 of the seed): many records share a key.
    Duplicates {
        /// The number of keys in the set, at least 1.
        distinct: u64,
    },
}

impl KeyDistribution {
    /// The distribution's name on the command line: `uniform`, `skewed` or `duplicates`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Skewed { .. } => "skewed",
            Self::Duplicates { .. } => "duplicates",
        }
    }

    /// Checks the parameter.
    pub fn validate(&self) -> Result<(), RecordError> {
        match *self {
            Self::Uniform => Ok(()),
            Self::Skewed { exponent } if (1.0..=MAX_SKEW).contains(&exponent) => Ok(()),
            Self::Skewed { exponent } => Err(RecordError::BadSkew(exponent)),
            Self::Duplicates { distinct: 0 } => Err(RecordError::NoDistinctKeys),
            Self::Duplicates { .. } => Ok(()),
        }
    }
}

/// A bad generator parameter.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RecordError {
    /// A skew exponent outside `1..=MAX_SKEW` (or NaN).
    #[error("skew exponent {0} is out of range: expected a number from 1 (uniform) to 64")]
    BadSkew(f64),
    /// `Duplicates { distinct: 0 }`.
    #[error("the number of distinct keys must be at least 1")]
    NoDistinctKeys,
}

/// Writes records `start, start + 1, …` of a seed: record `i` depends on `(seed, i)` and the
/// distribution alone, so [`seek`](Self::seek) to any index gives the same records as
/// generating from 0 up to it.
#[derive(Debug, Clone)]
pub struct RecordGenerator {
    distribution: KeyDistribution,
    keys: ChaCha8Rng,
    distinct: ChaCha8Rng,
    next: u64,
}

impl RecordGenerator {
    /// A generator of the seed's records from index 0.
    pub fn new(seed: u64, distribution: KeyDistribution) -> Result<Self, RecordError> {
        distribution.validate()?;
        let keys = ChaCha8Rng::seed_from_u64(seed);
        let mut distinct = keys.clone();
        distinct.set_stream(DISTINCT_STREAM);
        Ok(Self {
            distribution,
            keys,
            distinct,
            next: 0,
        })
    }

    /// Record `index` of the seed, alone.
    pub fn record(
        seed: u64,
        distribution: KeyDistribution,
        index: u64,
    ) -> Result<[u8; RECORD_LEN], RecordError> {
        let mut gen = Self::new(seed, distribution)?;
        gen.seek(index);
        let mut out = [0u8; RECORD_LEN];
        gen.fill(&mut out);
        Ok(out)
    }

    /// The next record written will be record `index`.
    pub fn seek(&mut self, index: u64) {
        self.keys.set_word_pos(u128::from(index) * WORDS_PER_RECORD);
        self.next = index;
    }

    /// The index of the next record.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// The distribution of the keys.
    pub fn distribution(&self) -> KeyDistribution {
        self.distribution
    }

    /// Fills `buf` with the next `buf.len() / RECORD_LEN` records.
    ///
    /// # Panics
    /// If `buf.len()` is not a multiple of [`RECORD_LEN`].
    pub fn fill(&mut self, buf: &mut [u8]) {
        assert!(
            buf.len().is_multiple_of(RECORD_LEN),
            "a buffer of {} bytes is not whole records",
            buf.len()
        );
        for record in buf.chunks_exact_mut(RECORD_LEN) {
            let key = self.next_key();
            record[..KEY_LEN].copy_from_slice(&key);
            write_payload(self.next, &mut record[KEY_LEN..]);
            self.next = self.next.wrapping_add(1);
        }
    }

    fn next_key(&mut self) -> Key {
        let mut bits = [0u8; 16];
        self.keys.fill_bytes(&mut bits);
        let mut key = [0u8; KEY_LEN];
        match self.distribution {
            KeyDistribution::Uniform => key.copy_from_slice(&bits[..KEY_LEN]),
            KeyDistribution::Skewed { exponent } => {
                let r1 = u64::from_le_bytes(bits[..8].try_into().expect("8 bytes"));
                let r2 = u64::from_le_bytes(bits[8..].try_into().expect("8 bytes"));
                let u = (r1 >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                // x < 1, so x * 2^64 fits (the cast saturates in any case).
                let mut high = (u.powf(exponent) * 18_446_744_073_709_551_616.0) as u64;
                // The power carries 53 significant bits; the bits below them are uniform.
                let below = match high.checked_ilog2() {
                    None => u64::MAX,
                    Some(msb) if msb >= 53 => (1u64 << (msb - 52)) - 1,
                    Some(_) => 0,
                };
                high |= r2 & below;
                key[..8].copy_from_slice(&high.to_be_bytes());
                key[8..].copy_from_slice(&bits[14..16]);
            }
            KeyDistribution::Duplicates { distinct } => {
                let r = u64::from_le_bytes(bits[..8].try_into().expect("8 bytes"));
                let j = ((u128::from(r) * u128::from(distinct)) >> 64) as u64;
                self.distinct.set_word_pos(u128::from(j) * WORDS_PER_RECORD);
                self.distinct.fill_bytes(&mut bits);
                key.copy_from_slice(&bits[..KEY_LEN]);
            }
        }
        key
    }
}

/// Layout of the payload (offsets in the record): two spaces, the index as 32 upper-case hex
/// digits, two spaces, 48 filler bytes (16 groups of three equal letters `A`..`P`, one per hex
/// digit of the 64-bit index, most significant first), four spaces, `\r\n`. Every hex digit
/// of the index is repeated in the filler, so any one changed byte of the payload is detected.
const INDEX_AT: usize = 12;
const FILLER_AT: usize = 46;
const FILLER_GROUPS: usize = 16;
const GROUP_LEN: usize = 3;

fn write_payload(index: u64, payload: &mut [u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let p = |at: usize| at - KEY_LEN;
    payload[p(10)..p(INDEX_AT)].copy_from_slice(b"  ");
    let wide = u128::from(index);
    for (d, b) in payload[p(INDEX_AT)..p(INDEX_AT + 32)]
        .iter_mut()
        .enumerate()
    {
        *b = HEX[((wide >> (4 * (31 - d))) & 0xF) as usize];
    }
    payload[p(INDEX_AT + 32)..p(FILLER_AT)].copy_from_slice(b"  ");
    for g in 0..FILLER_GROUPS {
        let nibble = ((index >> (4 * (FILLER_GROUPS - 1 - g))) & 0xF) as u8;
        let at = p(FILLER_AT + GROUP_LEN * g);
        payload[at..at + GROUP_LEN].fill(b'A' + nibble);
    }
    let end = p(FILLER_AT + GROUP_LEN * FILLER_GROUPS);
    payload[end..p(98)].copy_from_slice(b"    ");
    payload[p(98)..p(100)].copy_from_slice(b"\r\n");
}

/// The index a record's payload carries when it is exactly the payload [`RecordGenerator`]
/// writes for that index, else None (the payload was changed, or the record comes from another
/// generator).
///
/// # Panics
/// If `record` is not [`RECORD_LEN`] bytes.
pub fn payload_index(record: &[u8]) -> Option<u64> {
    assert_eq!(record.len(), RECORD_LEN, "a record is {RECORD_LEN} bytes");
    let filler_end = FILLER_AT + GROUP_LEN * FILLER_GROUPS;
    if &record[KEY_LEN..INDEX_AT] != b"  "
        || &record[INDEX_AT + 32..FILLER_AT] != b"  "
        || &record[filler_end..98] != b"    "
        || &record[98..] != b"\r\n"
        || record[INDEX_AT..INDEX_AT + 16].iter().any(|&b| b != b'0')
    {
        return None;
    }
    let mut index = 0u64;
    for (d, &c) in record[INDEX_AT + 16..INDEX_AT + 32].iter().enumerate() {
        let nibble = match c {
            b'0'..=b'9' => c - b'0',
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        let at = FILLER_AT + GROUP_LEN * d;
        if record[at..at + GROUP_LEN]
            .iter()
            .any(|&b| b != b'A' + nibble)
        {
            return None;
        }
        index = index << 4 | u64::from(nibble);
    }
    Some(index)
}

/// The key of a record.
///
/// # Panics
/// If `record` is shorter than [`KEY_LEN`].
pub fn key_of(record: &[u8]) -> Key {
    record[..KEY_LEN]
        .try_into()
        .expect("a record starts with its key")
}

/// An order-independent checksum of a multiset of records: the sum modulo 2^128 of each
/// record's BLAKE3 truncated to its first 16 bytes (read little-endian). Shown as 32 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Checksum(pub u128);

impl Checksum {
    /// The checksum of one record.
    pub fn of_record(record: &[u8]) -> Self {
        let hash = blake3::hash(record);
        let mut low = [0u8; 16];
        low.copy_from_slice(&hash.as_bytes()[..16]);
        Self(u128::from_le_bytes(low))
    }

    /// The checksum of the union of the two multisets.
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self(self.0.wrapping_add(other.0))
    }

    /// Reads 32 hex digits (either case), as [`Display`](fmt::Display) writes them.
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(s, 16).ok().map(Self)
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What a checker reports over a sequence of records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordSummary {
    /// Records seen.
    pub records: u64,
    /// Their [`Checksum`].
    pub checksum: Checksum,
    /// Records whose key equals the previous record's; in sorted data, the number of records
    /// minus the number of distinct keys.
    pub duplicate_keys: u64,
    /// The first record's key.
    pub first_key: Option<Key>,
    /// The last record's key.
    pub last_key: Option<Key>,
    /// Records whose key is smaller than the previous record's.
    pub unordered: u64,
    /// The index (from 0, in this sequence) of the first of them.
    pub first_unordered: Option<u64>,
    /// Records whose payload is not the one [`RecordGenerator`] writes ([`payload_index`]).
    pub malformed: u64,
    /// The index of the first of them.
    pub first_malformed: Option<u64>,
}

impl RecordSummary {
    /// The summary of no records.
    pub fn new() -> Self {
        Self::default()
    }

    /// The summary of the records of `buf`.
    ///
    /// # Panics
    /// If `buf.len()` is not a multiple of [`RECORD_LEN`].
    pub fn of(buf: &[u8]) -> Self {
        let mut s = Self::new();
        s.push_all(buf);
        s
    }

    /// Adds the next record.
    ///
    /// # Panics
    /// If `record` is not [`RECORD_LEN`] bytes.
    pub fn push(&mut self, record: &[u8]) {
        assert_eq!(record.len(), RECORD_LEN, "a record is {RECORD_LEN} bytes");
        let key = key_of(record);
        match &self.last_key {
            None => self.first_key = Some(key),
            Some(last) => match key.cmp(last) {
                std::cmp::Ordering::Less => {
                    self.unordered += 1;
                    self.first_unordered.get_or_insert(self.records);
                }
                std::cmp::Ordering::Equal => self.duplicate_keys += 1,
                std::cmp::Ordering::Greater => {}
            },
        }
        if payload_index(record).is_none() {
            self.malformed += 1;
            self.first_malformed.get_or_insert(self.records);
        }
        self.last_key = Some(key);
        self.checksum = self.checksum.plus(Checksum::of_record(record));
        self.records += 1;
    }

    /// Adds the records of `buf`, in order.
    ///
    /// # Panics
    /// If `buf.len()` is not a multiple of [`RECORD_LEN`].
    pub fn push_all(&mut self, buf: &[u8]) {
        assert!(
            buf.len().is_multiple_of(RECORD_LEN),
            "{} bytes are not whole records",
            buf.len()
        );
        for record in buf.chunks_exact(RECORD_LEN) {
            self.push(record);
        }
    }

    /// The summary of this sequence followed by `next` (indices in `next` shifted by this
    /// sequence's length): the same as pushing both sequences' records one after the other.
    #[must_use]
    pub fn then(&self, next: &Self) -> Self {
        let shift = |i: Option<u64>| i.map(|i| i + self.records);
        let (mut boundary_unordered, mut boundary_duplicate) = (0, 0);
        if let (Some(last), Some(first)) = (&self.last_key, &next.first_key) {
            match first.cmp(last) {
                std::cmp::Ordering::Less => boundary_unordered = 1,
                std::cmp::Ordering::Equal => boundary_duplicate = 1,
                std::cmp::Ordering::Greater => {}
            }
        }
        Self {
            records: self.records + next.records,
            checksum: self.checksum.plus(next.checksum),
            duplicate_keys: self.duplicate_keys + next.duplicate_keys + boundary_duplicate,
            first_key: self.first_key.or(next.first_key),
            last_key: next.last_key.or(self.last_key),
            unordered: self.unordered + next.unordered + boundary_unordered,
            first_unordered: self.first_unordered.or(if boundary_unordered == 1 {
                Some(self.records)
            } else {
                shift(next.first_unordered)
            }),
            malformed: self.malformed + next.malformed,
            first_malformed: self.first_malformed.or(shift(next.first_malformed)),
        }
    }

    /// No record is smaller than the one before it.
    pub fn is_sorted(&self) -> bool {
        self.unordered == 0
    }
}

/// A key as 20 lower-case hex digits.
pub fn key_hex(key: &Key) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    fn records(seed: u64, d: KeyDistribution, start: u64, n: usize) -> Vec<u8> {
        let mut g = RecordGenerator::new(seed, d).unwrap();
        g.seek(start);
        let mut buf = vec![0u8; n * RECORD_LEN];
        g.fill(&mut buf);
        buf
    }

    fn distribution() -> impl Strategy<Value = KeyDistribution> {
        prop_oneof![
            Just(KeyDistribution::Uniform),
            (1.0..=MAX_SKEW).prop_map(|exponent| KeyDistribution::Skewed { exponent }),
            (1u64..1000).prop_map(|distinct| KeyDistribution::Duplicates { distinct }),
        ]
    }

    /// The records of `buf` sorted by key with the standard library's sort.
    fn sorted(buf: &[u8]) -> Vec<u8> {
        let mut rs: Vec<&[u8]> = buf.chunks(RECORD_LEN).collect();
        rs.sort_by(|a, b| a[..KEY_LEN].cmp(&b[..KEY_LEN]));
        rs.concat()
    }

    #[test]
    fn known_record_and_layout() {
        let r = RecordGenerator::record(0, KeyDistribution::Uniform, 0x1234).unwrap();
        let expected = format!("  {:032X}  {}BBBCCCDDDEEE    \r\n", 0x1234, "A".repeat(36));
        assert_eq!(&r[KEY_LEN..], expected.as_bytes());
        assert_eq!(payload_index(&r), Some(0x1234));
        let last = RecordGenerator::record(5, KeyDistribution::Uniform, u64::MAX).unwrap();
        assert_eq!(payload_index(&last), Some(u64::MAX));
        assert_eq!(
            &last[INDEX_AT..INDEX_AT + 32],
            b"0000000000000000FFFFFFFFFFFFFFFF"
        );
        // Different seeds, different keys; same seed, same record.
        let other = RecordGenerator::record(1, KeyDistribution::Uniform, 0x1234).unwrap();
        assert_ne!(r[..KEY_LEN], other[..KEY_LEN]);
        assert_eq!(
            r,
            RecordGenerator::record(0, KeyDistribution::Uniform, 0x1234).unwrap()
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        for bad in [0.5, 65.0, f64::NAN, f64::INFINITY] {
            let e = RecordGenerator::new(0, KeyDistribution::Skewed { exponent: bad }).unwrap_err();
            assert!(matches!(e, RecordError::BadSkew(_)), "{bad}: {e}");
        }
        assert_eq!(
            RecordGenerator::new(0, KeyDistribution::Duplicates { distinct: 0 }).unwrap_err(),
            RecordError::NoDistinctKeys
        );
    }

    #[test]
    fn duplicates_mode_has_at_most_k_keys_and_uses_them() {
        for k in [1u64, 2, 7, 100] {
            let buf = records(3, KeyDistribution::Duplicates { distinct: k }, 0, 5000);
            let keys: HashSet<&[u8]> = buf.chunks(RECORD_LEN).map(|r| &r[..KEY_LEN]).collect();
            assert!(keys.len() as u64 <= k, "{} keys > {k}", keys.len());
            // 5000 draws from 100 keys leave none out (each missed with probability 1e-22).
            assert_eq!(keys.len() as u64, k);
            let s = RecordSummary::of(&sorted(&buf));
            assert_eq!(s.duplicate_keys, 5000 - k);
        }
    }

    /// The share of the most frequent first key byte: about 1/4 with exponent 4, about 1/256
    /// uniform. Seeds are fixed, so the counts are too; the margins are many standard deviations
    /// wide all the same (uniform: mean 39 per byte, sd 6; skewed: 2500, sd 43).
    #[test]
    fn skewed_keys_crowd_the_low_end() {
        let top_share = |d| {
            let buf = records(11, d, 0, 10_000);
            let mut counts: HashMap<u8, u32> = HashMap::new();
            for r in buf.chunks(RECORD_LEN) {
                *counts.entry(r[0]).or_default() += 1;
            }
            let (&byte, &n) = counts.iter().max_by_key(|(_, &n)| n).unwrap();
            (byte, f64::from(n) / 10_000.0)
        };
        let (_, uniform) = top_share(KeyDistribution::Uniform);
        let (byte, skewed) = top_share(KeyDistribution::Skewed { exponent: 4.0 });
        assert!(uniform < 0.02, "uniform top share {uniform}");
        assert_eq!(byte, 0);
        assert!((0.2..0.3).contains(&skewed), "skewed top share {skewed}");
        // Exponent 1 is uniform.
        let (_, one) = top_share(KeyDistribution::Skewed { exponent: 1.0 });
        assert!(one < 0.02, "exponent 1 top share {one}");
        // Skewed keys still rarely repeat.
        let buf = records(11, KeyDistribution::Skewed { exponent: 4.0 }, 0, 10_000);
        assert_eq!(RecordSummary::of(&sorted(&buf)).duplicate_keys, 0);
    }

    #[test]
    fn checksum_hex_round_trips() {
        let c = Checksum(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(c.to_string(), "0123456789abcdef0011223344556677");
        assert_eq!(Checksum::from_hex(&c.to_string().to_uppercase()), Some(c));
        assert_eq!(Checksum::from_hex("123"), None);
        assert_eq!(Checksum::from_hex(&"g".repeat(32)), None);
    }

    #[test]
    fn empty_summary() {
        let s = RecordSummary::of(&[]);
        assert_eq!(s, RecordSummary::new());
        assert!(s.is_sorted());
        assert_eq!(s.first_key, None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Record i depends on (seed, i) only: any split into chunks, generated from any seek
        /// position, equals the whole; the payload names the index.
        #[test]
        fn chunks_equal_the_whole(
            seed in any::<u64>(),
            d in distribution(),
            start in 0u64..1 << 40,
            cuts in proptest::collection::vec(0usize..200, 0..5),
        ) {
            let whole = records(seed, d, start, 200);
            let mut cuts = cuts;
            cuts.push(0);
            cuts.push(200);
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            for w in cuts.windows(2) {
                pieces.extend(records(seed, d, start + w[0] as u64, w[1] - w[0]));
            }
            prop_assert_eq!(&pieces, &whole);
            for (i, r) in whole.chunks(RECORD_LEN).enumerate() {
                prop_assert_eq!(payload_index(r), Some(start + i as u64));
            }
            let one = RecordGenerator::record(seed, d, start + 17).unwrap();
            prop_assert_eq!(&one[..], &whole[17 * RECORD_LEN..18 * RECORD_LEN]);
        }

        /// Any permutation has the same checksum; one flipped bit anywhere changes it, and the
        /// payload check finds it when it is in the payload.
        #[test]
        fn checksum_is_order_independent_and_sensitive(
            seed in any::<u64>(),
            d in distribution(),
            perm in Just((0..50usize).collect::<Vec<_>>()).prop_shuffle(),
            flip in 0usize..50 * RECORD_LEN,
            bit in 0u8..8,
        ) {
            let buf = records(seed, d, 0, 50);
            let permuted: Vec<u8> = perm
                .iter()
                .flat_map(|&i| buf[i * RECORD_LEN..(i + 1) * RECORD_LEN].to_vec())
                .collect();
            let whole = RecordSummary::of(&buf);
            prop_assert_eq!(RecordSummary::of(&permuted).checksum, whole.checksum);
            let mut bad = buf.clone();
            bad[flip] ^= 1 << bit;
            let s = RecordSummary::of(&bad);
            prop_assert_ne!(s.checksum, whole.checksum);
            if flip % RECORD_LEN >= KEY_LEN {
                prop_assert_eq!(s.malformed, 1);
                prop_assert_eq!(s.first_malformed, Some((flip / RECORD_LEN) as u64));
            }
        }

        /// The order check against brute force: sorted data has no record out of order, and
        /// `unordered` and the first of them are what a direct comparison of neighbours finds.
        #[test]
        fn order_check_matches_brute_force(
            seed in any::<u64>(),
            d in distribution(),
            n in 0usize..120,
            swaps in proptest::collection::vec((0usize..120, 0usize..120), 0..4),
        ) {
            let buf = sorted(&records(seed, d, 0, n));
            let s = RecordSummary::of(&buf);
            prop_assert!(s.is_sorted());
            prop_assert_eq!(s.records, n as u64);
            let mut rs: Vec<Vec<u8>> = buf.chunks(RECORD_LEN).map(<[u8]>::to_vec).collect();
            for (a, b) in swaps {
                if n > 0 {
                    rs.swap(a % n, b % n);
                }
            }
            let bad: Vec<u8> = rs.concat();
            let s = RecordSummary::of(&bad);
            let down: Vec<u64> = (1..rs.len())
                .filter(|&i| rs[i][..KEY_LEN] < rs[i - 1][..KEY_LEN])
                .map(|i| i as u64)
                .collect();
            let same = (1..rs.len()).filter(|&i| rs[i][..KEY_LEN] == rs[i - 1][..KEY_LEN]).count();
            prop_assert_eq!(s.unordered, down.len() as u64);
            prop_assert_eq!(s.first_unordered, down.first().copied());
            prop_assert_eq!(s.duplicate_keys, same as u64);
            prop_assert_eq!(s.is_sorted(), rs.windows(2).all(|w| w[0][..KEY_LEN] <= w[1][..KEY_LEN]));
            prop_assert_eq!(s.first_key, rs.first().map(|r| key_of(r)));
            prop_assert_eq!(s.last_key, rs.last().map(|r| key_of(r)));
        }

        /// Summaries of consecutive parts combine into the summary of the whole.
        #[test]
        fn summaries_compose(
            seed in any::<u64>(),
            d in distribution(),
            n in 0usize..100,
            cut in 0usize..100,
            sort_it in any::<bool>(),
        ) {
            let mut buf = records(seed, d, 0, n);
            if sort_it {
                buf = sorted(&buf);
            }
            let cut = cut.min(n) * RECORD_LEN;
            let parts = RecordSummary::of(&buf[..cut]).then(&RecordSummary::of(&buf[cut..]));
            prop_assert_eq!(parts, RecordSummary::of(&buf));
        }
    }
}
