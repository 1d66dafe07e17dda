#!/usr/bin/env python3
"""Runs an autoballoon-sim fleet on Ray: one Ray task per shard, each calling
`autoballoon-sim ... --hosts N --shard i/n --json` in a subprocess; the shards' results are
merged by `autoballoon-sim --merge` (the merge is the binary's, not this script's), and the
fleet's summary goes to stdout, exactly as `autoballoon-sim ... --hosts N --json` prints it.
Progress lines go to stderr as shards finish (each with the Ray node it ran on), then how many
distinct nodes ran shards.

    python fleet.py --scenario paper-spike --policy swapfree --hosts 64 --shards 8
    python fleet.py --address auto ...            # an existing cluster, from one of its nodes
    python fleet.py --address HOST:PORT --ship --scenario my.toml ...   # files through Ray

The binary, and the scenario when it is a file, travel through Ray's object store: a task
runs the driver's path when the file there on its node has the same content (SHA-256), else
the object store's copy, written once to the node's temp directory under its hash; with
--ship every task takes the object store's copies, as on a machine without this checkout.
A built-in scenario's name goes as it is. The tasks are scheduled SPREAD round the nodes,
or with --round-robin each pinned to a node in turn (see round_robin()).
Without --address, or with one on 127.0.0.1 or localhost, Ray is kept on loopback (see
loopback()). Run it with the venv setup.sh makes (docs/simulator.md, On Ray).
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# ray is imported in main(), after the environment it reads at import is set (loopback()).

REPO = Path(__file__).resolve().parents[3]


def find_binary(given):
    """--binary, else the release build in $CARGO_TARGET_DIR or the repository's target/."""
    if given:
        return str(Path(given).resolve())
    candidates = []
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "autoballoon-sim")
    candidates.append(REPO / "target" / "release" / "autoballoon-sim")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    sys.exit(
        "fleet.py: no autoballoon-sim: give --binary or build it "
        "(cargo build --release -p autoballoon-sim); looked in "
        + ", ".join(map(str, candidates))
    )


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Shipped:
    """A driver's file for the tasks: its path on the driver, its SHA-256 and its content in
    Ray's object store (the reference inside a list, so that Ray leaves it to the task to
    fetch, only when it needs it)."""

    def __init__(self, path, prefix, suffix=""):
        import ray

        with open(path, "rb") as f:
            data = f.read()
        self.path = path
        self.digest = sha256(data)
        self.name = f"{prefix}-{self.digest[:16]}{suffix}"
        self.ref = [ray.put(data)]

    def local(self, ship, executable=False):
        """This file's path on this node: the driver's path if the file there is the same
        (unless `ship`), else the object store's copy in the node's temp directory."""
        import ray

        if not ship:
            try:
                with open(self.path, "rb") as f:
                    if sha256(f.read()) == self.digest:
                        return self.path
            except OSError:
                pass
        data = ray.get(self.ref[0])
        if sha256(data) != self.digest:
            raise RuntimeError(f"{self.path}: the object store's copy has another SHA-256")
        path = os.path.join(tempfile.gettempdir(), self.name)
        if not os.path.isfile(path):  # an earlier task on this node may have written it
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o755 if executable else 0o644)
            os.replace(tmp, path)
        return path


def run_shard(binary, scenario, args, shard, ship):
    """A Ray task: one shard on whichever node Ray chose; returns (shard, its JSON, seconds,
    node id). `binary` is Shipped; `scenario` is Shipped (a file) or a built-in scenario."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    path = binary.local(ship, executable=True)
    if not isinstance(scenario, str):  # a file
        scenario = scenario.local(ship)
    started = time.monotonic()
    p = subprocess.run(
        [path, "--scenario", scenario, *args, "--shard", shard, "--json", "-q"],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise RuntimeError(f"shard {shard}: autoballoon-sim exited {p.returncode}: {p.stderr.strip()}")
    return shard, p.stdout, time.monotonic() - started, node


def plural(n, what):
    return f"{n} {what}{'' if n == 1 else 's'}"


def loopback(address):
    """Keeps Ray on loopback when the cluster is on this machine's loopback: no --address (a
    new local cluster) or one on 127.0.0.1, localhost or ::1. Ray 2.60 takes such an address
    (and ray.init's _node_ip_address) for "this machine" and swaps in the machine's outward IP
    (ray-project/ray#59110), so a local cluster would listen on every interface and one bound
    to loopback could not be reached; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray's own idea
    of this node's IP 127.0.0.1 (it also stops `ray start` from joining clusters, which this
    script does not use). Before ray is imported: it reads the variable then."""
    host = (address or "").rsplit(":", 1)[0].strip("[]")
    if address is None or host in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def round_robin(ray, shards, cpus_per_shard):
    """--round-robin: shard i's place, the i-th of the alive nodes' shard slots taken in turns
    (a node with C CPUs has C / --cpus-per-shard slots: node A, B, C, A, B, …), as a soft node
    affinity: there and nowhere else unless the node dies. Ray's SPREAD, the default, is only a
    preference: a worker that finishes its shard takes the next one waiting, so shards shorter
    than a worker's start (make sim-ray-test's) can all run on the driver's node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    counts = {n["NodeID"]: int(n["Resources"].get("CPU", 0)) // cpus_per_shard
              for n in ray.nodes() if n.get("Alive")}
    slots = [node for turn in range(max(counts.values(), default=0))
             for node, c in sorted(counts.items()) if turn < c]
    if not slots:
        sys.exit(f"fleet.py: --round-robin: no node has {cpus_per_shard} CPUs")
    return [NodeAffinitySchedulingStrategy(slots[i % len(slots)], soft=True) for i in range(shards)]


def builtin_scenarios(binary):
    """The built-in scenarios' names (`autoballoon-sim --list`): the binary takes a name
    before a file of that name, and so does this script."""
    p = subprocess.run([binary, "--list"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"fleet.py: {binary} --list: {p.stderr.strip()}")
    return {line.split()[0] for line in p.stdout.splitlines()
            if line.strip() and not line.startswith("policies:")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True, help="a built-in scenario's name or a scenario file")
    ap.add_argument("--policy", default="swapfree")
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--vms-per-host", type=int, help="autoballoon-sim's --vms-per-host")
    ap.add_argument("--seed", type=int, default=0, help="the first host's seed")
    ap.add_argument("--no-baseline", action="store_true", help="no static run per host")
    ap.add_argument("--shards", type=int, default=4, help="Ray tasks, one shard each")
    ap.add_argument("--cpus-per-shard", type=int, default=1, help="each task's CPUs (its --jobs)")
    ap.add_argument("--binary", help="autoballoon-sim [default: target/release/autoballoon-sim]")
    ap.add_argument("--address", help="an existing Ray cluster (auto, or the head's HOST:PORT); "
                    "default: a new local one")
    ap.add_argument("--ship", action="store_true",
                    help="every task takes the binary (and a scenario file) from Ray's object "
                    "store, even where the driver's paths exist (as on another machine)")
    ap.add_argument("--round-robin", action="store_true",
                    help="shard i to the alive nodes' CPU slots in turn (a soft node affinity) "
                    "rather than Ray's SPREAD, so that every node runs shards")
    ap.add_argument("--keep", metavar="DIR", help="also keep the shards' JSON in DIR")
    a = ap.parse_args()
    if a.hosts < 1 or a.shards < 1 or a.cpus_per_shard < 1:
        sys.exit("fleet.py: --hosts, --shards and --cpus-per-shard must be at least 1")

    binary = find_binary(a.binary)
    scenario_file = None
    if a.scenario not in builtin_scenarios(binary):
        if not Path(a.scenario).is_file():
            sys.exit(f"fleet.py: --scenario {a.scenario}: neither a built-in scenario "
                     f"({binary} --list) nor a file")
        scenario_file = str(Path(a.scenario).resolve())
    args = ["--policy", a.policy, "--hosts", str(a.hosts),
            "--seed", str(a.seed), "--jobs", str(a.cpus_per_shard)]
    if a.vms_per_host is not None:
        args += ["--vms-per-host", str(a.vms_per_host)]
    if a.no_baseline:
        args.append("--no-baseline")

    loopback(a.address)
    import ray

    started = time.monotonic()
    if a.address:
        ray.init(address=a.address, logging_level="WARNING")
    else:
        # A new cluster on this machine (never one a `ray start` left behind), on loopback.
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 logging_level="WARNING")
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    print(f"fleet.py: Ray up in {time.monotonic() - started:.1f} s ({plural(nodes, 'node')}, "
          f"{plural(round(ray.cluster_resources().get('CPU', 0)), 'CPU')})", file=sys.stderr)
    shipped_binary = Shipped(binary, "autoballoon-sim")
    scenario = Shipped(scenario_file, "autoballoon-scenario", ".toml") if scenario_file else a.scenario
    task = ray.remote(run_shard)
    places = (round_robin(ray, a.shards, a.cpus_per_shard) if a.round_robin
              else ["SPREAD"] * a.shards)
    pending = [task.options(num_cpus=a.cpus_per_shard, scheduling_strategy=places[i])
               .remote(shipped_binary, scenario, args, f"{i}/{a.shards}", a.ship)
               for i in range(a.shards)]
    results = {}
    ran_on = set()
    failed = False
    tty = sys.stderr.isatty()
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        try:
            shard, text, secs, node = ray.get(done[0])
        except ray.exceptions.RayTaskError as e:
            print(f"fleet.py: a shard failed: {getattr(e, 'cause', e)}", file=sys.stderr)
            failed = True
            break
        results[shard] = text
        ran_on.add(node)
        line = (f"fleet.py: {len(results)} / {a.shards} shards done (shard {shard} on node "
                f"{node[:8]} in {secs:.1f} s), {time.monotonic() - started:.1f} s")
        print(("\r" + line) if tty else line, end="" if tty and pending else "\n", file=sys.stderr)
    if tty:
        print(file=sys.stderr)
    for p in pending:
        ray.cancel(p, force=True)
    ray.shutdown()
    if failed:
        sys.exit(1)
    print(f"fleet.py: shards ran on {plural(len(ran_on), 'distinct Ray node')} (of {nodes})",
          file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="autoballoon-fleet-") as d:
        files = []
        for i in range(a.shards):
            p = Path(d) / f"shard-{i:05}-of-{a.shards}.json"
            p.write_text(results[f"{i}/{a.shards}"])
            files.append(str(p))
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            for f in files:
                shutil.copy(f, a.keep)
        m = subprocess.run([binary, "--merge", *files], capture_output=True, text=True)
    if m.returncode != 0:
        sys.exit(f"fleet.py: autoballoon-sim --merge: {m.stderr.strip()}")
    sys.stdout.write(m.stdout)
    print(f"fleet.py: {a.hosts} hosts in {a.shards} shards, {time.monotonic() - started:.1f} s "
          "of wall time", file=sys.stderr)


if __name__ == "__main__":
    main()
