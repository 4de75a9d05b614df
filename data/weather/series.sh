#!/bin/bash
# Issue 16's series on the emulated testbed (as root): the four clusters of 4 nodes of
# data/scenarios/testbed/four-clusters.toml (3-5 MB/s and 20 ms round trips between clusters),
# a long-lived group of 16 members (`windrose group serve`, one per namespace), COUNT broadcasts
# of MIB MiB from member 0 one after the other, the WAN between clusters 0 and 1 (both ways) at
# 5 MB/s (as fast as the fastest) and slowed to 0.5 MB/s after the CHANGE_AFTER-th broadcast. Each policy
# gets a fresh group (a fresh weather view).
#
# The oracles know the change in advance: trees planned on a view that has learnt the network
# they will run on. `oracle` (the issue's, judged against adapt) plans with adapt's freedom:
# its first tree for the message (binomial-shaped; site-ordered for these sizes) built on that
# view and kept, i.e. adapt:position with a threshold no change reaches. `oracle:ALGO` plans
# static:ALGO trees (oracle:mst, an MST: any shape). Warm-ups use rebuild:ALGO (rebuild:mst for
# `oracle`). Before the first timed broadcast, untimed 4 MiB
# broadcasts under rebuild:ALGO measure the links (two); broadcasts 1..CHANGE_AFTER run under
# static:ALGO, built on that view. At the change, untimed rebuild:ALGO broadcasts run until
# the tree avoids the slowed link (at most ten), so the view holds every pair it would use;
# the rest run under static:ALGO again, built afresh on that view (a change of policy builds
# a new tree) and kept.
#
# Socket buffers: the sender's meter skips the connection's buffer bound (tcp_wmem max +
# tcp_rmem max) per busy period; the testbed allows 16 MiB each, more than a broadcast. The
# script bounds them to 1 MiB in every node's namespace (per-namespace sysctls; 1 MiB is 5x the
# WAN's bandwidth-delay product), as crates/windrose/tests/weather_testbed.rs does.
#
# Prints CSV: policy, broadcast (0 = oracle warm-up), seconds (the initiator's time from start
# to every member's report), start_s (when it started, seconds after the change; empty
# before), slow_link_bytes (bytes that crossed wan:0:1 and wan:1:0 during it, from the testbed's
# counters), and the root's line about the tree it planned.
# Beside the simulator's series: windrose reproduce weather --testbed FILE.csv
#
# Run from the repository root:
#   bash data/weather/series.sh [WINDROSE_BINARY] [COUNT] [MIB] [CHANGE_AFTER] [POLICIES...]
# e.g. bash data/weather/series.sh target/release/windrose 20 16 5 static:balanced-path adapt rebuild:mst oracle:mst
set -euo pipefail
W=$(realpath "${1:-target/release/windrose}")
COUNT=${2:-20}
MIB=${3:-16}
CHANGE_AFTER=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
POLICIES=("$@")
if [ ${#POLICIES[@]} -eq 0 ]; then
  POLICIES=(static:balanced-path adapt rebuild:mst oracle:mst oracle)
fi
# The testbed's name (its namespaces are named after it): SERIES_NAME=... to run beside another.
NAME=${SERIES_NAME:-wxser}
DIR=$(mktemp -d /tmp/windrose-series-XXXXXX)
cleanup() {
  for s in "$DIR"/c*.sock; do
    [ -S "$s" ] && timeout 20 "$W" group leave --control "$s" >/dev/null 2>&1 || true
  done
  "$W" testbed down "$NAME" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

"$W" testbed up data/scenarios/testbed/four-clusters.toml --name "$NAME" >&2
for i in $(seq 0 15); do
  "$W" testbed exec --name "$NAME" "$i" -- sysctl -qw "net.ipv4.tcp_wmem=4096 65536 1048576"
  "$W" testbed exec --name "$NAME" "$i" -- sysctl -qw "net.ipv4.tcp_rmem=4096 131072 1048576"
done
"$W" testbed group --name "$NAME" --group-name weather-series --port 7200 --out "$DIR/group.toml"
head -c "$((MIB << 20))" /dev/urandom > "$DIR/data.bin"
head -c "$((4 << 20))" /dev/urandom > "$DIR/warm.bin"

slow_bytes() {
  "$W" testbed traffic --name "$NAME" --json |
    python3 -c 'import json,sys; w=json.load(sys.stdin)["wan_bytes"]; print(w[0][1]+w[1][0])'
}
set_link() {
  for ab in 0:1 1:0; do
    "$W" testbed set --name "$NAME" "wan:$ab" "bytes_s=$1" >&2
  done
}
serve() {
  pids=()
  for i in $(seq 0 15); do
    quiet=--quiet
    [ "$i" -eq 0 ] && quiet=
    "$W" testbed exec --name "$NAME" "$i" -- "$W" group serve $quiet --id "$i" \
      --group "$DIR/group.toml" --control "$DIR/c$i.sock" >"$DIR/m$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 300); do
    ready=1
    for i in $(seq 0 15); do [ -S "$DIR/c$i.sock" ] || ready=0; done
    [ $ready = 1 ] && break
    sleep 0.1
  done
  sleep 3 # connections, probe lanes and the first round trips
}
leave() {
  for i in $(seq 0 15); do
    timeout 30 "$W" group leave --control "$DIR/c$i.sock" >/dev/null 2>&1 || true
  done
  wait "${pids[@]}" 2>/dev/null || true
  rm -f "$DIR"/c*.sock
}
# broadcast LABEL INDEX TREE FILE: one CSV line; sets AVOIDED=1 when the slow link carried
# less than half the message.
broadcast() {
  local before after at secs transfer plan bytes
  before=$(slow_bytes)
  at=$(date +%s.%N)
  local out
  out=$("$W" group start bcast --json --tree "$3" --segment 256KiB \
    --control "$DIR/c0.sock" --file "$4")
  after=$(slow_bytes)
  secs=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
  transfer=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["transfer"])')
  plan=$(grep "^transfer $transfer: tree " "$DIR/m0.log" | sed 's/^[^:]*: //; s/,/;/g' || true)
  bytes=$((after - before))
  AVOIDED=$(( bytes < $(stat -c %s "$4") / 2 ? 1 : 0 ))
  local since=
  [ -n "${CHANGED_AT:-}" ] && since=$(python3 -c "print(round($at - $CHANGED_AT, 3))")
  echo "$1,$2,$secs,$since,$bytes,$plan"
}

echo "policy,broadcast,seconds,start_s,slow_link_bytes,plan"
for policy in "${POLICIES[@]}"; do
  case $policy in
    oracle*)
      if [ "$policy" = oracle ]; then
        warm=rebuild:mst timed=adapt:position:1e300
      else
        warm=rebuild:${policy#oracle:} timed=static:${policy#oracle:}
      fi
      set_link 5e6
      serve
      unset CHANGED_AT
      for w in 1 2; do
        broadcast "$policy" 0 "$warm" "$DIR/warm.bin"
        sleep 2.5 # a gossip period, so every sender's row is in the root's view
      done
      for k in $(seq 1 "$CHANGE_AFTER"); do
        broadcast "$policy" "$k" "$timed" "$DIR/data.bin"
      done
      set_link 5e5
      CHANGED_AT=$(date +%s.%N)
      for w in $(seq 1 10); do
        broadcast "$policy" 0 "$warm" "$DIR/warm.bin"
        [ "$AVOIDED" = 1 ] && break
        sleep 2.5
      done
      for k in $(seq $((CHANGE_AFTER + 1)) "$COUNT"); do
        broadcast "$policy" "$k" "$timed" "$DIR/data.bin"
      done
      ;;
    *)
      set_link 5e6
      serve
      unset CHANGED_AT
      for k in $(seq 1 "$COUNT"); do
        if [ "$k" -eq $((CHANGE_AFTER + 1)) ]; then
          set_link 5e5
          CHANGED_AT=$(date +%s.%N)
        fi
        broadcast "$policy" "$k" "$policy" "$DIR/data.bin"
      done
      ;;
  esac
  leave
done
