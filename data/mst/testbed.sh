#!/bin/bash
# Issue 17: the live MST's build on the emulated testbed (as root), rows against GHS. The six
# sites of seed 004 (data/scenarios/testbed/six-sites.toml: 6 x 4 processes, Table 1's one-way
# latencies through the delay line, up to 0.7229 s); a fresh group of 24 members per run
# (`windrose group serve --mst-live latency`, one per namespace), the build chosen by the group
# file's [mst] table (every member reads it from the same file). Probes every 2 s by default
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

# one BUILD RUN: a fresh group built as BUILD says, one CSV line.
one() {
  local build=$1 run=$2 kind window
  case $build in
    rows) kind=rows window=16 ;;
    ghs16) kind=ghs window=16 ;;
    ghs1) kind=ghs window=1 ;;
    *) echo "unknown build $build (rows, ghs16 or ghs1)" >&2; exit 2 ;;
  esac
  # Its own group name per run: fresh default control sockets.
  "$W" testbed group --name "$NAME" --group-name "msttb-$build-$run" --port 7300 \
    --out "$DIR/group.toml"
  printf '\n[mst]\nbuild = "%s"\ntest_window = %s\n' "$kind" "$window" >> "$DIR/group.toml"
  for i in $(seq 0 $((N - 1))); do
    "$W" testbed exec --name "$NAME" "$i" -- "$W" group serve --quiet --id "$i" \
      --group "$DIR/group.toml" --mst-live latency --probe-period "$PROBE_PERIOD" \
      >"$DIR/m$i.log" 2>&1 &
    pids+=($!)
  done
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

"$W" testbed up "$SCENARIO" --name "$NAME" >&2
echo "run,build,test_window,members,build_s,after_last_start_s,start_skew_s,frames,bytes,tree_ms,site_edges"
for run in $(seq 1 "$RUNS"); do
  for b in "${BUILDS[@]}"; do
    one "$b" "$run"
  done
done
