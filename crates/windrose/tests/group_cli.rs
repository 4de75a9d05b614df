//! `windrose group`: four long-lived member processes on loopback; a broadcast and a MOB
//! multicast started at once from two of them; every member keeps both files; then they leave.

#[path = "support/procs.rs"]
mod procs;

use procs::{
    bin, bytes_held, control_and_out, free_ports, hash_file, received, spawn_members, wait_for,
    windrose, write_group,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const N: usize = 4;

#[test]
fn two_members_start_a_broadcast_and_a_multicast_in_one_running_group() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "cli-group", &free_ports(N));
    let socket = |i: usize| dir.path().join(format!("m{i}.sock"));
    let out = |i: usize| dir.path().join(format!("out{i}"));
    let mut members = spawn_members(&group, N, &["--quiet"], |i, c| {
        control_and_out(c, socket(i), out(i))
    });
    let a = dir.path().join("a.bin");
    let b = dir.path().join("b.bin");
    std::fs::write(&a, windrose_net::random_payload(3_000_000, 1)).unwrap();
    std::fs::write(&b, windrose_net::random_payload(5_000_000, 2)).unwrap();
    let start = |kind: &str, via: usize, file: &Path| {
        Command::new(bin())
            .args(["group", "start", kind, "--json"])
            .arg("--control")
            .arg(socket(via))
            .arg("--file")
            .arg(file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let bcast = start("bcast", 0, &a);
    let mcast = start("multicast", 2, &b);
    for (name, child) in [("bcast", bcast), ("multicast", mcast)] {
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["finished"], N as u64, "{name}: {v}");
        assert_eq!(v["failed"], 0, "{name}: {v}");
    }
    let (ha, hb) = (hash_file(&a), hash_file(&b));
    for i in 0..N {
        let mut want = Vec::new();
        if i != 0 {
            want.push(ha.clone());
        }
        if i != 2 {
            want.push(hb.clone());
        }
        want.sort();
        // A member renames its file when its own part ended, which may come just after the
        // initiator heard every report.
        wait_for(
            &format!("member {i}'s files"),
            Duration::from_secs(30),
            || received(&out(i)).len() == want.len(),
        );
        assert_eq!(received(&out(i)), want, "member {i}");
    }
    // A broadcast whose tree member 1's host plans from the group's live weather, and a
    // policy that does not parse.
    let o = Command::new(bin())
        .args(["group", "start", "bcast", "--json", "--tree", "adapt"])
        .arg("--control")
        .arg(socket(1))
        .arg("--file")
        .arg(&a)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(N as u64), Some(0)),
        "{v}"
    );
    let o = Command::new(bin())
        .args(["group", "start", "bcast", "--tree", "adapt:sideways"])
        .arg("--control")
        .arg(socket(1))
        .arg("--file")
        .arg(&a)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown strategy \"sideways\""), "{err}");
    leave_all(&mut members, N, socket);
}

#[test]
fn a_start_without_a_running_member_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let out = windrose()
        .args(["group", "start", "bcast", "--control"])
        .arg(dir.path().join("nobody.sock"))
        .arg("--file")
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("windrose group serve"), "{err}");
}

#[test]
fn a_keyed_encrypted_group_carries_a_multicast_and_encrypt_without_a_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    let n = 3;
    write_group(&group, "cli-keyed", &free_ports(n));
    let key = dir.path().join("group.key");
    windrose()
        .args(["keygen", "--out"])
        .arg(&key)
        .assert()
        .success();
    // --encrypt needs the key the session keys come from: refused before anything is bound.
    windrose()
        .args(["group", "serve", "--encrypt", "--id", "0", "--group"])
        .arg(&group)
        .env_remove("WINDROSE_GROUP_KEY_FILE")
        .env_remove("WINDROSE_GROUP_KEY")
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--encrypt needs a group key"));
    let socket = |i: usize| dir.path().join(format!("k{i}.sock"));
    let out = |i: usize| dir.path().join(format!("kout{i}"));
    let _members = spawn_members(&group, n, &["--quiet", "--encrypt"], |i, c| {
        c.arg("--key-file").arg(&key);
        control_and_out(c, socket(i), out(i))
    });
    let file = dir.path().join("m.bin");
    std::fs::write(&file, windrose_net::random_payload(2_000_000, 3)).unwrap();
    let o = windrose()
        .args(["group", "start", "multicast", "--json", "--control"])
        .arg(socket(1))
        .arg("--file")
        .arg(&file)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(n as u64), Some(0)),
        "{v}"
    );
    let want = vec![hash_file(&file)];
    for i in [0, 2] {
        wait_for(
            &format!("member {i}'s file"),
            Duration::from_secs(30),
            || received(&out(i)).len() == 1,
        );
        assert_eq!(received(&out(i)), want, "member {i}");
    }
    // Each member's weather: every other member's round trips measured and forecast.
    let mut view = serde_json::Value::Null;
    wait_for("the weather of member 2", Duration::from_secs(30), || {
        let o = windrose()
            .args(["group", "weather", "--json", "--control"])
            .arg(socket(2))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        view = serde_json::from_slice(&o.stdout).unwrap();
        let links = view.as_array().unwrap();
        links.len() == n - 1 && links.iter().all(|l| l["samples"].as_u64() >= Some(2))
    });
    for l in view.as_array().unwrap() {
        let (last, forecast) = (l["last_ms"].as_f64().unwrap(), l["forecast_ms"].as_f64());
        assert!(last >= 0.0 && forecast.is_some_and(|f| f >= 0.0), "{l}");
    }
    let table = windrose()
        .args(["group", "weather", "--control"])
        .arg(socket(0))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).contains("forecast ms"));
    for i in 0..n {
        windrose()
            .args(["group", "leave", "--control"])
            .arg(socket(i))
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
    }
}

/// `windrose bcast | multicast | scatter --group G --id I` while member I of G runs on this
/// machine: each starts through that member's default control socket (in the temporary
/// directory, here the test's), every member takes part, and what only a root of the
/// command's own could do is refused by name. `group start scatter` schedules a scatter at the
/// member and reports the schedule's prediction.
#[test]
fn root_commands_start_through_a_running_member() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    let n = 3;
    write_group(&group, "cli-through", &free_ports(n));
    let socket = |i: usize| dir.path().join(format!("windrose-cli-through-{i}.sock"));
    let out = |i: usize| dir.path().join(format!("out{i}"));
    // No --control: each member opens its default socket under TMPDIR.
    let mut members = spawn_members(&group, n, &["--quiet"], |i, c| {
        std::fs::create_dir(out(i)).unwrap();
        c.arg("--out-dir").arg(out(i)).env("TMPDIR", dir.path());
        socket(i)
    });
    let a = dir.path().join("a.bin");
    let b = dir.path().join("b.bin");
    std::fs::write(&a, windrose_net::random_payload(3_000_000, 4)).unwrap();
    std::fs::write(&b, windrose_net::random_payload(2_000_000, 5)).unwrap();
    let root = |args: &[&str]| {
        let mut c = windrose();
        // The subcommand, the group, then the rest (which may end with a flag whose value the
        // caller adds).
        c.arg(args[0])
            .arg("--group")
            .arg(&group)
            .args(&args[1..])
            .env("TMPDIR", dir.path())
            .timeout(Duration::from_secs(60));
        c
    };
    let json = |o: std::process::Output| -> serde_json::Value {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let v = json(
        root(&["bcast", "--id", "1", "--tree", "chain", "--json", "--file"])
            .arg(&a)
            .output()
            .unwrap(),
    );
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(0)),
        "{v}"
    );
    // Every member's report, its BLAKE3 checked against the file's (the root, member 1, has
    // nothing to check).
    let (ha, hb) = (hash_file(&a), hash_file(&b));
    assert_eq!(v["root"], 1, "{v}");
    assert_eq!(v["root_blake3"], ha.as_str(), "{v}");
    let reported: Vec<(u64, bool, Option<bool>)> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            if m["member"] != 1 {
                assert_eq!(m["blake3"], ha.as_str(), "{m}");
                assert_eq!(m["bytes"], 3_000_000, "{m}");
                assert!(m["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{m}");
            }
            (
                m["member"].as_u64().unwrap(),
                m["finished"] == true,
                m["verified"].as_bool(),
            )
        })
        .collect();
    assert_eq!(
        reported,
        vec![
            (0, true, Some(true)),
            (1, true, None),
            (2, true, Some(true))
        ]
    );
    root(&[
        "multicast",
        "--protocol",
        "mob",
        "--id",
        "2",
        "--piece",
        "256KiB",
        "--file",
    ])
    .arg(&b)
    .assert()
    .success()
    .stdout(predicates::str::contains("3 members finished, 0 failed"))
    .stdout(predicates::str::contains(
        "all 2 members received the root's bytes",
    ))
    .stderr(predicates::str::contains(
        "starting through its control socket",
    ));
    for (i, mut want) in [
        (0, vec![ha.clone(), hb.clone()]),
        (1, vec![hb]),
        (2, vec![ha]),
    ] {
        want.sort();
        wait_for(
            &format!("member {i}'s files"),
            Duration::from_secs(30),
            || received(&out(i)).len() == want.len(),
        );
        assert_eq!(received(&out(i)), want, "member {i}");
    }
    // Scatters, by the root command and by `group start`, one after the other and at once.
    let v = json(
        root(&[
            "scatter",
            "--id",
            "0",
            "--hash-mb-s",
            "500",
            "--link-mb-s",
            "500",
            "--json",
        ])
        .arg("--file")
        .arg(&a)
        .output()
        .unwrap(),
    );
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(0)),
        "{v}"
    );
    assert!(v["predicted_finish_s"].as_f64().unwrap() > 0.0, "{v}");
    let v = json(
        windrose()
            .args([
                "group",
                "start",
                "scatter",
                "--parallel",
                "--tree",
                "flat",
                "--json",
            ])
            .arg("--control")
            .arg(socket(2))
            .arg("--file")
            .arg(&b)
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap(),
    );
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(0)),
        "{v}"
    );
    assert!(v["predicted_finish_s"].as_f64().unwrap() > 0.0, "{v}");
    // Refused by name, before anything starts.
    root(&["bcast", "--id", "1", "--costs", "costs.csv", "--file"])
        .arg(&a)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("cannot use --costs"));
    root(&["scatter", "--id", "1", "--load-size", "1MiB"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "cannot use a random load (give --file)",
        ));
    windrose()
        .args(["group", "start", "bcast", "--parallel", "--control"])
        .arg(socket(0))
        .arg("--file")
        .arg(&a)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("are for a scatter"));
    windrose()
        .args(["group", "start", "scatter", "--tree", "adapt", "--control"])
        .arg(socket(0))
        .arg("--file")
        .arg(&a)
        .timeout(Duration::from_secs(60))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "a scatter's tree is an algorithm",
        ));
    leave_all(&mut members, n, socket);
}

/// `group serve --once`: every member, the initiator included, leaves after the first
/// collective it took part in and exits 0; the receivers kept the file.
#[test]
fn once_members_leave_after_their_first_collective() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    let n = 3;
    write_group(&group, "cli-once", &free_ports(n));
    let socket = |i: usize| dir.path().join(format!("o{i}.sock"));
    let out = |i: usize| dir.path().join(format!("oout{i}"));
    let mut members = spawn_members(&group, n, &["--once", "--quiet"], |i, c| {
        control_and_out(c, socket(i), out(i))
    });
    let a = dir.path().join("a.bin");
    std::fs::write(&a, windrose_net::random_payload(1_000_000, 6)).unwrap();
    windrose()
        .args(["group", "start", "bcast", "--control"])
        .arg(socket(0))
        .arg("--file")
        .arg(&a)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    all_exit_0(&mut members);
    for i in 1..n {
        assert_eq!(received(&out(i)), vec![hash_file(&a)], "member {i}");
    }
}

/// A group file with `[session] eager = true, relay_announce = true`: the members' collectives
/// start without the Ready/Go round trip and broadcasts' announcements travel down the tree.
/// Two broadcasts from two members and a MOB multicast, one after another, reach every other
/// member whole; then they leave.
#[test]
fn an_eager_group_with_relayed_announcements_carries_broadcasts_and_a_multicast() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    write_group(&group, "cli-eager", &free_ports(N));
    let mut text = std::fs::read_to_string(&group).unwrap();
    text.push_str("\n[session]\neager = true\nrelay_announce = true\n");
    std::fs::write(&group, text).unwrap();
    let socket = |i: usize| dir.path().join(format!("e{i}.sock"));
    let out = |i: usize| dir.path().join(format!("eout{i}"));
    let mut members = spawn_members(&group, N, &["--quiet"], |i, c| {
        control_and_out(c, socket(i), out(i))
    });
    let files: Vec<_> = (0..3u64)
        .map(|k| {
            let f = dir.path().join(format!("f{k}.bin"));
            std::fs::write(
                &f,
                windrose_net::random_payload(2_000_000 + k as usize, 20 + k),
            )
            .unwrap();
            f
        })
        .collect();
    let mut want: Vec<Vec<String>> = vec![Vec::new(); N];
    for (k, (kind, via)) in [("bcast", 0), ("bcast", 3), ("multicast", 1)]
        .into_iter()
        .enumerate()
    {
        let o = Command::new(bin())
            .args(["group", "start", kind, "--json", "--control"])
            .arg(socket(via))
            .arg("--file")
            .arg(&files[k])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (v["finished"].as_u64(), v["failed"].as_u64()),
            (Some(N as u64), Some(0)),
            "{kind} from {via}: {v}"
        );
        for (i, w) in want.iter_mut().enumerate() {
            if i != via {
                w.push(hash_file(&files[k]));
            }
        }
    }
    for (i, w) in want.iter_mut().enumerate() {
        w.sort();
        wait_for(
            &format!("member {i}'s files"),
            Duration::from_secs(30),
            || received(&out(i)).len() == w.len(),
        );
        assert_eq!(&received(&out(i)), w, "member {i}");
    }
    leave_all(&mut members, N, socket);
}

/// `group serve --mst-live` and `group start bcast --tree mst-live`: the members build the
/// live MST from their probes (by rows, the default up to 64 members: each sends its row of
/// measured weights to every member and computes the tree), and once it stands the root's log
/// names the live tree it broadcast over; every broadcast, before and after, reaches every
/// member whole. A bad `[mst]` threshold is refused, naming its place, before the member binds.
#[test]
fn mst_live_members_broadcast_over_the_live_tree() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    let n = 4;
    write_group(&group, "cli-mst", &free_ports(n));
    let members_file = std::fs::read_to_string(&group).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, format!("{members_file}\n[mst]\nthreshold = -1\n")).unwrap();
    windrose()
        .args(["group", "serve", "--id", "0", "--mst-live", "--group"])
        .arg(&bad)
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "[mst] threshold = -1: expected a number >= 0",
        ));
    // Every member checks the links at every broadcast: the same `[mst]` table at each.
    std::fs::write(&group, format!("{members_file}\n[mst]\ncheck_every = 1\n")).unwrap();
    let socket = |i: usize| dir.path().join(format!("t{i}.sock"));
    let out = |i: usize| dir.path().join(format!("tout{i}"));
    let log = |i: usize| dir.path().join(format!("t{i}.log"));
    let _members = spawn_members(&group, n, &["--mst-live"], |i, c| {
        c.stdout(std::fs::File::create(log(i)).unwrap());
        control_and_out(c, socket(i), out(i))
    });
    let a = dir.path().join("a.bin");
    std::fs::write(&a, windrose_net::random_payload(300_000, 9)).unwrap();
    let root = 3;
    let mut sent = 0;
    let live = |s: &str| s.lines().any(|l| l.contains("tree the live MST"));
    // The tree is built once every member has measured its links (or after the service's
    // `build_after`); until then `mst-live` plans the central MST of the view.
    wait_for(
        "a broadcast over the live MST",
        Duration::from_secs(90),
        || {
            windrose()
                .args(["group", "start", "bcast", "--tree", "mst-live", "--control"])
                .arg(socket(root))
                .arg("--file")
                .arg(&a)
                .timeout(Duration::from_secs(60))
                .assert()
                .success()
                .stdout(predicates::str::contains(
                    "all 3 members received the root's bytes",
                ));
            sent += 1;
            live(&std::fs::read_to_string(log(root)).unwrap())
        },
    );
    for i in (0..n).filter(|&i| i != root) {
        // A member renames its file when its own part ended, which may come just after the
        // initiator heard every report.
        wait_for(
            &format!("member {i}'s files"),
            Duration::from_secs(30),
            || received(&out(i)).len() >= sent,
        );
        let got = received(&out(i));
        assert_eq!(got.len(), sent, "member {i}");
        assert!(got.iter().all(|h| *h == hash_file(&a)), "member {i}");
    }
}

/// `group start scatter` without speed flags: the member's host plans the scatter from the
/// group's weather. Every member times its compute when it starts and shares it; once the rows
/// have spread, a scatter is planned from the measured compute speeds and says so, and every
/// member's share (the BLAKE3 it logged of the range it computed) is that range of the file,
/// the ranges covering it exactly.
#[test]
fn a_scatter_without_speeds_is_planned_from_the_groups_weather_and_every_share_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    let n = 3;
    write_group(&group, "cli-calib", &free_ports(n));
    let socket = |i: usize| dir.path().join(format!("c{i}.sock"));
    let log = |i: usize| dir.path().join(format!("member{i}.log"));
    let mut members = spawn_members(&group, n, &[], |i, c| {
        c.arg("--control")
            .arg(socket(i))
            .stdout(std::fs::File::create(log(i)).unwrap());
        socket(i)
    });
    let file = dir.path().join("load.bin");
    let load = windrose_net::random_payload(6_000_000, 9);
    std::fs::write(&file, &load).unwrap();
    let scatter = || -> serde_json::Value {
        let o = windrose()
            .args(["group", "start", "scatter", "--json", "--control"])
            .arg(socket(0))
            .arg("--file")
            .arg(&file)
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // Member 0's view learns the others' compute speeds from their rows.
    wait_for(
        "the members' compute speeds",
        Duration::from_secs(30),
        || {
            let o = windrose()
                .args(["group", "weather", "--json", "--control"])
                .arg(socket(0))
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            v.as_array().is_some_and(|l| {
                l.iter()
                    .filter(|x| x["compute_mb_s"].as_f64() > Some(0.0))
                    .count()
                    == n - 1
            })
        },
    );
    let table = windrose()
        .args(["group", "weather", "--control"])
        .arg(socket(0))
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.contains("compute MB/s") && table.contains("this member computes"),
        "{table}"
    );
    let first = scatter();
    assert_eq!(
        (first["finished"].as_u64(), first["failed"].as_u64()),
        (Some(3), Some(0))
    );
    // The reply gives every member's share: each one's BLAKE3 is its range of the file, and
    // the ranges cover the file once.
    let mut reported: Vec<(usize, usize)> = first["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let sh = &m["share"];
            let (a, len) = (
                sh["offset"].as_u64().unwrap() as usize,
                sh["len"].as_u64().unwrap() as usize,
            );
            assert_eq!(
                sh["blake3"].as_str(),
                Some(blake3::hash(&load[a..a + len]).to_hex().as_str()),
                "{m}"
            );
            (a, a + len)
        })
        .collect();
    reported.sort();
    assert_eq!(reported.len(), n, "{first}");
    assert_eq!((reported[0].0, reported[n - 1].1), (0, load.len()));
    assert!(
        reported.windows(2).all(|w| w[0].1 == w[1].0),
        "{reported:?}"
    );
    let plan = &first["plan"];
    assert_eq!(plan["nodes"].as_array().unwrap().len(), n, "{first}");
    assert_eq!(
        plan["measured_computes"].as_u64(),
        Some(n as u64),
        "{first}"
    );
    assert!(
        plan["predicted_finish_s"].as_f64().unwrap() > 0.0,
        "{first}"
    );
    assert_eq!(first["predicted_finish_s"], plan["predicted_finish_s"]);
    for m in plan["nodes"].as_array().unwrap() {
        assert_eq!(m["compute"], "measured", "{m}");
    }
    // The human form says which speeds the plan took.
    let o = windrose()
        .args(["group", "start", "scatter", "--control"])
        .arg(socket(1))
        .arg("--file")
        .arg(&file)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("plan: predicted finish") && text.contains("(measured)"),
        "{text}"
    );
    assert_eq!(text.matches(", share [").count(), n, "{text}");
    for i in 0..n {
        windrose()
            .args(["group", "leave", "--control"])
            .arg(socket(i))
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
    }
    for c in &mut members.0 {
        c.wait().unwrap();
    }
    // Every member logged one share per scatter; per scatter, the shares cover the load once,
    // and each one's BLAKE3 is that of its range of the file.
    let shares: Vec<Vec<(usize, usize, String)>> = (0..n)
        .map(|i| {
            std::fs::read_to_string(log(i))
                .unwrap()
                .lines()
                .filter_map(|l| {
                    let rest = l.strip_prefix("computed its scatter share [")?;
                    let (range, hash) = rest.split_once("): BLAKE3 ")?;
                    let (a, b) = range.split_once(", ")?;
                    Some((a.parse().unwrap(), b.parse().unwrap(), hash.to_string()))
                })
                .collect()
        })
        .collect();
    for k in 0..2 {
        let mut ranges: Vec<(usize, usize)> = vec![];
        for (i, s) in shares.iter().enumerate() {
            assert_eq!(s.len(), 2, "member {i}: {s:?}");
            let (a, b, h) = &s[k];
            assert_eq!(
                blake3::hash(&load[*a..*b]).to_hex().to_string(),
                *h,
                "member {i}, scatter {k}"
            );
            ranges.push((*a, *b));
        }
        ranges.sort();
        assert_eq!(ranges[0].0, 0);
        assert_eq!(ranges[n - 1].1, load.len());
        assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0), "{ranges:?}");
    }
}

/// What the partial file of process `pid` in `dir` holds (`.transfer-T.windrose-partial-PID-*`).
fn held_by(dir: &Path, pid: u32) -> u64 {
    let mark = format!(".windrose-partial-{pid}-");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&mark))
        .map(|e| bytes_held(&e.path()))
        .max()
        .unwrap_or(0)
}

/// A `group serve --out-dir` member killed mid-multicast and served again over the same folder
/// is taken back: its new life adopts the partial file the earlier one left, resumes from every
/// piece in it that verifies, fetches the rest, and keeps the whole file; the initiator reports
/// what it resumed. Member 1 is held (SIGSTOP) over the restart, so the run cannot end without
/// member 2 however fast the rest of it is (the hold is far below the 10 s silence limit).
#[test]
fn a_member_served_again_after_a_kill_resumes_from_its_out_dir() {
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.toml");
    let n = 4;
    write_group(&group, "cli-resume", &free_ports(n));
    let socket = |i: usize| dir.path().join(format!("r{i}.sock"));
    let out = |i: usize| dir.path().join(format!("rout{i}"));
    let mut members = spawn_members(&group, n, &["--quiet"], |i, c| {
        control_and_out(c, socket(i), out(i))
    });
    let mib: u32 = 96;
    let payload: Vec<u8> = (0..mib << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let data = dir.path().join("data.bin");
    std::fs::write(&data, &payload).unwrap();
    let start = Command::new(bin())
        .args(["group", "start", "multicast", "--protocol", "mob", "--json"])
        .arg("--control")
        .arg(socket(0))
        .arg("--file")
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (held, victim) = (members.0[1].id(), members.0[2].id());
    let bound = Duration::from_secs(120);
    let since = std::time::Instant::now();
    while !(held_by(&out(2), victim) >= 8 << 20 && held_by(&out(1), held) > 0) {
        assert!(since.elapsed() < bound, "member 2 never held 8 MiB");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) of member processes this test started.
    unsafe {
        assert_eq!(libc::kill(held as i32, libc::SIGSTOP), 0);
        assert_eq!(libc::kill(victim as i32, libc::SIGKILL), 0);
    }
    members.0[2].wait().unwrap();
    let kept = held_by(&out(2), victim);
    assert!(
        kept < u64::from(mib) << 20,
        "member 2 held all {mib} MiB when it was killed: nothing left to show it resumed"
    );
    let again = Command::new(bin())
        .args(["group", "serve", "--id", "2", "--quiet", "--group"])
        .arg(&group)
        .arg("--control")
        .arg(socket(2))
        .arg("--out-dir")
        .arg(out(2))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let new_life = again.id();
    members.0[2] = again;
    // Taken back means data arrived that the earlier life did not hold (adopting its file
    // happens before the rejoin reaches the initiator).
    wait_for("member 2 to be taken back", bound, || {
        held_by(&out(2), new_life) > kept
    });
    // SAFETY: kill(2) of a member process this test started and stopped.
    assert_eq!(unsafe { libc::kill(held as i32, libc::SIGCONT) }, 0);
    let o = start.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m2 = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member"] == 2)
        .unwrap_or_else(|| panic!("no member 2 in {v}"));
    assert_eq!(m2["finished"], true, "{v}");
    assert_eq!(m2["verified"], true, "{v}");
    // All it kept but a piece it may have been writing when killed.
    let resumed = m2["resumed_bytes"].as_u64().unwrap_or(0);
    assert!(
        resumed > 0 && resumed + (1 << 20) >= kept,
        "resumed {resumed} of the {kept} bytes kept: {v}"
    );
    wait_for("member 2's file", Duration::from_secs(30), || {
        received(&out(2)).len() == 1
    });
    assert!(
        received(&out(2)) == vec![hash_file(&data)],
        "member 2's file differs from the data"
    );
    let left: Vec<String> = std::fs::read_dir(out(2))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "partial files left: {left:?}");
}

/// Tells members `0..n` to leave through their control sockets, and waits for each process to
/// exit 0.
fn leave_all(members: &mut procs::Members, n: usize, socket: impl Fn(usize) -> std::path::PathBuf) {
    for i in 0..n {
        windrose()
            .args(["group", "leave", "--control"])
            .arg(socket(i))
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
    }
    all_exit_0(members);
}

/// Waits (up to 30 s each) for every member process to exit, and checks each exited 0.
fn all_exit_0(members: &mut procs::Members) {
    for (i, c) in members.0.iter_mut().enumerate() {
        let mut status = None;
        wait_for(
            &format!("member {i} to exit"),
            Duration::from_secs(30),
            || {
                status = c.try_wait().unwrap();
                status.is_some()
            },
        );
        assert!(status.unwrap().success(), "member {i}");
    }
}
