#!/usr/bin/env bash
# MPI_Bcast on the emulated multi-cluster testbed: windrose's shim against Open MPI's own
# broadcasts, one rank per node namespace, mpirun inside node 0's namespace (issue 18).
#
#   crates/windrose-mpi/bench/testbed.sh sweep  [OUT.csv]   # sizes x variants, rounds alternated
#   crates/windrose-mpi/bench/testbed.sh series [OUT.csv]   # 4 MiB calls, WAN 0<->1 slowed mid-way
#
# Run as root from the repository root, after
#   cargo build --release -p windrose -p windrose-mpi      (the shim built for Open MPI)
# Needs Open MPI (mpirun.openmpi, mpicc.openmpi), iproute2, unshare, jq, python3.
#
# How the ranks are started: the testbed gives every node a network namespace. mpirun runs in
# node 0's and starts its daemons through its rsh launcher, whose agent (generated below) maps
# a "host" (a node's address) to that node's namespace and runs the daemon there in a UTS
# namespace of its own, so every rank sees its own host name and Open MPI sees 16 hosts.
# TCP only (btl tcp,self) on the nodes' eth0.
#
# Settings (environment): SCENARIO (data/scenarios/testbed/four-clusters.toml), NAME (mpib),
# ROUNDS (sweep: 2), SIZES (sweep: "CALLSxBYTES ..." per round), VARIANTS (space-separated, see
# variant_args), SEG (forced algorithms' segment bytes: 65536), SERIES_CALLS (25),
# SERIES_AFTER (10), SERIES_BYTES (4194304), FAST_BYTES_S (5e6), SLOW_BYTES_S (5e5),
# RUN_TIMEOUT (seconds per mpirun: 900), SHIM (the shim to preload: target/release's; a copy of
# another build's, to set two builds side by side).
#
# Every call's time (the slowest rank's) goes to OUT.csv as
#   mode,round,variant,label,bytes,call,seconds,load1
# (label is the variant, or VARIANT/pmpi for the same process's PMPI_Bcast below the shim's
# threshold), and the WAN bytes each run moved per cluster pair (the routers' counters, from
# `windrose testbed traffic`) to OUT-wan.csv as  mode,round,variant,from,to,bytes.
# crates/windrose-mpi/bench/testbed_summary.py prints the medians and ratios.
set -euo pipefail

mode=${1:-}
case $mode in
sweep | series) ;;
*)
    echo "usage: $0 sweep|series [OUT.csv]" >&2
    exit 2
    ;;
esac
out=${2:-data/testbed/mpi-$mode.csv}

[ "$(id -u)" = 0 ] || { echo "$0: the testbed needs root" >&2; exit 2; }
root=$(pwd)
windrose=$root/target/release/windrose
shim=${SHIM:-$root/target/release/libwindrose_mpi.so}
for f in "$windrose" "$shim"; do
    [ -x "$f" ] || { echo "$0: $f is missing: cargo build --release -p windrose -p windrose-mpi" >&2; exit 2; }
done
for t in mpirun.openmpi mpicc.openmpi jq python3 unshare ip; do
    command -v "$t" >/dev/null || { echo "$0: $t is not installed" >&2; exit 2; }
done
case $(ldd "$shim") in *libmpi.so.40*) ;; *) false ;; esac || { echo "$0: $shim is not built for Open MPI (WINDROSE_MPI_ABI=openmpi)" >&2; exit 2; }

scenario=${SCENARIO:-data/scenarios/testbed/four-clusters.toml}
name=${NAME:-mpib}
rounds=${ROUNDS:-2}
sizes=${SIZES:-"9x1024 9x4096 9x16384 9x65536 5x262144 3x1048576 2x4194304 1x16777216"}
seg=${SEG:-65536}
series_calls=${SERIES_CALLS:-25}
series_after=${SERIES_AFTER:-10}
series_bytes=${SERIES_BYTES:-4194304}
fast=${FAST_BYTES_S:-5e6}
slow=${SLOW_BYTES_S:-5e5}
run_timeout=${RUN_TIMEOUT:-900}
if [ "$mode" = sweep ]; then
    variants=${VARIANTS:-"windrose windrose-hosts default chain pipeline binomial han"}
else
    variants=${VARIANTS:-"windrose default chain"}
fi

if "$windrose" testbed status 2>/dev/null | awk '{print $1}' | grep -qx "$name"; then
    echo "$0: a testbed named $name is up already; take it down first (windrose testbed down $name)" >&2
    exit 2
fi

tmp=$(mktemp -d /tmp/windrose-mpibench.XXXXXX)
cleanup() {
    "$windrose" testbed down "$name" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mpicc.openmpi -O2 -Wall -o "$tmp/bcast_calls" "$root/crates/windrose-mpi/bench/bcast_calls.c"

"$windrose" testbed up "$scenario" --name "$name" >"$tmp/up.log"
state=/run/windrose/testbeds/$name.json
nodes=$(jq '.node_addrs | length' "$state")

# The agent: "ns-agent HOST WORDS..." runs the words (joined, as ssh does) in HOST's namespace.
{
    echo '#!/bin/sh'
    echo 'host=$1; shift'
    echo 'case $host in'
    for i in $(seq 0 $((nodes - 1))); do
        echo "  $(jq -r ".node_addrs[$i]" "$state")) node=$i ;;"
    done
    echo '  *) echo "ns-agent: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    echo "exec ip netns exec wr-$name-n\$node unshare --uts sh -c 'hostname n'\$node'; exec sh -c \"\$0\"' \"\$*\""
} >"$tmp/ns-agent"
chmod +x "$tmp/ns-agent"
jq -r '.node_addrs[] | . + " slots=1"' "$state" >"$tmp/hosts"
node0=$(jq -r '.node_addrs[0]' "$state")

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
launch=(mpirun.openmpi -np "$nodes" --hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/ns-agent"
    --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self --mca btl_tcp_if_include eth0
    --mca oob_tcp_if_include eth0)

if [ "$mode" = series ]; then
    # Rank 0 (in node 0's namespace) slows the link after call $series_after.
    export BCAST_CALLS_HOOK_AFTER=$series_after
    export BCAST_CALLS_HOOK="$windrose testbed set --name $name wan:0:1 bytes_s=$slow >/dev/null && $windrose testbed set --name $name wan:1:0 bytes_s=$slow >/dev/null"
    launch+=(-x BCAST_CALLS_HOOK_AFTER -x BCAST_CALLS_HOOK)
fi

forced() { echo --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_bcast_algorithm "$1" --mca coll_tuned_bcast_algorithm_segmentsize "$seg"; }
variant_args() {
    case $1 in
    # The shim, default settings (threshold 262144 bytes); below it the same process also
    # times PMPI_Bcast (Open MPI's default) call for call.
    windrose) echo -x LD_PRELOAD="$shim" -x BCAST_CALLS_PMPI_BELOW=262144 ;;
    # The shim with its sites: host leaders clustered by measured round trips.
    windrose-hosts) echo -x LD_PRELOAD="$shim" -x WINDROSE_MPI_TOPOLOGY=hosts ;;
    # The same with a fixed tree (what the root measures does not change it).
    windrose-hosts-static) echo -x LD_PRELOAD="$shim" -x WINDROSE_MPI_TOPOLOGY=hosts -x WINDROSE_MPI_TREE=static:balanced-path ;;
    # The sites with MOB between them, or the root's Host's choice, for calls of >= 256 KiB.
    windrose-hosts-mob) echo -x LD_PRELOAD="$shim" -x WINDROSE_MPI_TOPOLOGY=hosts -x WINDROSE_MPI_PROTOCOL=mob ;;
    windrose-hosts-auto) echo -x LD_PRELOAD="$shim" -x WINDROSE_MPI_TOPOLOGY=hosts -x WINDROSE_MPI_PROTOCOL=auto ;;
    # MOB with 256 KiB pieces (a label may not hold digits; the default is a 64th of the message: 64 KiB at 4 MiB).
    windrose-hosts-mob-big) echo -x LD_PRELOAD="$shim" -x WINDROSE_MPI_TOPOLOGY=hosts -x WINDROSE_MPI_PROTOCOL=mob -x WINDROSE_MPI_PIECE=262144 ;;
    default) echo ;;                      # Open MPI's tuned, its fixed decision rules
    chain) forced 2 ;;
    pipeline) forced 3 ;;
    binomial) forced 6 ;;
    han) echo --mca coll_han_priority 100 ;;
    *)
        echo "$0: unknown variant $1" >&2
        return 2
        ;;
    esac
}
for v in $variants; do variant_args "$v" >/dev/null; done

mkdir -p "$(dirname "$out")"
[ -s "$out" ] || echo "mode,round,variant,label,bytes,call,seconds,load1" >"$out"
wan=${out%.csv}-wan.csv
[ -s "$wan" ] || echo "mode,round,variant,from,to,bytes" >"$wan"

# One mpirun of variant $2 in round $1 with bench arguments $3...; its calls appended to $out.
run() {
    local round=$1 v=$2
    shift 2
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    "$windrose" testbed traffic --name "$name" --json >"$tmp/wan.before"
    # shellcheck disable=SC2046 # variant_args prints words
    if ! timeout "$run_timeout" "$tmp/ns-agent" "$node0" "${launch[@]}" $(variant_args "$v") \
        "$tmp/bcast_calls" "$v" "$@" >"$tmp/run.out" 2>"$tmp/run.err"; then
        echo "$0: $v (round $round) failed:" >&2
        grep -v setpgid "$tmp/run.err" | tail -20 >&2
        return 1
    fi
    grep -E '^[a-z/-]+,[0-9]+,[0-9]+,[0-9.]+$' "$tmp/run.out" |
        sed "s|^|$mode,$round,$v,|; s|\$|,$load|" >>"$out"
    # The WAN bytes the run moved, per link, read from the routers' counters.
    "$windrose" testbed traffic --name "$name" --json >"$tmp/wan.after"
    jq -r --arg p "$mode,$round,$v" --slurpfile b "$tmp/wan.before" '
        .wan_bytes as $a | [range(0; $a | length)] | .[] as $i | [range(0; $a | length)] | .[]
        | select(. != $i) as $j | "\($p),\($i),\($j),\($a[$i][$j] - $b[0].wan_bytes[$i][$j])"' \
        "$tmp/wan.after" >>"$wan"
    echo "round $round $v: $(grep -c , "$tmp/run.out") calls (load $load)" >&2
}

# The WAN link between the root's cluster and the next, both ways.
set_01() {
    "$windrose" testbed set --name "$name" wan:0:1 bytes_s="$1" >/dev/null
    "$windrose" testbed set --name "$name" wan:1:0 bytes_s="$1" >/dev/null
}

set -- $variants
count=$#
for r in $(seq 1 "$rounds"); do
    # Alternate: each round starts one variant later.
    for k in $(seq 0 $((count - 1))); do
        i=$(((k + r - 1) % count + 1))
        v=${!i}
        if [ "$mode" = sweep ]; then
            # shellcheck disable=SC2086 # one argument per size
            run "$r" "$v" $sizes
        else
            set_01 "$fast"
            run "$r" "$v" "${series_calls}x$series_bytes"
        fi
    done
done
echo "calls appended to $out" >&2
python3 "$root/crates/windrose-mpi/bench/testbed_summary.py" "$out" --after "$series_after"
