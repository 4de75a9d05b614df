//! Hostile input at a group member's port (issue 8): strangers that connect and send nothing,
//! drip a handshake a byte at a time (slowloris), claim a huge frame, or send garbage are each
//! cut off within the handshake deadline, with a reason (`GroupEvent::Refused`), and none of
//! them keeps the member from the group: with a hundred more silent ones at it, a keyed
//! broadcast still completes.

mod common;

use common::{leave_all, member_config, pump, run, spawn_member};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use windrose_model::NodeId;
use windrose_net::auth::{GroupKey, NoiseHandshake};
use windrose_net::host_driver::GroupConfig;
use windrose_net::random_payload;
use windrose_net::wire::{CONTROL_MAGIC, CONTROL_VERSION};

/// The members' handshake deadline.
const T: Duration = Duration::from_secs(1);
/// How long any hostile connection may stay open: far past the handshake deadline, only so a
/// regression fails instead of hanging.
const GUARD: Duration = Duration::from_secs(20);

/// Reads from `s` until the member closes the connection (EOF or reset); false if it is still
/// open after `within`.
async fn closed_by_node(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A control frame header: hello kind, a body of `len` bytes to follow.
fn hello_header(len: u32) -> Vec<u8> {
    let mut h = vec![CONTROL_MAGIC | CONTROL_VERSION, 1, 0, 0];
    h.extend_from_slice(&len.to_be_bytes());
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_cut_off_and_the_member_still_serves_the_group() {
    let (group, mut listeners) = common::loopback("hostile", 2, 1).await;
    let key = GroupKey::from_bytes([7; 32]);
    let keyed = |c: &mut GroupConfig| {
        c.handshake = Arc::new(NoiseHandshake::new(key.clone()));
        c.timeouts.handshake = T;
    };
    let one = spawn_member(listeners.pop().unwrap(), member_config(&group, 1, &keyed));
    let mut members = vec![one];
    let addr = group.member(NodeId(1)).unwrap().addr.clone();

    // Silent: connects and says nothing, many times over.
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Slowloris: a plausible hello header, then its body a byte every 100 ms (20 s in all).
    let drip = {
        let addr = addr.clone();
        tokio::spawn(async move {
            let mut s = TcpStream::connect(&addr).await.unwrap();
            s.write_all(&hello_header(200)).await.unwrap();
            let (mut rd, mut wr) = s.into_split();
            let writer = tokio::spawn(async move {
                for _ in 0..200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if wr.write_all(b"x").await.is_err() {
                        return false;
                    }
                }
                true
            });
            let mut buf = [0u8; 256];
            let closed = tokio::time::timeout(GUARD, async {
                loop {
                    match rd.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await
            .is_ok();
            let finished_dripping = writer.await.unwrap();
            (closed, finished_dripping)
        })
    };
    // A header announcing a 4 GiB body, and plain garbage.
    let mut huge = TcpStream::connect(&addr).await.unwrap();
    huge.write_all(&hello_header(u32::MAX)).await.unwrap();
    let mut garbage = TcpStream::connect(&addr).await.unwrap();
    garbage.write_all(&random_payload(4096, 9)).await.unwrap();
    assert!(
        closed_by_node(&mut huge, GUARD).await,
        "the huge frame's sender kept its connection"
    );
    assert!(
        closed_by_node(&mut garbage, GUARD).await,
        "the garbage sender kept its connection"
    );

    for (i, s) in silent.iter_mut().enumerate() {
        assert!(
            closed_by_node(s, GUARD).await,
            "silent connection {i} was kept open"
        );
    }
    let (closed, finished_dripping) = drip.await.unwrap();
    assert!(
        closed && !finished_dripping,
        "the slow dripper was not cut off"
    );
    pump(&mut members, |ms| ms[0].refused.len() >= 103).await;
    let reasons = members[0].refused.clone();
    let count = |needle: &str| reasons.iter().filter(|r| r.contains(needle)).count();
    assert_eq!(count("exceeds the limit"), 1, "{reasons:#?}");
    assert_eq!(
        count("where a handshake frame was expected"),
        1,
        "{reasons:#?}"
    );
    assert_eq!(
        count("within 1s"),
        101,
        "silent and dripping peers: {reasons:#?}"
    );

    // With a hundred more silent strangers at it, the root's keyed broadcast completes.
    let mut more = Vec::new();
    for _ in 0..100 {
        more.push(TcpStream::connect(&addr).await.unwrap());
    }
    let zero = spawn_member(listeners.pop().unwrap(), member_config(&group, 0, &keyed));
    members.insert(0, zero);
    pump(&mut members, |ms| ms[0].connected >= 1).await;
    let spec = common::chain(&group, 1 << 16);
    let data = random_payload(4 << 20, 5);
    let (t, finished, failed) = run(&mut members, 0, spec, data.clone()).await;
    assert_eq!((finished, failed), (2, 0));
    assert!(members[1].got[&t] == data[..]);
    leave_all(members).await;
    drop(more);
}
