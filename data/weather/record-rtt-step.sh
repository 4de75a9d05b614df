#!/bin/bash
# Records the RTT series of data/weather/testbed-rtt-step.json on the emulated testbed (as root):
# data/scenarios/testbed/two-by-two.toml (2 clusters x 2 nodes, 5 MB/s and 10 ms one way between
# the clusters), a 200 MB broadcast from node 0 with `bcast --measurements`, and the WAN's one-way
# latency raised from 10 ms to 40 ms both ways 20 s after the broadcast starts. Keeps only the RTT
# series (the probes run every 500 ms).
#
# Run from the repository root:  bash data/weather/record-rtt-step.sh [WINDROSE_BINARY]
set -euo pipefail
W=$(realpath "${1:-target/release/windrose}")
REPO=$(pwd)
NAME=fcast
DIR=$(mktemp -d /tmp/windrose-weather-XXXXXX)
trap '"$W" testbed down "$NAME" >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

"$W" testbed up data/scenarios/testbed/two-by-two.toml --name "$NAME"
cd "$DIR"
"$W" testbed group --name "$NAME" --group-name testbed --out group.toml
head -c 200000000 /dev/urandom > data.bin
for i in 1 2 3; do
  "$W" testbed exec --name "$NAME" "$i" -- "$W" node --once --group group.toml --id "$i" --quiet \
    > "node-$i.log" 2>&1 &
done
sleep 1
( sleep 20
  "$W" testbed set --name "$NAME" wan:0:1 latency_s=0.04
  "$W" testbed set --name "$NAME" wan:1:0 latency_s=0.04 ) &
"$W" testbed exec --name "$NAME" 0 -- "$W" bcast --group group.toml --file data.bin \
  --measurements measurements.json --quiet --timeout 60
wait
jq '[.[] | {series: [.series[] | select(.metric == "rtt_ms")]}]' measurements.json \
  > "$REPO/data/weather/testbed-rtt-step.json"
echo "wrote data/weather/testbed-rtt-step.json"
