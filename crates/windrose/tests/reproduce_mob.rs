//! Smoke test of `windrose reproduce mob --quick` (25 to 60 s on two cores): it exits
//! with 0, writes every CSV, PNG, REPORT.md and results.json, every run delivered everything,
//! and the paper's claims are checked in the report. A `kind = "multicast"` scenario of
//! `data/scenarios/mob/` also runs through `windrose sim run`.

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

fn windrose() -> Command {
    Command::cargo_bin("windrose").unwrap()
}

#[test]
fn reproduce_mob_quick_writes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let out = windrose()
        .args(["reproduce", "mob", "--quick", "--quiet", "--out"])
        .arg(dir.path())
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("== Paper vs us =="), "{stdout}");
    assert!(stdout.contains("✓ every node of all"), "{stdout}");
    for f in [
        "fig4.csv",
        "fig5.csv",
        "rtt100.csv",
        "magpie.csv",
        "fig6.csv",
        "fig4.png",
        "fig5.png",
        "rtt100.png",
        "rtt100-4-12-16-32.png",
        "magpie.png",
        "fig6.png",
        "REPORT.md",
        "results.json",
    ] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap()).unwrap();
    let points = v["points"].as_array().unwrap();
    // 4 experiments x 5 scenarios x 4 series, 4 sizes x 2 RTTs x 2, 3 cluster sizes x 4.
    assert_eq!(points.len(), 80 + 16 + 12);
    assert!(points.iter().any(|p| p["protocol"] == "mob-paper"));
    for p in points {
        assert_eq!(p["all_finished"], true, "{p}");
        // The bound (time-expanded when capacities change) holds for every run.
        let f = p["fraction_of_bound"].as_f64().unwrap();
        assert!(f > 0.0 && f <= 1.0 + 1e-6, "{p}");
    }
}

#[test]
fn sim_run_prints_a_multicast_scenario() {
    let dir = tempfile::tempdir().unwrap();
    // The fast-links file with 20 MB instead of 600 MB, and MagPIe.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/scenarios/mob/fast-links.toml"),
    )
    .unwrap()
    .replace("message_bytes = \"600MB\"", "message_bytes = \"20MB\"")
    .replace("protocol = \"mob\"", "protocol = \"magpie\"");
    let file = dir.path().join("fast.toml");
    std::fs::write(&file, text).unwrap();
    let log = dir.path().join("log.jsonl");
    let out = windrose()
        .args(["sim", "run", "--quiet", "--log"])
        .arg(&log)
        .arg(&file)
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("magpie multicast of 20 MB"), "{stdout}");
    // MagPIe sends the data once into each of the three other clusters, held to the slowest
    // WAN link out of A (3 MB/s of the 9.5 MB/s bound).
    assert!(stdout.contains("WAN payload 60000000 bytes"), "{stdout}");
    assert!(stdout.contains("MB/s (31."), "{stdout}");
    assert!(std::fs::read_to_string(&log).unwrap().lines().count() > 100);
}
