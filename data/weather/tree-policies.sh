#!/bin/bash
# Issue 16's series on the emulated testbed (as root): the four clusters of 4 nodes of
# data/scenarios/testbed/four-clusters.toml (3-5 MB/s and 20 ms round trips between clusters), a
# long-lived group of 16 members (`windrose group serve`, one per namespace), COUNT broadcasts of
# MIB MiB from member 0 one after the other, and the WAN between cluster 0 and cluster 1 (both ways)
# set to 5 MB/s at the start and slowed to 0.5 MB/s after the CHANGE_AFTER-th broadcast. Each
# tree policy gets a fresh group (so a fresh weather view). Prints one CSV line per broadcast:
# policy, index, seconds (the initiator's time from start to every member's report).
#
# Run from the repository root:
#   bash data/weather/tree-policies.sh [WINDROSE_BINARY] [COUNT] [MIB] [CHANGE_AFTER] [POLICIES...]
# e.g. bash data/weather/tree-policies.sh target/release/windrose 20 16 5 static:balanced-path adapt rebuild:mst
set -euo pipefail
W=$(realpath "${1:-target/release/windrose}")
COUNT=${2:-20}
MIB=${3:-16}
CHANGE_AFTER=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
POLICIES=("$@")
if [ ${#POLICIES[@]} -eq 0 ]; then
  POLICIES=(static:balanced-path adapt rebuild:mst)
fi
NAME=wxpol
DIR=$(mktemp -d /tmp/windrose-policies-XXXXXX)
cleanup() {
  for s in "$DIR"/c*.sock; do
    [ -S "$s" ] && timeout 20 "$W" group leave --control "$s" >/dev/null 2>&1 || true
  done
  "$W" testbed down "$NAME" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

"$W" testbed up data/scenarios/testbed/four-clusters.toml --name "$NAME" >&2
{
  echo 'name = "tree-policies"'
  echo 'protocol_version = 1'
  for c in 0 1 2 3; do
    for k in 0 1 2 3; do
      echo "[[node]]"
      echo "id = $((c * 4 + k))"
      echo "addr = \"10.77.$c.$((k + 1)):7200\""
      echo "cluster = $c"
    done
  done
} > "$DIR/group.toml"
head -c "$((MIB << 20))" /dev/urandom > "$DIR/data.bin"

echo "policy,broadcast,seconds"
for policy in "${POLICIES[@]}"; do
  for ab in 0:1 1:0; do
    "$W" testbed set --name "$NAME" "wan:$ab" bytes_s=5e6 >&2
  done
  pids=()
  for i in $(seq 0 15); do
    "$W" testbed exec --name "$NAME" "$i" -- "$W" group serve --quiet --id "$i" \
      --group "$DIR/group.toml" --control "$DIR/c$i.sock" >"$DIR/m$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 200); do
    ready=1
    for i in $(seq 0 15); do [ -S "$DIR/c$i.sock" ] || ready=0; done
    [ $ready = 1 ] && break
    sleep 0.1
  done
  sleep 3 # connections, probe lanes and the first round trips
  for k in $(seq 1 "$COUNT"); do
    if [ "$k" -eq $((CHANGE_AFTER + 1)) ]; then
      for ab in 0:1 1:0; do
        "$W" testbed set --name "$NAME" "wan:$ab" bytes_s=5e5 >&2
      done
    fi
    secs=$("$W" group start bcast --json --tree "$policy" --segment 256KiB \
      --control "$DIR/c0.sock" --file "$DIR/data.bin" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
    echo "$policy,$k,$secs"
  done
  for i in $(seq 0 15); do
    timeout 30 "$W" group leave --control "$DIR/c$i.sock" >/dev/null 2>&1 || true
  done
  wait "${pids[@]}" 2>/dev/null || true
  rm -f "$DIR"/c*.sock
done
