#!/usr/bin/env python3
"""A multi-node Ray cluster on this one machine, for make sim-ray-test: a head node and
--workers worker nodes, each its own raylet and object store with --cpus CPUs, all on 127.0.0.1
and listening on loopback only, no dashboard; started with ray.cluster_utils.Cluster (Ray's
way to simulate a multi-node cluster on one machine). When every node has joined it writes the
cluster's address (the head's GCS, 127.0.0.1:PORT) to --address-file and stays up until
SIGTERM, SIGINT or SIGHUP, or until its parent process is gone, then stops every node and exits
0. Killed outright, it leaves the nodes to the reaper each one started (Cluster's
shutdown_at_exit), which stops them.

    python local_cluster.py --workers 2 --address-file /tmp/x/address &
    until [ -s /tmp/x/address ]; do sleep 0.5; done
    python fleet.py --address "$(cat /tmp/x/address)" --ship --round-robin ...
    kill %1

Ray's files (sessions, sockets, logs, ray_current_cluster) go under $RAY_TMPDIR, else $TMPDIR,
else /tmp: make sim-ray-test points TMPDIR at a directory of its own and removes it.
"""

import argparse
import os
import signal
import sys
import threading
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# This machine's IP for Ray is 127.0.0.1, not its outward one (fleet.py's loopback()).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from ray.cluster_utils import Cluster  # noqa: E402  (after the environment it reads)

# Ray binds its servers to loopback only when the node's IP is exactly 127.0.0.1 (another
# loopback address, 127.0.0.2, has them listen on every interface).
LOOPBACK = "127.0.0.1"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="worker nodes besides the head")
    ap.add_argument("--cpus", type=int, default=1, help="each node's CPUs (the head's too)")
    ap.add_argument("--address-file", required=True, help="where the cluster's address goes")
    a = ap.parse_args()
    if a.workers < 0 or a.cpus < 0:
        sys.exit("local_cluster.py: --workers and --cpus must not be negative")

    stop = threading.Event()
    parent = os.getppid()  # gone (killed outright, say): the cluster stops too

    def on_signal(*_):
        stop.set()

    def catch_signals():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)

    started = time.monotonic()
    node = {"num_cpus": a.cpus, "node_ip_address": LOOPBACK}
    # Each node (Ray's Node) installs a SIGTERM handler of its own that stops that node alone
    # and exits (the finally below stops the rest): ours is put back after each node starts.
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node, "include_dashboard": False, "dashboard_host": LOOPBACK},
    )
    catch_signals()
    try:
        for _ in range(a.workers):
            if stop.is_set():
                break
            cluster.add_node(**node)
            catch_signals()
        if not stop.is_set():
            cluster.wait_for_nodes()
            tmp = f"{a.address_file}.{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(cluster.address + "\n")
            os.replace(tmp, a.address_file)
            print(f"local_cluster.py: {1 + a.workers} node{'s' if a.workers else ''} "
                  f"({a.cpus} CPU{'' if a.cpus == 1 else 's'} each) at "
                  f"{cluster.address} in {time.monotonic() - started:.1f} s", file=sys.stderr)
        while not stop.wait(0.5) and os.getppid() == parent:
            pass
    finally:
        stopping = time.monotonic()
        cluster.shutdown()
        print(f"local_cluster.py: stopped in {time.monotonic() - stopping:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
