//! `windrose reproduce weather` in small (6 broadcasts of 4 MiB, the WAN slowed after the
//! second): the simulator's series per policy, and the testbed's CSV read beside it.

#[path = "support/procs.rs"]
mod procs;

use procs::windrose;

fn reproduce(extra: &[&str]) -> std::process::Output {
    windrose()
        .args([
            "reproduce",
            "weather",
            "--count",
            "6",
            "--change-after",
            "2",
            "--size",
            "4MiB",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn outcome<'a>(side: &'a serde_json::Value, policy: &str) -> &'a serde_json::Value {
    side.as_array()
        .unwrap()
        .iter()
        .find(|o| o["policy"] == policy)
        .unwrap_or_else(|| panic!("no {policy} in {side}"))
}

/// The static tree keeps crossing the slowed link; both oracles' post-change trees never do;
/// every broadcast is there, and each oracle is faster in total than every learning policy.
/// The testbed's rows are read as they are (an oracle with only warm-up rows is no run).
#[test]
fn the_simulated_series_separates_the_static_tree_from_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    // Two policies of a testbed run, as data/weather/series.sh prints them.
    let csv = dir.path().join("series.csv");
    let mut text = String::from("policy,broadcast,seconds,start_s,slow_link_bytes,plan\n");
    for k in 1..=6 {
        let after = (k > 2).then(|| format!("{}", (k - 3) as f64 * 10.0));
        let after = after.as_deref().unwrap_or("");
        text += &format!(
            "static:balanced-path,{k},{},{after},13000000,tree kept\n",
            4 + k
        );
        let slow = if k == 4 { 0 } else { 4500000 };
        text +=
            &format!("adapt,{k},2,{after},{slow},tree kept (1 link changes taken in; 1 swaps)\n");
    }
    text += "oracle:mst,0,9,0.4,4500000,tree built\n";
    std::fs::write(&csv, text).unwrap();
    let out = reproduce(&["--testbed", csv.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sim = &v["simulator"];
    assert_eq!(sim.as_array().unwrap().len(), 6, "{sim}");
    for o in sim.as_array().unwrap() {
        assert_eq!(o["broadcasts"].as_array().unwrap().len(), 6, "{o}");
    }
    let st = outcome(sim, "static:balanced-path");
    assert!(st["avoided_after_collectives"].is_null(), "{st}");
    for name in ["oracle", "oracle:mst"] {
        let oracle = outcome(sim, name);
        assert_eq!(oracle["avoided_after_collectives"], 1, "{oracle}");
        assert_eq!(oracle["avoided_after_probe_periods"], 0.0, "{oracle}");
        for o in sim.as_array().unwrap() {
            if o["policy"].as_str().unwrap().starts_with("oracle") {
                continue;
            }
            assert!(
                oracle["total_s"].as_f64() <= o["total_s"].as_f64(),
                "{name} {} s, {} {} s",
                oracle["total_s"],
                o["policy"],
                o["total_s"]
            );
        }
    }
    // The testbed's CSV: totals, and the adaptive run avoided the link at its 4th broadcast,
    // the second after the change, 10 s (20 probe periods) after it; the warm-up is left out.
    let tb = &v["testbed"];
    let st = outcome(tb, "static:balanced-path");
    assert_eq!(st["total_s"], 5.0 + 6.0 + 7.0 + 8.0 + 9.0 + 10.0);
    assert!(st["avoided_after_collectives"].is_null());
    let ad = outcome(tb, "adapt");
    assert_eq!(ad["avoided_after_collectives"], 2);
    assert_eq!(ad["avoided_after_probe_periods"], 20.0);
    assert!(
        tb.as_array()
            .unwrap()
            .iter()
            .all(|o| o["policy"] != "oracle:mst"),
        "only warm-up rows: {tb}"
    );
    assert_eq!(v["testbed_verdict"], serde_json::Value::Null);
}

#[test]
fn bad_arguments_and_a_bad_testbed_file_are_named() {
    let out = windrose()
        .args([
            "reproduce",
            "weather",
            "--count",
            "3",
            "--change-after",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--change-after 3 must be at least 1 and below --count 3"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bad.csv");
    std::fs::write(
        &csv,
        "policy,broadcast,seconds,start_s,slow_link_bytes\nadapt,x,1,,0\n",
    )
    .unwrap();
    let out = windrose()
        .args([
            "reproduce",
            "weather",
            "--count",
            "2",
            "--change-after",
            "1",
        ])
        .args(["--size", "4MiB", "--testbed", csv.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.csv:2: bad broadcast index"), "{err}");
}

/// Issue 16's probe overhead, from the prober's configuration and its frame sizes, checked
/// against the frames counted in the simulator: an idle group of four (two sites of two)
/// for 60 simulated seconds, once with the prober (a ping to every peer every 500 ms, each
/// answered by a pong; 8-byte frame header + 16-byte body each) and once without. The
/// difference in bytes every member sent is exactly its pings and pongs: per link and
/// direction 2 frames x 24 bytes per period, 96 B/s (before TCP/IP headers: on the wire each
/// frame is a segment of its own on the probe lane, about 90 bytes with Ethernet, IPv4 and
/// TCP with timestamps, 360 B/s).
#[test]
fn probe_overhead_per_link_is_two_24_byte_frames_per_period_each_way() {
    use std::time::Duration;
    use windrose_model::platform::{ClusterSpec, Platform};
    use windrose_model::NodeId;
    use windrose_proto::probe::ProbeConfig;
    use windrose_sim::engine::SimConfig;
    use windrose_sim::group::{group, leave_input};

    const N: u32 = 4;
    const SECONDS: f64 = 60.0;
    const PERIOD: Duration = Duration::from_millis(500);
    let sent = |probe: bool| -> Vec<u64> {
        let platform = Platform::builder()
            .cluster(ClusterSpec::uniform(2, 1e8, 1e9, 1e-4))
            .cluster(ClusterSpec::uniform(2, 1e8, 1e9, 1e-4))
            .wan_all(5e6, 0.01)
            .build()
            .unwrap();
        let mut sim = group(platform, SimConfig::default(), 3, |c| {
            c.probe = probe.then_some(ProbeConfig {
                period: PERIOD,
                rounds: u32::MAX,
            });
        })
        .unwrap();
        for n in 0..N {
            sim.input_at(NodeId(n), SECONDS, leave_input()).unwrap();
        }
        let m = sim.run().unwrap();
        m.nodes.iter().map(|n| n.wire_bytes_sent).collect()
    };
    let (with, without) = (sent(true), sent(false));
    let frame = 8 + 16;
    let periods = SECONDS / PERIOD.as_secs_f64();
    for n in 0..N as usize {
        let probe_bytes = with[n] - without[n];
        // To each of 3 peers: its pings and its pongs to the peer's pings.
        let per_link_b_s = probe_bytes as f64 / 3.0 / SECONDS;
        eprintln!("member {n}: {probe_bytes} probe bytes in {SECONDS} s, {per_link_b_s:.1} B/s per link and direction");
        let expected = 3.0 * 2.0 * frame as f64 * periods;
        // The first and last rounds may fall either side of the window.
        assert!(
            (probe_bytes as f64 - expected).abs() <= 3.0 * 2.0 * frame as f64 * 2.0,
            "member {n}: {probe_bytes} probe bytes, configured {expected}"
        );
    }
}
