#!/usr/bin/python3
"""Real BitTorrent clients beside MOB on the same emulated network (issue 7's side-by-side bench).

    sudo bench/real_peers.py [--runs 3] [--mib 200] [--clients mob,aria2,libtorrent,rqbit]
                             [--scenario data/scenarios/testbed/two-sites.toml]
                             [--windrose target/release/windrose] [--timeout 300]

For every client and run: bring the scenario's testbed up (`windrose testbed up`), distribute
the same file (tmpfs, seeded random bytes) from node 0 to every other node, and record the time
to the last receiver, the copies of the file that crossed the WAN (HTB counters of the
routers' WAN interfaces: data packets with their TCP/IP headers; pure ACKs, which bypass the
caps, are not counted) and the CPU seconds
of the clients; then take the testbed down. MOB runs through `windrose testbed run` on the same
scenario file (so on an identical network). The BitTorrent runs use opentracker on node 0 as
tracker (Debian's build needs the info-hash whitelisted), a 1 MiB-piece torrent made with
mktorrent, no DHT, no local peer discovery; every client keeps seeding until the last one has
the file. Prints medians, each as a fraction of the one-copy bound (file size / slowest WAN
capacity out of the root's cluster), and MOB's speed-up over each client.

Needs root, and Debian's aria2, python3-libtorrent, opentracker and mktorrent; rqbit is optional
(`cargo install rqbit --no-default-features --features default-tls`, about 4 minutes; found on
PATH or given with --rqbit, skipped with a message when absent). Bounded: a run that has not
finished within --timeout seconds is stopped and reported as such.
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "rp"
WORK = "/dev/shm/windrose-real-peers"


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, **kw)


def ns(node):
    return f"wr-{NAME}-n{node}"


def state():
    with open(f"/run/windrose/testbeds/{NAME}.json") as f:
        return json.load(f)


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def wan_bytes(clusters):
    total = 0
    for c in range(clusters):
        out = sh("ip", "netns", "exec", f"wr-{NAME}-r{c}", "tc", "-s", "class", "show",
                 "dev", "wan0", capture_output=True, text=True).stdout
        cls = None
        for line in out.splitlines():
            w = line.split()
            if w[:1] == ["class"] and len(w) > 2:
                minor = int(w[2].split(":")[1], 16)
                cls = minor if minor >= 0x100 else None
            elif w[:1] == ["Sent"] and cls is not None:
                total += int(w[1])
                cls = None
    return total


def make_file(path, mib, seed):
    if os.path.exists(path) and os.path.getsize(path) == mib << 20:
        return
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(rng.randbytes(1 << 20))


LT_CLIENT = r"""
import libtorrent as lt, sys, time
torrent, save, ip = sys.argv[1], sys.argv[2], sys.argv[3]
s = lt.session({"listen_interfaces": ip + ":6881", "enable_dht": False, "enable_lsd": False,
                "enable_upnp": False, "enable_natpmp": False, "allow_multiple_connections_per_ip": True,
                "alert_mask": 0})
h = s.add_torrent({"ti": lt.torrent_info(torrent), "save_path": save})
done = False
while True:
    if h.status().is_seeding and not done:
        open(save + "/DONE", "w").close()
        done = True
    time.sleep(0.05)
"""

# rqbit says it has the whole torrent through its HTTP API (on the namespace's own loopback);
# this watcher, one per node, turns that into the same DONE file as the libtorrent client.
RQBIT_WATCH = r"""
import json, sys, time, urllib.request
done = sys.argv[1]
while True:
    try:
        with urllib.request.urlopen("http://127.0.0.1:3030/torrents/0/stats/v1", timeout=1) as r:
            if json.load(r).get("finished"):
                open(done, "w").close()
                break
    except OSError:
        pass
    time.sleep(0.05)
"""


def run_bittorrent(client, args, scen, size, clusters):
    sh(args.windrose, "testbed", "up", "--name", NAME, scen, capture_output=True)
    try:
        st = state()
        n = len(st["node_addrs"])
        tracker_ip = st["node_addrs"][0]
        work = os.path.join(WORK, client)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        data = os.path.join(WORK, "data.bin")
        torrent = os.path.join(work, "data.torrent")
        sh("mktorrent", "-l", "20", "-a", f"http://{tracker_ip}:6969/announce",
           "-o", torrent, data, capture_output=True)
        import libtorrent as lt
        ih = str(lt.torrent_info(torrent).info_hash())
        wl = os.path.join(work, "whitelist.txt")
        with open(wl, "w") as f:
            f.write(ih + "\n")
        procs = []
        os.chmod(work, 0o755)
        os.chmod(wl, 0o644)
        # opentracker refuses to run as root; it chroots into `work` (so the whitelist's path
        # is given from there) and drops to nobody.
        tracker = subprocess.Popen(
            ["ip", "netns", "exec", ns(0), "opentracker", "-i", tracker_ip, "-p", "6969",
             "-P", "6969", "-w", "/whitelist.txt", "-u", "nobody", "-d", work],
            cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(tracker)
        time.sleep(0.3)
        dirs = []
        for i in range(n):
            d = os.path.join(work, f"n{i}")
            os.makedirs(d)
            if i == 0:
                os.link(data, os.path.join(d, "data.bin"))
            dirs.append(d)
        # aria2 keeps its control file while it seeds: it says it has the whole file through a
        # hook that runs on completion (arguments: GID, file count, path).
        hook = os.path.join(work, "done.sh")
        with open(hook, "w") as f:
            f.write('#!/bin/sh\ntouch "$3.DONE"\n')
        os.chmod(hook, 0o755)
        clients = {}
        start = time.time()
        for i in range(n):
            ip = st["node_addrs"][i]
            if client == "aria2":
                cmd = ["aria2c", "-q", "--seed-ratio=0.0", "--enable-dht=false",
                       "--bt-enable-lpd=false", "--file-allocation=none",
                       "--bt-seed-unverified=true", "--check-integrity=false",
                       f"--listen-port=6881", "--summary-interval=0",
                       f"--bt-external-ip={ip}", f"--on-bt-download-complete={hook}",
                       "-d", dirs[i], torrent]
            elif client == "rqbit":
                cmd = [args.rqbit, "--disable-dht", "--disable-dht-persistence",
                       "--disable-upnp-port-forward", "--listen-port", "6881",
                       "--http-api-listen-addr", "127.0.0.1:3030",
                       "download", "--overwrite", "-o", dirs[i], torrent]
            else:
                cmd = ["/usr/bin/python3", "-c", LT_CLIENT, torrent, dirs[i], ip]
            p = subprocess.Popen(["ip", "netns", "exec", ns(i)] + cmd,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            clients[i] = p
            if client == "rqbit" and i > 0:
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", ns(i), "/usr/bin/python3", "-c", RQBIT_WATCH,
                     os.path.join(dirs[i], "DONE")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        done = {}
        while len(done) < n - 1 and time.time() - start < args.timeout:
            for i in range(1, n):
                if i in done:
                    continue
                if client == "aria2":
                    if os.path.exists(os.path.join(dirs[i], "data.bin.DONE")):
                        done[i] = time.time() - start
                elif os.path.exists(os.path.join(dirs[i], "DONE")):
                    done[i] = time.time() - start
            time.sleep(0.05)
        cpu = sum(cpu_seconds(p.pid) for p in clients.values())
        wan = wan_bytes(clusters)
        for p in list(clients.values()) + procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        ok = len(done) == n - 1
        same = all(sh("cmp", "-s", data, os.path.join(dirs[i], "data.bin"), check=False).returncode == 0
                   for i in done)
        return {"last_s": max(done.values()) if ok else None, "wan_copies": wan / size,
                "cpu_s": cpu, "finished": len(done), "receivers": n - 1, "verified": ok and same}
    finally:
        sh(args.windrose, "testbed", "down", NAME, capture_output=True, check=False)


def run_mob(args, scen, mib):
    out = sh(args.windrose, "testbed", "run", "--name", NAME, "--json", "--size", f"{mib}MiB",
             scen, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"last_s": None, "error": out.stderr.strip().splitlines()[-1:]}
    v = json.loads(out.stdout)
    return {"last_s": v["real_completion_s"], "wan_copies": v["wan_copies_real"],
            "cpu_s": v["cpu_s"], "finished": len(v["nodes"]), "receivers": len(v["nodes"]),
            "verified": all(n["verified"] for n in v["nodes"]), "bound_mb_s": v["bound_mb_s"],
            "sim_s": v["sim_completion_s"]}


def state_clusters(args):
    """The cluster of every node of the scenario (from the plan `windrose testbed up` makes)."""
    sh(args.windrose, "testbed", "up", "--name", NAME, args.scenario, capture_output=True)
    try:
        return state()["node_clusters"]
    finally:
        sh(args.windrose, "testbed", "down", NAME, capture_output=True, check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=200)
    ap.add_argument("--clients", default="mob,aria2,libtorrent,rqbit")
    ap.add_argument("--scenario", default=os.path.join(ROOT, "data/scenarios/testbed/two-sites.toml"))
    ap.add_argument("--windrose", default=os.path.join(ROOT, "target/release/windrose"))
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--rqbit", default=shutil.which("rqbit") or "/opt/rqbit/bin/rqbit")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("real_peers.py needs root (network namespaces): run it with sudo")
    for tool in ["aria2c", "opentracker", "mktorrent"]:
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing: apt-get install aria2 opentracker mktorrent python3-libtorrent")
    wanted = args.clients.split(",")
    if "rqbit" in wanted and not os.access(args.rqbit, os.X_OK):
        print(f"rqbit not found at {args.rqbit} (give --rqbit PATH): skipping it", file=sys.stderr)
        wanted.remove("rqbit")
    os.makedirs(WORK, exist_ok=True)
    size = args.mib << 20
    make_file(os.path.join(WORK, "data.bin"), args.mib, 7)
    b = json.loads(sh(args.windrose, "bound", args.scenario, "--json", capture_output=True,
                      text=True).stdout)
    clusters = 1 + max(int(x) for x in state_clusters(args))
    bound_mb_s = b["intervals"][0]["bound_bytes_s"] / 1e6
    results = {}
    for client in wanted:
        for r in range(args.runs):
            t0 = time.time()
            if client == "mob":
                res = run_mob(args, args.scenario, args.mib)
            else:
                res = run_bittorrent(client, args, args.scenario, size, clusters)
            results.setdefault(client, []).append(res)
            print(f"{client} run {r + 1}: {json.dumps(res)} ({time.time() - t0:.0f} s wall)",
                  file=sys.stderr, flush=True)
    shutil.rmtree(WORK, ignore_errors=True)
    bound_s = size / (bound_mb_s * 1e6) if bound_mb_s else None
    med = {}
    print(f"\n{args.mib} MiB from node 0 on {os.path.basename(args.scenario)}, {args.runs} runs "
          f"each, medians; one-copy bound {bound_s:.1f} s ({bound_mb_s:.2f} MB/s)")
    print(f"{'client':>11} {'last s':>8} {'% bound':>8} {'WAN copies':>11} {'CPU s':>7} {'finished':>9}")
    for client, rs in results.items():
        times = [r["last_s"] for r in rs if r.get("last_s")]
        m = statistics.median(times) if len(times) == len(rs) else None
        med[client] = m
        cop = statistics.median([r.get("wan_copies", 0) for r in rs])
        cpu = statistics.median([r.get("cpu_s", 0) for r in rs])
        fin = f"{sum(r.get('finished', 0) for r in rs)}/{sum(r.get('receivers', 0) for r in rs)}"
        pct = f"{100 * bound_s / m:.1f}" if (m and bound_s) else "-"
        print(f"{client:>11} {m if m is None else round(m, 2)!s:>8} {pct:>8} {cop:>11.2f} {cpu:>7.1f} {fin:>9}")
    if med.get("mob"):
        for c, m in med.items():
            if c != "mob" and m:
                print(f"MOB is {m / med['mob']:.2f}x faster than {c}")


if __name__ == "__main__":
    main()
