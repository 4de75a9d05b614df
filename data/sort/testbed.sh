#!/bin/bash
# Issue 19's sort benchmark on the emulated heterogeneous testbed (as root):
# data/scenarios/testbed/sort-hetero.toml (16 nodes in 4 clusters, 3-5 MB/s WAN, nodes at
# 1x/2x/4x as CPU quotas of 0.05/0.1/0.2 core). Every node gets an equal share of one seeded
# data set (`windrose gensort`), 16 long-lived members (`windrose group serve --sort-input
# --sort-output`, one per namespace, each under its node's quota) sort it with each SORT in turn
# (`windrose sort --group`), and `windrose valsort` checks every output against the inputs.
#
# Prints CSV: sort, records, bytes, seconds (the sort's start request to every member's end),
# max_finish_s and mean_finish_s (each member's own start to end, as the initiator heard them),
# valsort (ok or FAILED; a sort that failed is a line with only its name and FAILED, the
# members' last log lines on stderr).
#
# Run from the repository root:
#   bash data/sort/testbed.sh [WINDROSE_BINARY] [RECORDS_PER_NODE] [REPS] [SORTS...]
# SORTS: heterosort-splitters, heterosort-measured, heterosort-speeds, heterosort-equal,
# sample-sort (default: splitters, equal and sample sort; the speed slices' cycles are slow:
# name them to run them). heterosort-measured is the splitters without --speeds: weighted by
# the compute speeds the members measured (each times a sort of 16 MiB of records when it
# starts); the script waits MEASURE_WAIT seconds (default 8) after the members start, for the
# calibrations and two rounds of the rows that share them, and prints member 0's view
# (`windrose group weather`, its compute MB/s column) on stderr before the sort.
# data/sort/testbed-measured.csv: 256 MB, measured splitters, sample sort and splitters with
# --speeds alternated twice, load 15-27; data/sort/testbed-measured-phases.jsonl: the same
# once more with SORT_JSON (every member's steps, `phases`), load 10-22;
# data/sort/testbed-measured-1gib.csv: 1 GiB once each, the measured splitters failed.
# data/sort/testbed-liveness-ab-1gib.csv (and -phases.jsonl): 1 GiB, main's binary and the
# branch that counts bytes read as a member heard from, alternated (run, build, load columns
# added; main's first measured splitters hung after false give-ups and was killed), load 3-31.
# e.g. bash data/sort/testbed.sh target/release/windrose 10000 1 > data/sort/testbed-16mb.csv
# data/sort/testbed-splitters.csv: 256 MB (163840 per node: splitters, sample sort, equal
# slices) and 1 GiB (655360 per node: splitters, sample sort), one run each, load 4-5.
# data/sort/testbed-stream-ab-1gib.csv: 1 GiB, main's binary (splitters sorting before the
# exchange; sample sort) and the streaming splitters (`build` new) alternated twice, load ~7;
# data/sort/testbed-stream-ab-256mb.csv: the same at 256 MB, three times.
# A SORT may end in :lz4 or :none (e.g. sample-sort:none): the sort's `--compress` (how the
# exchanged records travel between clusters; without a suffix, the binary's default, lz4;
# binaries before compression take no suffix). data/sort/testbed-compress-1gib.csv: 1 GiB,
# measured splitters and the sample sort, each with and without compression, alternated
# three times (SORT_JSON reports in data/sort/testbed-compress-1gib-phases.jsonl).
# With SORT_JSON=FILE each sort's whole `windrose sort --json` report (per-member finish times
# included) is appended to FILE, one line per sort. With SORT_MEASURE_DIR=DIR every member
# writes its link measurements (each connection's MB/s every 200 ms, `group serve
# --measurements`) to DIR/REP-SORT-mID.json when it leaves.
# The data goes under $SORT_DIR (default: a new directory in /tmp): 2 x 100 bytes x 16 x
# RECORDS_PER_NODE bytes at once, plus the members' memory for the same.
set -euo pipefail
W=$(realpath "${1:-target/release/windrose}")
PER_NODE=${2:-10000}
REPS=${3:-1}
shift $(( $# < 3 ? $# : 3 ))
SORTS=("$@")
if [ ${#SORTS[@]} -eq 0 ]; then
  SORTS=(heterosort-splitters heterosort-equal sample-sort)
fi
NAME=${SORT_TESTBED:-hsort}
SCENARIO=data/scenarios/testbed/sort-hetero.toml
# The relative speeds the scenario gives nodes 0..15 (1x, 1x, 2x, 4x in every cluster).
SPEEDS=1,1,2,4,1,1,2,4,1,1,2,4,1,1,2,4
DIR=$(mktemp -d "${SORT_DIR:-/tmp}/windrose-sort-XXXXXX")
pids=()
leave() {
  for i in $(seq 0 15); do
    [ -S "$DIR/c$i.sock" ] && timeout 30 "$W" group leave --control "$DIR/c$i.sock" >/dev/null 2>&1 || true
  done
  [ ${#pids[@]} -gt 0 ] && { wait "${pids[@]}" 2>/dev/null || true; }
  pids=()
  rm -f "$DIR"/c*.sock
}
cleanup() {
  leave
  "$W" testbed down "$NAME" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

"$W" testbed up "$SCENARIO" --name "$NAME" >&2
"$W" testbed group --name "$NAME" --port 7300 --out "$DIR/group.toml"
for i in $(seq 0 15); do
  "$W" gensort --records "$PER_NODE" --start $((i * PER_NODE)) --seed 19 "$DIR/in-$i" >/dev/null
done

serve() {
  for i in $(seq 0 15); do
    extra=()
    if [ -n "${SORT_MEASURE_DIR:-}" ]; then
      extra=(--measurements "$SORT_MEASURE_DIR/$rep-$s-m$i.json")
    fi
    "$W" testbed exec --name "$NAME" "$i" -- "$W" group serve --id "$i" \
      --group "$DIR/group.toml" --control "$DIR/c$i.sock" "${extra[@]}" \
      --sort-input "$DIR/in-{id}" --sort-output "$DIR/out-{id}" >"$DIR/m$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 600); do
    ready=1
    for i in $(seq 0 15); do [ -S "$DIR/c$i.sock" ] || ready=0; done
    [ $ready = 1 ] && break
    sleep 0.1
  done
  sleep 2 # the members' connections
}

echo "sort,records,bytes,seconds,max_finish_s,mean_finish_s,valsort"
for rep in $(seq "$REPS"); do
  for s in "${SORTS[@]}"; do
    comp=()
    case "$s" in
      *:lz4|*:none) comp=(--compress "${s##*:}") ;;
    esac
    case "${s%%:*}" in
      heterosort-splitters) args=(--protocol heterosort --slicing splitters --speeds "$SPEEDS") ;;
      heterosort-measured) args=(--protocol heterosort --slicing splitters) ;;
      heterosort-speeds) args=(--protocol heterosort --slicing speeds --speeds "$SPEEDS") ;;
      heterosort-equal) args=(--protocol heterosort --slicing equal) ;;
      sample-sort) args=(--protocol sample-sort) ;;
      *) echo "unknown sort $s" >&2; exit 2 ;;
    esac
    serve
    if [ "${s%%:*}" = heterosort-measured ]; then
      sleep "${MEASURE_WAIT:-8}"
      "$W" group weather --group "$DIR/group.toml" --id 0 --control "$DIR/c0.sock" >&2 || true
    fi
    echo "rep $rep: $s ..." >&2
    if ! out=$("$W" sort --group "$DIR/group.toml" --id 0 --control "$DIR/c0.sock" --json "${args[@]}" \
      "${comp[@]}" --input "$DIR/in-{id}" --output "$DIR/out-{id}"); then
      # A failed sort: a CSV line saying so, and what the members said.
      echo "$s,,,,,,FAILED"
      for i in $(seq 0 15); do echo "member $i:"; tail -n 5 "$DIR/m$i.log"; done >&2
      leave
      continue
    fi
    if "$W" valsort $(for i in $(seq 0 15); do echo "$DIR/out-$i"; done) \
      --against $(for i in $(seq 0 15); do echo "$DIR/in-$i"; done) >&2; then
      v=ok
    else
      v=FAILED
    fi
    if [ -n "${SORT_JSON:-}" ]; then echo "$out" >>"$SORT_JSON"; fi
    echo "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin)
f = lambda x: "" if x is None else "%.3f" % x
print(",".join([sys.argv[1], str(r["records"]), str(r["bytes"]), f(r["sort_seconds"]),
                f(r["max_finish_s"]), f(r["mean_finish_s"]), sys.argv[2]]))' "$s" "$v"
    leave
    rm -f "$DIR"/out-*
  done
done
