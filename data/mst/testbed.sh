#!/bin/bash
# Issue 17: the live MST's build on the emulated testbed (as root), rows against GHS. The six
# sites of seed 004 (data/scenarios/testbed/six-sites.toml: 6 x 4 processes, Table 1's one-way
# latencies through the delay line, up to 0.7229 s); a fresh group of 24 members per run
# (`windrose group serve --mst-live`, one per namespace), the metric, build and repair policy
# set by the group file's [mst] table (every member reads it from the same file). Probes every 2 s by default
# (PROBE_PERIOD=0.5 for group serve's default): the slowest round trip here is 1.45 s, and the
# prober before af864e4 matched a pong only to the latest ping, so with 0.5 s every link slower
# than that was never measured and the build waited for its 10 s fallback, on guesses; it now
# keeps the last 8 pings outstanding and 0.5 s measures them too. `windrose mst --group G --live` then reads every
# member's live MST: from the first member's start (its first row or Hello, once its probes
# measured every link) to the last member holding the whole tree, on the machine's wall clock
# (the namespaces share it), with the members' mst_* frames and bytes.
#
# Builds run alternated, RUNS rounds: rows, GHS with test window 16, GHS with window 1.
# Prints CSV: run, build, test_window, members, build_s (first start to the last member
# holding the tree), after_last_start_s (last start to that end), start_skew_s (first to last
# start), frames, bytes, tree_ms (the tree's total on Table 1's latencies: 758.6 is the MST),
# site_edges (the tree's edges between sites, as site pairs).
#
# `repair` as the only build: RUNS rounds of (a) a rows-built group whose members check their
# links at every forecast (`[mst] check_every = 0`, changes past 10 %, MIN_CHANGE = 5 ms and
# NOISE = 0 forecast errors: `min_change`, `noise`), read once
# settled (no repair running or waiting anywhere for SETTLE = 8 s), then S3-S5 slowed from 35.1
# to 70.2 ms both ways (`testbed set`; the probes carry it to the forecasts) and `windrose mst
# --live --after-epoch E --since T` waits until every member holds one later epoch's tree with
# nothing running for SETTLE s; (b) a fresh rows build and (c) a fresh GHS build (window 16) on
# the slowed network. Prints CSV: run, what, members, seconds (repair: the change to the last
# member holding the final tree; rebuilds: first start to the last member holding it), after_s
# (repair: from the first change fed; rebuilds: after the last start), epochs, frames, bytes
# and frames_by_kind (the repair's since the settled build), tree_ms and mst_ms (the tree's
# total on Table 1 with the slowed link, and that network's site MST: 784.9 ms), site_edges,
# exact (the tree is the site MST and every member was idle holding the MST of the weights the
# members hold, which `mst --live` checks), rebuilds (backlog rebuilds by rows, `[mst]
# rebuild_after`; epochs count every generation's). Stderr says how long the group took
# to settle after its build. FEEDS=FILE.jsonl appends every member's repair counters (per owned
# link the changes fed, with times), REBUILDS=0 skips the fresh rebuilds, REBUILD_AFTER=K goes
# into the [mst] table as `rebuild_after`. The group files' [mst] keys need a binary from
# 2026-11-28 or later (before: `group serve --mst-*` flags). 3 rounds took 6 min 37 s:
#   flock /tmp/testbed.lock bash data/mst/testbed.sh target/release/windrose 3 repair \
#     > data/mst/testbed-repair.csv
#
# Run from the repository root, holding the shared testbed lock (3 rounds took 3 min 43 s):
#   bash data/mst/testbed.sh [WINDROSE_BINARY] [RUNS] [BUILDS...]
# e.g. flock /tmp/testbed.lock bash data/mst/testbed.sh target/release/windrose 3 rows ghs16 ghs1 \
#        > data/mst/testbed.csv        (the CSV beside it: 2026-11-27, at 41d1601)
set -euo pipefail
W=$(realpath "${1:-target/release/windrose}")
RUNS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
BUILDS=("$@")
[ ${#BUILDS[@]} -eq 0 ] && BUILDS=(rows ghs16 ghs1)
NAME=${MST_TESTBED_NAME:-mstsix}
# PROBE_PERIOD=0.5 shows what the default period does here.
PROBE_PERIOD=${PROBE_PERIOD:-2}
N=24
SCENARIO=data/scenarios/testbed/six-sites.toml
DIR=$(mktemp -d /tmp/windrose-msttb-XXXXXX)
pids=()
leave() {
  for i in $(seq 0 $((N - 1))); do
    [ -f "$DIR/group.toml" ] &&
      timeout 20 "$W" group leave --group "$DIR/group.toml" --id "$i" >/dev/null 2>&1 || true
  done
  [ ${#pids[@]} -gt 0 ] && { wait "${pids[@]}" 2>/dev/null || true; }
  pids=()
}
cleanup() {
  leave
  "$W" testbed down "$NAME" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# build_table BUILD: the [mst] lines of a build (rows, ghs16, ghs1).
build_table() {
  case $1 in
    rows) printf 'build = "rows"\ntest_window = 16' ;;
    ghs16) printf 'build = "ghs"\ntest_window = 16' ;;
    ghs1) printf 'build = "ghs"\ntest_window = 1' ;;
    *) echo "unknown build $1 (rows, ghs16 or ghs1)" >&2; exit 2 ;;
  esac
}

# start_group GROUP_NAME MST_LINES: a fresh group file with that [mst] table (its own group name
# per run: fresh default control sockets), and its N members serving it, one per namespace.
start_group() {
  "$W" testbed group --name "$NAME" --group-name "$1" --port 7300 --out "$DIR/group.toml"
  printf '\n[mst]\nmetric = "latency"\n%s\n' "$2" >> "$DIR/group.toml"
  for i in $(seq 0 $((N - 1))); do
    "$W" testbed exec --name "$NAME" "$i" -- "$W" group serve --quiet --id "$i" \
      --group "$DIR/group.toml" --mst-live --probe-period "$PROBE_PERIOD" \
      >"$DIR/m$i.log" 2>&1 &
    pids+=($!)
  done
}

# one BUILD RUN: a fresh group built as BUILD says, one CSV line.
one() {
  local build=$1 run=$2 kind window table
  table=$(build_table "$build")
  kind=$(echo "$table" | sed -n 's/^build = "\(.*\)"$/\1/p')
  window=$(echo "$table" | sed -n 's/^test_window = //p')
  start_group "msttb-$build-$run" "$table"
  local out
  out=$("$W" mst --group "$DIR/group.toml" --live --wait 120 --json)
  leave
  echo "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
lat = [[0, 485.4, 698.9, 14.9, 332.8, 61.4], [485.4, 0, 364.1, 583.8, 13.5, 490.5],
       [698.9, 364.1, 0, 701.2, 371.7, 722.9], [14.9, 583.8, 701.2, 0, 331.0, 35.1],
       [332.8, 13.5, 371.7, 331.0, 0, 355.9], [61.4, 490.5, 722.9, 35.1, 355.9, 0]]
tree = [(a // 4, b // 4) for a, b in r["tree"]]
sites = sorted({(min(a, b), max(a, b)) for a, b in tree if a != b})
total = sum(lat[a][b] for a, b in tree)
print(",".join(str(x) for x in [sys.argv[1], sys.argv[2], sys.argv[3], r["members"],
      "%.3f" % r["build_s"], "%.3f" % r["after_last_start_s"],
      "%.3f" % (r["last_start_unix_s"] - r["first_start_unix_s"]),
      r["frames_total"], r["bytes_total"], "%.1f" % total,
      " ".join("S%d-S%d" % p for p in sites)]))
' "$run" "$kind" "$window"
}

# The slowed site link of the repair mode: S3-S5, 35.1 -> 70.2 ms one way (both directions;
# its 16 process pairs move, the MST swaps it for S0-S5, 61.4 ms: 784.9 ms in all).
SLOW_FROM=3 SLOW_TO=5 SLOW_MS=35.1 SLOWED_MS=70.2
slow() { # slow LATENCY_S: the slowed site link both ways
  "$W" testbed set --name "$NAME" "wan:$SLOW_FROM:$SLOW_TO" "latency_s=$1" >&2
  "$W" testbed set --name "$NAME" "wan:$SLOW_TO:$SLOW_FROM" "latency_s=$1" >&2
}
# What the repair mode's rows check: the tree's site edges and total on Table 1 with the slowed
# link, against the site MST of those latencies (Prim), the frames by kind since a baseline.
CHECK='
import json, sys
lat = [[0, 485.4, 698.9, 14.9, 332.8, 61.4], [485.4, 0, 364.1, 583.8, 13.5, 490.5],
       [698.9, 364.1, 0, 701.2, 371.7, 722.9], [14.9, 583.8, 701.2, 0, 331.0, 35.1],
       [332.8, 13.5, 371.7, 331.0, 0, 355.9], [61.4, 490.5, 722.9, 35.1, 355.9, 0]]
run, what, a, b, ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
lat[a][b] = lat[b][a] = ms
r = json.loads(sys.argv[6])
base = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {"frames": {}}
inn, best = {0}, {v: lat[0][v] for v in range(1, 6)}
mst = 0.0
while best:
    v = min(best, key=lambda x: best[x]); mst += best.pop(v); inn.add(v)
    for u in best: best[u] = min(best[u], lat[v][u])
tree = [(x // 4, y // 4) for x, y in r["tree"]]
sites = sorted({(min(x, y), max(x, y)) for x, y in tree if x != y})
total = sum(lat[x][y] for x, y in tree)
kinds = {k: (f - base["frames"].get(k, [0, 0])[0], n - base["frames"].get(k, [0, 0])[1])
         for k, (f, n) in r["frames"].items()}
kinds = {k: v for k, v in kinds.items() if v[0] > 0}
rep = r.get("repair")
rebuilds = 0
if rep:
    secs, after, epochs = rep["from_change_s"], rep["from_first_fed_s"], rep["epochs"]
    # Epochs of every generation, and the rebuilds for a backlog, since the settled baseline.
    if "epochs_total" in r and "epochs_total" in base:
        epochs = r["epochs_total"] - base["epochs_total"]
        rebuilds = r["rebuilds_total"] - base["rebuilds_total"]
else:
    secs, after, epochs = r["build_s"], r["after_last_start_s"], 0
exact = abs(total - mst) < 1e-6 and len(r["tree"]) == 23 and r["checked_mst_of_held_weights"]
print(",".join(str(x) for x in [run, what, r["members"], "%.3f" % secs,
      "" if after is None else "%.3f" % after, epochs, sum(v[0] for v in kinds.values()),
      sum(v[1] for v in kinds.values()), " ".join("%s:%d" % (k, v[0]) for k, v in sorted(kinds.items())),
      "%.1f" % total, "%.1f" % mst, " ".join("S%d-S%d" % p for p in sites),
      "yes" if exact else "NO", rebuilds]))
'

# repair RUN: a rows-built group (links checked at every forecast), the site link slowed once
# every member holds the tree, then read when every member holds the repaired tree and nothing
# has moved for SETTLE s; the link restored afterwards.
repair() {
  local run=$1
  start_group "msttb-repair-$run" "$(printf 'build = "rows"\ncheck_every = 0\nmin_change = %s\nnoise = %s%s' \
    "$MIN_CHANGE" "$NOISE" "${REBUILD_AFTER:+$'\n'rebuild_after = $REBUILD_AFTER}")"
  local built epoch gen after since out t0
  built=$("$W" mst --group "$DIR/group.toml" --live --wait 120 --json)
  # The members correct the build's weights (each link's first round trips) for a while:
  # wait for the settled tree (no repair running or waiting anywhere for SETTLE s). Until
  # 2026-11-28 this wait passed `--after-epoch -1`, which the CLI refuses, and fell back to
  # the build: the change landed on those corrections (~90 of the 95-119 epochs measured).
  t0=$(date +%s.%N)
  built=$("$W" mst --group "$DIR/group.toml" --live --wait 240 --json --settle "$SETTLE")
  echo "repair $run: settled $(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0 - $SETTLE))") s after the build" >&2
  read -r gen epoch < <(echo "$built" | python3 -c 'import json,sys; r = json.load(sys.stdin); print(r["generation"], r["epoch"])')
  # --after-generation only where needed: a binary without backlog rebuilds lacks it.
  after=(--after-epoch "$epoch")
  [ "$gen" != 0 ] && after+=(--after-generation "$gen")
  since=$(date +%s.%N)
  slow "$(python3 -c "print($SLOWED_MS / 1000)")"
  out=$("$W" mst --group "$DIR/group.toml" --live --wait "$REPAIR_WAIT" --json \
    "${after[@]}" --since "$since" --settle "$SETTLE")
  leave
  slow "$(python3 -c "print($SLOW_MS / 1000)")"
  python3 -c "$CHECK" "$run" repair $SLOW_FROM $SLOW_TO $SLOWED_MS "$out" "$built"
  # Who fed what: one JSON line per member (its requests, and per owned link the changes fed).
  [ -n "$FEEDS" ] && echo "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
rep = r.get("repair") or {}
for m in r.get("feeds", []):
    print(json.dumps({"run": int(sys.argv[1]), "member": m["id"], "requests": m["requests"],
          "since_unix_s": rep.get("since_unix_s"),
          "links": [{"peer": p, "count": c, "fed": w} for p, c, w in m["links"]]}))
' "$run" >> "$FEEDS"
  return 0
}

# rebuild BUILD RUN: a fresh group built as BUILD (rows, ghs16) on the slowed network.
rebuild() {
  local build=$1 run=$2 out
  case $build in
    rows | ghs16) ;;
    *) echo "unknown rebuild $build (rows or ghs16)" >&2; exit 2 ;;
  esac
  slow "$(python3 -c "print($SLOWED_MS / 1000)")"
  start_group "msttb-re$build-$run" "$(build_table "$build")"
  out=$("$W" mst --group "$DIR/group.toml" --live --wait 120 --json)
  leave
  slow "$(python3 -c "print($SLOW_MS / 1000)")"
  python3 -c "$CHECK" "$run" "rebuild-$build" $SLOW_FROM $SLOW_TO $SLOWED_MS "$out"
}

"$W" testbed up "$SCENARIO" --name "$NAME" >&2
if [ "${BUILDS[0]}" = repair ]; then
  SETTLE=${SETTLE:-8}
  REPAIR_WAIT=${REPAIR_WAIT:-120}
  MIN_CHANGE=${MIN_CHANGE:-5}
  NOISE=${NOISE:-0}
  # FEEDS=FILE.jsonl: append every member's repair counters (see repair above).
  FEEDS=${FEEDS:-}
  REBUILDS=${REBUILDS:-1}
  # REBUILD_AFTER=K: `[mst] rebuild_after = K` (unset: the default; 0: repair every change
  # one epoch at a time, as before the backlog rebuilds).
  REBUILD_AFTER=${REBUILD_AFTER:-}
  echo "run,what,members,seconds,after_s,epochs,frames,bytes,frames_by_kind,tree_ms,mst_ms,site_edges,exact,rebuilds"
  for run in $(seq 1 "$RUNS"); do
    repair "$run"
    [ "$REBUILDS" = 0 ] && continue
    rebuild rows "$run"
    rebuild ghs16 "$run"
  done
  exit 0
fi
echo "run,build,test_window,members,build_s,after_last_start_s,start_skew_s,frames,bytes,tree_ms,site_edges"
for run in $(seq 1 "$RUNS"); do
  for b in "${BUILDS[@]}"; do
    one "$b" "$run"
  done
done
