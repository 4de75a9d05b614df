//! Issue 21's defects of the real runtime, in process: strangers at a waiting node, group files
//! that differ between members, sources that change during a run.

mod common;

use common::{config, loopback};
use std::time::Duration;
use windrose_model::NodeId;
use windrose_net::trees::{group_costs, TreeKind};
use windrose_net::{random_payload, run_node, run_root, RootJob};

/// Every wait of these tests: far past the deadlines they use, only so a regression fails
/// instead of hanging.
const BOUND: Duration = Duration::from_secs(30);

/// Defect 4: a member whose copy of the group file puts a node in another cluster (the rest
/// unchanged: name, version, ids, addresses) is refused in the handshake, plain or keyed, with
/// both digests named; the root's run does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_another_copy_of_the_group_is_refused_with_both_digests() {
    use std::sync::Arc;
    use windrose_model::ClusterId;
    use windrose_net::auth::{GroupKey, NoiseHandshake};
    use windrose_net::group::Group;
    for keyed in [false, true] {
        let (group, mut listeners) = loopback("digest", 3, 1).await;
        let mut members = group.members().to_vec();
        members[2].cluster = ClusterId(1);
        let other = Arc::new(Group::new("digest", members).unwrap());
        assert_ne!(group.digest(), other.digest());
        let with_key = |mut c: windrose_net::NodeConfig| {
            if keyed {
                c.handshake = Arc::new(NoiseHandshake::new(GroupKey::from_bytes([3; 32])));
            }
            c
        };
        let t = Duration::from_secs(2);
        let n2 = tokio::spawn(run_node(
            listeners.pop().unwrap(),
            with_key(config(&other, 2, t)),
        ));
        let n1 = tokio::spawn(run_node(
            listeners.pop().unwrap(),
            with_key(config(&group, 1, t)),
        ));
        let tree = TreeKind::Chain
            .build(&group_costs(&group), &group.clusters(), NodeId(0))
            .unwrap();
        let job = RootJob::broadcast(tree, 1 << 16, random_payload(1 << 16, 1));
        let e = tokio::time::timeout(BOUND, run_root(with_key(config(&group, 0, t)), job))
            .await
            .expect("the root does not hang")
            .unwrap_err()
            .to_string();
        for want in [
            "group description mismatch".to_string(),
            group.digest(),
            other.digest(),
        ] {
            assert!(e.contains(&want), "keyed {keyed}: {want:?} not in {e}");
        }
        for n in [n1, n2] {
            let r = tokio::time::timeout(BOUND, n).await.expect("no node hangs");
            assert!(r.unwrap().is_err(), "keyed {keyed}: a node ran");
        }
    }
}
