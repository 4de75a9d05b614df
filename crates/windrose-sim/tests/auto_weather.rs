//! Issue 16: an auto workload (`kind = "auto"`) chooses its protocol again at each repetition,
//! from the platform as `[[change]]` entries and mayhem draws have changed it by the
//! repetition's start, and plans a broadcast's tree on that platform too. Asserts the
//! simulator's outcomes (choices, completions), never wall time.

use std::path::Path;
use windrose_model::platform::Platform;
use windrose_model::{ClusterId, NodeId};
use windrose_proto::choice::Candidate;
use windrose_sim::auto::{choose_on, run_point, simulate, AutoSettings};
use windrose_sim::scenario::{
    parse_scenario, run_scenario, RepetitionReport, Report, Scenario, WorkloadKind,
};

/// Gigabit clusters of the given sizes (0.1 ms inside, access links that never limit), every
/// pair of clusters joined by WAN links of `wan_ms` ms one way and `wan_mb_s` MB/s: the
/// choice grid's platforms (`windrose_sim::auto::grid_platform`) as a file.
fn platform_toml(shape: &[usize], wan_ms: f64, wan_mb_s: f64) -> String {
    let mut s = String::from("[platform]\n");
    for k in shape {
        s.push_str(&format!(
            "[[platform.cluster]]\nnodes = {k}\nnode_uplink_bytes_s = 117e6\n\
             node_downlink_bytes_s = 117e6\naccess_up_bytes_s = 1e11\n\
             access_down_bytes_s = 1e11\nintra_latency_s = 1e-4\n"
        ));
    }
    let table = |x: f64| {
        let rows: Vec<String> = (0..shape.len())
            .map(|i| {
                let row: Vec<String> = (0..shape.len())
                    .map(|j| if i == j { "0".into() } else { format!("{x:?}") })
                    .collect();
                format!("[{}]", row.join(", "))
            })
            .collect();
        format!("[{}]", rows.join(", "))
    };
    s.push_str(&format!(
        "[platform.wan]\nbytes_s = {}\nlatency_s = {}\n",
        table(wan_mb_s * 1e6),
        table(wan_ms / 1e3)
    ));
    s
}

/// `[[change]]` entries at `at_s` setting the WAN latency between each pair of clusters
/// `(a, b)` (both directions) to `ms`.
fn latency_changes(at_s: f64, pairs: &[(usize, usize)], ms: f64) -> String {
    pairs
        .iter()
        .map(|(a, b)| {
            format!(
                "[[change]]\nat_s = {at_s:?}\nlink = \"wan:{a}:{b}\"\nlatency_s = {:?}\n\
                 both_directions = true\n",
                ms / 1e3
            )
        })
        .collect()
}

/// Every pair of `k` clusters once.
fn all_pairs(k: usize) -> Vec<(usize, usize)> {
    (0..k)
        .flat_map(|a| (a + 1..k).map(move |b| (a, b)))
        .collect()
}

fn scenario(text: &str) -> Scenario {
    parse_scenario(text, Path::new("auto-weather.toml")).unwrap()
}

fn auto_file(platform: &str, changes: &str, bytes: u64, repetitions: u64) -> String {
    format!(
        "{platform}{changes}\n[workload]\nkind = \"auto\"\nroot = 0\nmessage_bytes = {bytes}\n\
         repetitions = {repetitions}\n"
    )
}

/// When repetition `rep` of `r` delivered the whole message to its last receiver, seconds
/// after its start: a broadcast's makespan, a multicast's completion (its nodes may go on
/// serving pieces after that; the candidates' times in [`run_point`] are completions too).
fn completion(r: &Report, rep: usize) -> f64 {
    let multicasts = |x: &RepetitionReport| match &x.auto {
        Some(a) => a.chosen != Candidate::Broadcast,
        None => r.protocol == WorkloadKind::Multicast,
    };
    let x = &r.repetitions[rep];
    if !multicasts(x) {
        return x.makespan_s.unwrap();
    }
    // `Report::multicast` has one outcome per repetition that multicast.
    let k = r.repetitions[..rep]
        .iter()
        .filter(|x| multicasts(x))
        .count();
    r.multicast[k].completion_s.unwrap()
}

/// Each repetition's chosen protocol.
fn choices(r: &Report) -> Vec<Candidate> {
    r.repetitions
        .iter()
        .map(|x| x.auto.as_ref().unwrap().chosen)
        .collect()
}

fn run(s: &Scenario) -> Report {
    let r = run_scenario(s, 1, None).unwrap();
    assert!(r.all_finished(), "{}", r.summary());
    r
}

/// `platform` with the WAN latency between each pair of `pairs` set to `ms`, both ways: what
/// [`latency_changes`] makes of it.
fn with_latency(platform: &Platform, pairs: &[(usize, usize)], ms: f64) -> Platform {
    let mut p = platform.clone();
    for &(a, b) in pairs {
        for (x, y) in [(a, b), (b, a)] {
            p.set_wan_latency(ClusterId(x as u32), ClusterId(y as u32), ms / 1e3)
                .unwrap();
        }
    }
    p
}

/// Repetition `rep` of `r` ran on the platform of `platform` (a `[platform]` table): its
/// choice is the one made on that platform from scratch, and its completion is within 10 % of
/// the best of every candidate run there, both as the choice plans them and as scenarios of
/// their own (the tree broadcast over a Balanced-Path tree, MOB, Balanced Multicasting planned
/// from the platform).
fn assert_near_best(r: &Report, rep: usize, platform: &str) {
    let x = &r.repetitions[rep];
    let a = x.auto.as_ref().expect("an auto repetition");
    let bytes = r.message_bytes;
    let p = scenario(&auto_file(platform, "", bytes, 1)).platform;
    let point = run_point(&p, r.root, bytes, &AutoSettings::default()).unwrap();
    assert_eq!(a.chosen, point.chosen, "repetition {rep}: {}", a.explain);
    assert_eq!(a.completion_s, x.makespan_s);
    let done = completion(r, rep);
    let mut candidates = point.simulated_s.clone();
    for (c, workload) in [
        (
            Candidate::Broadcast,
            "protocol = \"broadcast\"\ntree = \"balanced-path\"\nsegment_bytes = \"256KiB\"",
        ),
        (
            Candidate::Mob,
            "kind = \"multicast\"\nprotocol = \"mob\"\npiece_bytes = \"256KiB\"",
        ),
        (
            Candidate::Balanced,
            "kind = \"multicast\"\nprotocol = \"balanced\"\npiece_bytes = \"256KiB\"",
        ),
    ] {
        // The candidate as a scenario of its own, on the repetition's platform.
        let own = scenario(&format!(
            "{platform}\n[workload]\n{workload}\nroot = {}\nmessage_bytes = {bytes}\n",
            r.root
        ));
        candidates.push((c, completion(&run(&own), 0)));
    }
    let best = candidates.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
    assert!(
        done <= 1.1 * best,
        "repetition {rep}: auto's {} took {done} s, the candidates {candidates:?}\n{}",
        a.chosen,
        a.explain
    );
}

/// The WAN's latency changes between the two repetitions (at the instant the first one ends)
/// so that the best protocol changes: the second repetition chooses again, from the changed
/// platform, and each repetition's choice is within 10 % of the best candidate on its own
/// platform.
#[test]
fn the_choice_follows_the_wan_between_repetitions() {
    let shape = [8, 4, 2];
    let pairs = all_pairs(shape.len());
    // 1 MiB over 100 MB/s: Balanced Multicasting's several trees win while the WAN answers
    // in 1 ms; at 100 ms its start-up costs more than it gains, and a tree wins. Then the
    // reverse.
    for (before_ms, after_ms, first, second) in [
        (1.0, 100.0, Candidate::Balanced, Candidate::Broadcast),
        (100.0, 1.0, Candidate::Broadcast, Candidate::Balanced),
    ] {
        let bytes = 1u64 << 20;
        let platform = platform_toml(&shape, before_ms, 100.0);
        // Without the change: the first repetition and when it ends.
        let quiet = run(&scenario(&auto_file(&platform, "", bytes, 2)));
        let end = quiet.repetitions[0].end_s;
        let s = scenario(&auto_file(
            &platform,
            &latency_changes(end, &pairs, after_ms),
            bytes,
            2,
        ));
        let r = run(&s);
        assert_eq!(choices(&r), [first, second], "{}", r.summary());
        assert_eq!(r.changes_applied, 2 * pairs.len());
        // The change came after the first repetition's last delivery and before the second
        // started: the first ran as without it.
        assert_eq!(r.repetitions[0], quiet.repetitions[0]);
        assert_eq!(r.repetitions[1].start_s, end);
        // The top-level choice is the first repetition's.
        assert_eq!(r.auto, r.repetitions[0].auto);
        // What ran: the kind of the first repetition.
        let kind = |c: Candidate| match c {
            Candidate::Broadcast => "broadcast",
            _ => "multicast",
        };
        assert_eq!(r.protocol.name(), kind(first));
        // One multicast outcome, the multicasting repetition's.
        assert_eq!(r.multicast.len(), 1);
        // The platform as the change leaves it.
        let changed = platform_toml(&shape, after_ms, 100.0);
        assert_eq!(
            scenario(&auto_file(&changed, "", bytes, 1)).platform,
            with_latency(&s.platform, &pairs, after_ms)
        );
        assert_near_best(&r, 0, &platform);
        assert_near_best(&r, 1, &changed);
        let text = r.summary();
        assert!(
            text.contains(&format!(
                "repetition 1 (from {end:.6} s): auto chose {second} (latency decides"
            )) || text.contains(&format!(
                "repetition 1 (from {end:.6} s): auto chose {second} (bandwidth decides"
            )),
            "{text}"
        );
    }
}

/// Without changes every repetition makes the same choice, for each protocol the choice can
/// pick, and runs it alike.
#[test]
fn without_changes_every_repetition_chooses_the_same() {
    for (wan_ms, wan_mb_s, bytes, want) in [
        (1.0, 100.0, 1u64 << 10, Candidate::Broadcast),
        (1.0, 100.0, 256 << 10, Candidate::Mob),
        (100.0, 0.5, 16 << 20, Candidate::Balanced),
    ] {
        let platform = platform_toml(&[4, 4, 4, 4], wan_ms, wan_mb_s);
        let r = run(&scenario(&auto_file(&platform, "", bytes, 3)));
        let first = r.auto.clone().unwrap();
        assert_eq!(first.chosen, want, "{}", first.explain);
        for x in &r.repetitions {
            assert_eq!(x.auto.as_ref(), Some(&first), "repetition {}", x.index);
            assert_eq!(x.makespan_s, r.repetitions[0].makespan_s);
        }
        assert!(
            !r.summary().contains("repetition 1 (from"),
            "{}",
            r.summary()
        );
        assert_near_best(&r, 2, &platform);
    }
}

/// When the choice stays a broadcast, its tree is still planned again on the changed
/// platform: the second repetition runs the tree the planner builds from the slowed view, not
/// the first repetition's.
#[test]
fn a_broadcast_plans_its_tree_on_the_changed_platform() {
    let shape = [8, 4, 2];
    let bytes = 1u64 << 10;
    let platform = platform_toml(&shape, 1.0, 100.0);
    let quiet = run(&scenario(&auto_file(&platform, "", bytes, 2)));
    let end = quiet.repetitions[0].end_s;
    // Clusters 0 and 1 drift 100 ms apart.
    let s = scenario(&auto_file(
        &platform,
        &latency_changes(end, &[(0, 1)], 100.0),
        bytes,
        2,
    ));
    let r = run(&s);
    let changed = with_latency(&s.platform, &[(0, 1)], 100.0);
    let settings = AutoSettings::default();
    let (before, old_tree) = choose_on(&s.platform, NodeId(0), bytes, &settings).unwrap();
    let (after, new_tree) = choose_on(&changed, NodeId(0), bytes, &settings).unwrap();
    assert_eq!(before.chosen, Candidate::Broadcast);
    assert_eq!(after.chosen, Candidate::Broadcast);
    assert_ne!(
        old_tree, new_tree,
        "the change should move the planned tree"
    );
    let on_changed = |tree| {
        simulate(
            &changed,
            NodeId(0),
            bytes,
            Candidate::Broadcast,
            &after,
            tree,
            &settings,
        )
        .unwrap()
    };
    let (old_s, new_s) = (on_changed(&old_tree), on_changed(&new_tree));
    assert_ne!(old_s, new_s);
    assert_eq!(r.repetitions[0], quiet.repetitions[0]);
    assert_eq!(
        r.repetitions[1].makespan_s,
        Some(new_s),
        "old tree: {old_s}"
    );
    let a = r.repetitions[1].auto.as_ref().unwrap();
    assert_eq!(a.predictions, after.predictions);
    assert_ne!(a.predictions, before.predictions);
}

/// Under mayhem the weather changes at every draw: the choices follow it (the predictions
/// move between repetitions) and the run is the same bit for bit with the same seed.
#[test]
fn mayhem_weather_is_followed_deterministically() {
    let text = format!(
        "{}\n[mayhem]\nperiod_s = 2.0\nmin_fraction = 0.05\nmax_fraction = 1.0\n\
         links = \"wan\"\n\n[workload]\nkind = \"auto\"\nroot = 0\n\
         message_bytes = \"4MiB\"\nrepetitions = 4\n",
        platform_toml(&[4, 4, 4, 4], 10.0, 5.0)
    );
    let s = scenario(&text);
    let (a, b) = (run(&s), run(&s));
    assert_eq!(a.repetitions, b.repetitions);
    assert!(a.mayhem_draws >= 2, "{}", a.mayhem_draws);
    let first = &a.repetitions[0].auto.as_ref().unwrap().predictions;
    assert!(
        a.repetitions
            .iter()
            .any(|x| &x.auto.as_ref().unwrap().predictions != first),
        "the predictions never moved: {first:?}"
    );
}

/// `data/scenarios/auto-weather.toml`: the WAN's latency falls from 100 ms to 1 ms while the
/// second repetition runs; it keeps the tree, and every later repetition chooses Balanced
/// Multicasting.
#[test]
fn the_example_file_switches_after_the_repetition_running_at_the_change() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios/auto-weather.toml");
    let s = windrose_sim::scenario::load_scenario(&path).unwrap();
    let r = run(&s);
    let chosen = choices(&r);
    use Candidate::{Balanced, Broadcast};
    assert_eq!(
        chosen,
        [Broadcast, Broadcast, Balanced, Balanced, Balanced, Balanced],
        "{}",
        r.summary()
    );
    let change_s = s.changes[0].at_s;
    let crossing = &r.repetitions[1];
    assert!(crossing.start_s < change_s && change_s < crossing.end_s);
    assert_eq!(r.multicast.len(), 4);
    let text = r.summary();
    assert!(
        text.contains(&format!(
            "repetition 2 (from {:.6} s): auto chose balanced",
            r.repetitions[2].start_s
        )),
        "{text}"
    );
    // The multicasting repetitions' outcomes are listed under their own indices.
    assert!(text.contains("\nrepetition 5: balanced:"), "{text}");
}

/// `data/scenarios/auto-round-a-slow-link.toml`: one WAN link a hundred times slower than the
/// others. The choice runs the broadcast over the view's MST, which goes round it: the run
/// takes what the same file with `kind = "broadcast"` and `tree = "mst"` takes, under a tenth
/// of Balanced-Path's tree (which crosses the slow link), and its report names the MST.
#[test]
fn the_broadcast_goes_round_a_slow_link_over_the_views_mst() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/scenarios/auto-round-a-slow-link.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let auto = run(&scenario(&text));
    let a = auto.repetitions[0].auto.as_ref().unwrap();
    assert_eq!(a.chosen, Candidate::Broadcast);
    assert!(a.explain.contains("over the view's MST"), "{}", a.explain);
    let as_tree = |tree: &str| {
        let t = text.replace(
            "kind = \"auto\"",
            &format!("kind = \"broadcast\"\ntree = \"{tree}\""),
        );
        completion(&run(&scenario(&t)), 0)
    };
    let (got, mst, bp) = (
        completion(&auto, 0),
        as_tree("mst"),
        as_tree("balanced-path"),
    );
    assert!(
        (got - mst).abs() <= 1e-9 * mst,
        "auto {got} s, the MST {mst} s"
    );
    assert!(got < bp / 10.0, "auto {got} s, Balanced-Path {bp} s");
}
