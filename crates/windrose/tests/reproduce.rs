//! End-to-end tests of `windrose reproduce adaptive-trees --quick`: the paper's worked examples
//! pass, every output file is written, and the files are the same bytes whatever the run and the
//! number of threads.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::Path;

/// Files whose bytes must not depend on anything but the arguments.
const DETERMINISTIC: [&str; 5] = [
    "tables.csv",
    "fig7_8.csv",
    "fig9.csv",
    "REPORT.md",
    "results.json",
];
const PLOTS: [&str; 4] = [
    "fig7_gain.png",
    "fig7_steps.png",
    "fig8_benefit.png",
    "fig9.png",
];

/// Runs the quick reproduction into `out` with `threads` rayon threads; returns stdout.
fn quick(out: &Path, seed: &str, threads: &str) -> String {
    let assert = Command::cargo_bin("windrose")
        .unwrap()
        .env("RAYON_NUM_THREADS", threads)
        .args([
            "reproduce",
            "adaptive-trees",
            "--quick",
            "--seed",
            seed,
            "--out",
        ])
        .arg(out)
        .assert()
        .success();
    String::from_utf8(assert.get_output().stdout.clone()).unwrap()
}

/// Decodes a plot (a PNG) and counts the dark pixels in the band above the chart, where only
/// its title is drawn: text drawn with the embedded font, no system font needed.
fn title_pixels(path: &Path) -> usize {
    let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let (width, samples) = (info.width as usize, info.color_type.samples());
    buf[..info.buffer_size()]
        .chunks(samples)
        .take(width * 50)
        .filter(|p| p[..3].iter().all(|&c| c < 128))
        .count()
}

#[test]
fn quick_reproduction_passes_the_tables_and_writes_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/out");
    let stdout = quick(&out, "2004", "2");
    assert!(stdout.contains("7 of 7 match the paper ✓"), "{stdout}");
    let tables = stdout.split("== Figures 7 and 8").next().unwrap();
    assert!(!tables.contains('✗'), "{tables}");
    for table in [
        "Table 2", "Table 3", "Table 4", "Table 6", "Table 7", "Table 8",
    ] {
        assert!(stdout.contains(table), "{table} missing from stdout");
    }
    assert!(stdout.contains("== Paper vs us =="));
    for f in DETERMINISTIC.iter().chain(PLOTS.iter()) {
        let meta = std::fs::metadata(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(meta.len() > 0, "{f} is empty");
    }
    for f in PLOTS {
        let dark = title_pixels(&out.join(f));
        assert!(
            dark > 200,
            "{f}: {dark} dark pixels where its title should be"
        );
    }
    let csv = std::fs::read_to_string(out.join("fig7_8.csv")).unwrap();
    assert_eq!(
        csv.lines().next(),
        Some("factor,strategy,avg_gain,avg_steps,benefit,reached_fraction")
    );
    // 3 factors x 4 strategies in quick mode.
    assert_eq!(csv.lines().count(), 1 + 3 * 4);
    let csv = std::fs::read_to_string(out.join("fig9.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 3 * 3);
    let report = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    assert!(report.contains("## Paper vs us"));
}

#[test]
fn same_seed_same_bytes_whatever_the_thread_count() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    quick(a.path(), "99", "1");
    quick(b.path(), "99", "2");
    for f in DETERMINISTIC {
        let x = std::fs::read(a.path().join(f)).unwrap();
        let y = std::fs::read(b.path().join(f)).unwrap();
        assert!(x == y, "{f} differs between 1 and 2 threads");
    }
}

#[test]
fn bad_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    Command::cargo_bin("windrose")
        .unwrap()
        .args([
            "reproduce",
            "adaptive-trees",
            "--quick",
            "--min-hops",
            "20",
            "--out",
        ])
        .arg(dir.path())
        .assert()
        .failure()
        .stderr(predicate::str::contains("--min-hops 20"));
    Command::cargo_bin("windrose")
        .unwrap()
        .args(["reproduce", "adaptive-trees", "--link", "sideways"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("sideways"));
}

/// Issue 21 (honest reproductions): without `--min-hops` both topology draws run, distances
/// 0-10 (the paper's words) and 1-10, and every claim about Figures 7-9 is judged on each, side
/// by side, with why the draws differ (the zero-cost tree links); `--min-hops` runs one draw.
#[test]
fn both_topology_draws_are_judged_side_by_side_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = quick(dir.path(), "0", "2");
    assert!(
        stdout.contains("== Paper vs us on both topology draws"),
        "{stdout}"
    );
    let both = stdout.split("on both topology draws").nth(1).unwrap();
    assert!(
        both.contains("claim: distances 0 to 10 hops (the paper's words) | 1 to 10"),
        "{both}"
    );
    // Every claim has a mark for each draw.
    let claim_lines: Vec<&str> = both
        .lines()
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect();
    assert!(claim_lines.len() >= 5, "{both}");
    for l in &claim_lines {
        let marks = l.matches('✓').count() + l.matches('✗').count();
        assert_eq!(marks, 2, "{l}");
    }
    assert!(
        both.contains("why the draws differ: distances 0 to 10 hops leave"),
        "{both}"
    );
    assert!(both.contains("distances 1 to 10 leave 0:"), "{both}");
    for f in ["fig7_8-min1.csv", "fig9-min1.csv"] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let report = std::fs::read_to_string(dir.path().join("REPORT.md")).unwrap();
    assert!(report.contains("## Both topology draws"), "{report}");
    let json = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    assert!(json.contains("\"other_draw\""), "results.json");

    let one = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("windrose")
        .unwrap()
        .args([
            "reproduce",
            "adaptive-trees",
            "--quick",
            "--min-hops",
            "1",
            "--out",
        ])
        .arg(one.path())
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(!stdout.contains("both topology draws"), "{stdout}");
    assert!(!one.path().join("fig7_8-min1.csv").exists());
}
