#!/usr/bin/env python3
"""Runs a windrose network validation scenario in SimGrid and prints, as JSON, the time at which
every message arrives.

    simgrid_flows.py SCENARIO.toml

The scenario file is the one windrose's test reads (crates/windrose-sim/tests/simgrid.rs):

- `[platform]`: windrose's platform table (see windrose_model::platform): clusters with node
  counts, node and access capacities (bytes/s) and an intra-cluster latency, C x C WAN capacity
  and latency tables, optional per-node capacity overrides;
- `[[flow]]`: a connection `src -> dst` that sends the messages `bytes = [...]` one after the
  other, the first at `start_s`, each next one when the previous one has arrived;
- `[[change]]`: at `at_s`, the capacity of `link` becomes `bytes_s`, where `link` is
  `node_up:N`, `node_down:N`, `access_up:C`, `access_down:C` or `wan:FROM:TO`.

SimGrid is configured as a pure (weighted) max-min model: network/model:CM02 (latency and
bandwidth factors 1, weight-S 0, so a flow's sharing penalty is its route latency),
network/TCP-gamma:0 (no window bound), network/crosstraffic:0 (no reverse-path traffic),
network/optim:Full (every action updated at every step).

The platform mirrors windrose's model exactly: one star zone per cluster, each host attached by
a SPLITDUPLEX link (UP = the node's uplink, DOWN = its downlink) carrying half the cluster's
intra-cluster latency; a gateway router per cluster reached through the cluster's SPLITDUPLEX
access link (UP towards the WAN, DOWN from it, latency 0); a full root zone whose route between
two clusters is the one SHARED WAN link from the first cluster's gateway to the second's. So a
message from x to y crosses x.up [-> access_up -> wan -> access_down] -> y.down and its latency
is the sum over those links, as in windrose.

Each message is one SimGrid communication (Comm.sendto, host to host); a flow is one actor that
sends its messages in sequence, which reproduces FIFO order on the connection.

Output: {"scenario": ..., "completions": [[flow, message, time_s], ...], "simulated_s": ...,
"build_wall_s": ..., "run_wall_s": ...}.
"""

import json
import sys
import time
import tomllib

import simgrid
from simgrid import Actor, Comm, Engine, LinkInRoute, NetZone, this_actor

CONFIG = [
    "--cfg=network/model:CM02",
    "--cfg=network/TCP-gamma:0",
    "--cfg=network/crosstraffic:0",
    "--cfg=network/optim:Full",
    "--log=root.thres:critical",
]


def build_platform(plat):
    """Creates the SimGrid platform; returns (hosts, links) where links maps windrose link
    names (node_up:N, ...) to SimGrid links."""
    clusters = plat["cluster"]
    nc = len(clusters)
    root = NetZone.create_full_zone("world")
    hosts, links, zones, gateways = [], {}, [], []
    overrides = {n["id"]: n for n in plat.get("node", [])}
    for c, spec in enumerate(clusters):
        zone = NetZone.create_star_zone(f"cluster{c}")
        zone.set_parent(root)
        gw = zone.create_router(f"gw{c}")
        acc = zone.create_split_duplex_link(f"access{c}", spec["access_up_bytes_s"])
        acc.link_down.set_bandwidth(spec["access_down_bytes_s"])
        acc.set_latency(0.0)
        acc.seal()
        links[f"access_up:{c}"] = acc.link_up
        links[f"access_down:{c}"] = acc.link_down
        # host -> gateway goes down to the gateway through access UP; gateway -> host comes
        # up from the gateway through access DOWN.
        zone.add_route(None, gw, None, None, [LinkInRoute(acc, LinkInRoute.Direction.UP)], False)
        zone.add_route(gw, None, None, None, [LinkInRoute(acc, LinkInRoute.Direction.DOWN)], False)
        half = spec["intra_latency_s"] / 2.0
        for _ in range(spec["nodes"]):
            n = len(hosts)
            o = overrides.get(n, {})
            host = zone.create_host(f"node{n}", 1.0).seal()
            link = zone.create_split_duplex_link(f"node{n}", o.get("uplink_bytes_s", spec["node_uplink_bytes_s"]))
            link.link_down.set_bandwidth(o.get("downlink_bytes_s", spec["node_downlink_bytes_s"]))
            link.set_latency(half)
            link.seal()
            links[f"node_up:{n}"] = link.link_up
            links[f"node_down:{n}"] = link.link_down
            zone.add_route(host.netpoint, None, None, None, [LinkInRoute(link, LinkInRoute.Direction.UP)], False)
            zone.add_route(None, host.netpoint, None, None, [LinkInRoute(link, LinkInRoute.Direction.DOWN)], False)
            hosts.append(host)
        zone.seal()
        zones.append(zone)
        gateways.append(gw)
    if nc > 1:
        wan = plat["wan"]
        for a in range(nc):
            for b in range(nc):
                if a == b:
                    continue
                link = root.create_link(f"wan{a}_{b}", float(wan["bytes_s"][a][b]))
                link.set_latency(float(wan["latency_s"][a][b]))
                link.seal()
                links[f"wan:{a}:{b}"] = link
                root.add_route(zones[a].netpoint, zones[b].netpoint, gateways[a], gateways[b],
                               [LinkInRoute(link)], False)
    root.seal()
    return hosts, links


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        scenario = tomllib.load(f)

    t0 = time.perf_counter()
    engine = Engine([sys.argv[0]] + CONFIG)
    hosts, links = build_platform(scenario["platform"])
    completions = []

    def flow(index, src, dst, start_s, sizes):
        if start_s > 0:
            this_actor.sleep_until(start_s)
        for k, size in enumerate(sizes):
            Comm.sendto(src, dst, int(size))
            completions.append([index, k, Engine.clock])

    def changer(at_s, link, bytes_s):
        this_actor.sleep_until(at_s)
        link.set_bandwidth(bytes_s)

    for i, fl in enumerate(scenario.get("flow", [])):
        src, dst = hosts[fl["src"]], hosts[fl["dst"]]
        Actor.create(f"flow{i}", src, flow, i, src, dst, float(fl.get("start_s", 0.0)), fl["bytes"])
    for k, ch in enumerate(scenario.get("change", [])):
        if ch["link"] not in links:
            sys.exit(f"change {k}: unknown link {ch['link']!r}")
        Actor.create(f"change{k}", hosts[0], changer, float(ch["at_s"]), links[ch["link"]], float(ch["bytes_s"]))
    t1 = time.perf_counter()
    engine.run()
    t2 = time.perf_counter()

    completions.sort(key=lambda c: (c[0], c[1]))
    json.dump({
        "scenario": scenario.get("name", sys.argv[1]),
        "simgrid": simgrid.simgrid_version if hasattr(simgrid, "simgrid_version") else None,
        "completions": completions,
        "simulated_s": Engine.clock,
        "build_wall_s": t1 - t0,
        "run_wall_s": t2 - t1,
    }, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
