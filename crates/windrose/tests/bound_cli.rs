//! End-to-end tests of `windrose bound`: the bound per interval of the example scenarios, the
//! completion time it implies, the Balanced Multicasting plan beside it, JSON, and exit code 2
//! for a bad scenario.

#[path = "support/procs.rs"]
mod procs;

use procs::{ok_json as json, scenario, windrose};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn four_clusters_bound_per_interval_and_completion() {
    let v = json(&["bound", &scenario("four-clusters.toml"), "--json"]);
    let iv = v["intervals"].as_array().unwrap();
    // Root 0 in A: A's WAN links add up to 6.5 + 3 + 5 = 14.5 MB/s. At 1 s B-D drops to
    // 0.8 MB/s and the bound to 11.8 MB/s.
    assert_eq!(iv.len(), 2);
    assert!(close(iv[0]["bound_bytes_s"].as_f64().unwrap(), 14.5e6));
    assert_eq!(iv[0]["end_s"].as_f64(), Some(1.0));
    assert!(close(iv[1]["bound_bytes_s"].as_f64().unwrap(), 11.8e6));
    assert!(iv[1]["end_s"].is_null());
    // 16 MiB: 14.5 MB in the first second, the rest at 11.8 MB/s.
    let m = 16.0 * 1024.0 * 1024.0;
    let expect = 1.0 + (m - 14.5e6) / 11.8e6;
    assert!(close(v["completion_s"].as_f64().unwrap(), expect));
    assert!(v["plan"].is_null());
}

#[test]
fn plan_is_reported_against_the_bound() {
    for file in [
        "four-clusters.toml",
        "scatter-two-sites.toml",
        "mayhem.toml",
    ] {
        let v = json(&["bound", &scenario(file), "--plan", "--json"]);
        let bound0 = v["intervals"][0]["bound_bytes_s"].as_f64().unwrap();
        let plan = &v["plan"];
        let rate = plan["rate_bytes_s"].as_f64().unwrap();
        assert!(rate <= bound0 * (1.0 + 1e-9), "{file}");
        // Mayhem's randomly drawn capacities are the hard case (about 75 % at seed 5).
        let floor = if file == "mayhem.toml" { 0.6 } else { 0.95 };
        assert!(rate >= floor * bound0, "{file}: {rate} of {bound0}");
        let sum: f64 = plan["trees"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["rate_bytes_s"].as_f64().unwrap())
            .sum();
        assert!(close(sum, rate));
    }
}

#[test]
fn mayhem_is_seeded() {
    let a = json(&["bound", &scenario("mayhem.toml"), "--seed", "3", "--json"]);
    let b = json(&["bound", &scenario("mayhem.toml"), "--seed", "3", "--json"]);
    assert_eq!(a, b);
    let c = json(&["bound", &scenario("mayhem.toml"), "--seed", "4", "--json"]);
    assert_ne!(
        a["intervals"][0]["bound_bytes_s"],
        c["intervals"][0]["bound_bytes_s"]
    );
}

#[test]
fn human_table() {
    let out = windrose()
        .args(["bound", &scenario("four-clusters.toml"), "--plan"])
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("14.500"), "{text}");
    assert!(text.contains("11.800"), "{text}");
    assert!(text.contains("Balanced Multicasting plan"), "{text}");
}

#[test]
fn bad_scenario_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[platform]\n[[platform.cluster]]\nnodes = \"four\"\n",
    )
    .unwrap();
    let out = windrose()
        .args(["bound", path.to_str().unwrap()])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("bad.toml"), "{err}");
    windrose()
        .args(["bound", "/nonexistent/x.toml"])
        .assert()
        .code(2);
}
