//! The piece store over a manifest whose pieces are shared ([`Manifest::with_shared_pieces`],
//! what the simulator uses): every store still hands out exactly the bytes it was given.

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use windrose_proto::pieces::{Manifest, PieceKeeper, PieceStore};

fn data() -> Bytes {
    Bytes::from(
        (0..10_000u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn same(a: &Bytes, b: &Bytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

#[test]
fn stores_of_a_shared_manifest_hand_out_the_bytes_they_were_given() {
    let data = data();
    let m = Manifest::build(&data, 1_000).unwrap().with_shared_pieces();
    let full = PieceStore::full(&m, &data);
    let mut a = PieceStore::new(&m);
    // Piece 3 reaches `a` as a copy in other memory (equal bytes): `a` keeps that copy.
    let copy = Bytes::copy_from_slice(&data[3_000..4_000]);
    assert!(a.insert(3, copy.clone()));
    assert!(a.insert(5, m.slice(&data, 5)));
    assert!(!a.insert(5, m.slice(&data, 5)), "a piece is stored once");
    assert!(!a.insert(10, m.slice(&data, 9)), "out of range");
    assert!(a.has(3) && a.has(5) && !a.has(4) && !a.has(10));
    assert_eq!((a.held(), a.held_bytes(), a.piece_count()), (2, 2_000, 10));
    assert!(same(a.get(3).unwrap(), &copy));
    assert!(same(a.get(5).unwrap(), &m.slice(&data, 5)));
    assert!(a.get(4).is_none());
    // The root's store made first: its copies are the shared ones.
    assert!(same(full.get(3).unwrap(), &m.slice(&data, 3)));
    assert!(full.is_complete());
    // A store whose first copy of a piece is a different buffer still returns its own.
    let other = Bytes::copy_from_slice(&data);
    let mut b = PieceStore::new(&m);
    for i in 0..10 {
        assert!(b.insert(i, m.slice(&other, i)));
    }
    assert!(b.is_complete());
    let delivered = b.take_deliverable(&m);
    assert_eq!(delivered.len(), 10);
    for (i, (offset, bytes)) in delivered.iter().enumerate() {
        assert_eq!(*offset, i as u64 * 1_000);
        assert!(same(bytes, &m.slice(&other, i as u32)), "piece {i}");
    }
    assert_eq!(
        a.bitfield(Default::default()).iter().collect::<Vec<_>>(),
        [3, 5]
    );
}

#[test]
fn sharing_leaves_the_manifest_equal_and_a_keeper_store_its_own() {
    let data = data();
    let plain = Manifest::build(&data, 1_000).unwrap();
    let m = plain.clone().with_shared_pieces();
    assert_eq!(m, plain);
    struct Copying(Mutex<Vec<Bytes>>);
    impl PieceKeeper for Copying {
        fn keep(&self, _piece: u32, _offset: u64, data: Bytes) -> Bytes {
            let kept = Bytes::copy_from_slice(&data);
            self.0.lock().unwrap().push(kept.clone());
            kept
        }
    }
    let keeper = Arc::new(Copying(Mutex::new(Vec::new())));
    let mut s = PieceStore::with_keeper(&m, Some(keeper.clone()));
    assert!(s.insert(2, m.slice(&data, 2)));
    let kept = keeper.0.lock().unwrap()[0].clone();
    assert!(same(s.get(2).unwrap(), &kept));
    // A later in-memory store sees no copy of the keeper's: it keeps what it is given.
    let mut t = PieceStore::new(&m);
    assert!(t.insert(2, m.slice(&data, 2)));
    assert!(same(t.get(2).unwrap(), &m.slice(&data, 2)));
}
