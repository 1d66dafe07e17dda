#!/usr/bin/env python3
"""Runs an autoballoon-sim fleet on Ray: one Ray task per shard, each calling
`autoballoon-sim ... --hosts N --shard i/n --json` in a subprocess; the shards' results are
merged by `autoballoon-sim --merge` (the merge is the binary's, not this script's), and the
fleet's summary goes to stdout, exactly as `autoballoon-sim ... --hosts N --json` prints it.
A progress line goes to stderr as shards finish.

    python fleet.py --scenario paper-spike --policy swapfree --hosts 64 --shards 8
    python fleet.py --address auto ...    # an existing cluster instead of a local one

Run it with the venv setup.sh makes (docs/simulator.md, Fleet on Ray).
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

import ray  # noqa: E402  (after the environment it reads)

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


@ray.remote
def run_shard(binary, binary_ref, args, shard):
    """One shard on whichever node Ray chose; returns (shard, its JSON, seconds)."""
    path = binary
    if not os.access(path, os.X_OK):
        # Another node: the driver's binary, from the object store, cached by its hash.
        data = ray.get(binary_ref)
        digest = hashlib.sha256(data).hexdigest()[:16]
        path = os.path.join(tempfile.gettempdir(), f"autoballoon-sim-{digest}")
        if not os.access(path, os.X_OK):
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)
    started = time.monotonic()
    p = subprocess.run(
        [path, *args, "--shard", shard, "--json", "-q"],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise RuntimeError(f"shard {shard}: autoballoon-sim exited {p.returncode}: {p.stderr.strip()}")
    return shard, p.stdout, time.monotonic() - started


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True, help="a built-in scenario's name or a scenario file")
    ap.add_argument("--policy", default="swapfree")
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--vms-per-host", type=int, help="autoballoon-sim's --vms-per-host")
    ap.add_argument("--seed", type=int, default=0, help="the first host's seed")
    ap.add_argument("--no-baseline", action="store_true", help="no static run per host")
    ap.add_argument("--shards", type=int, default=4, help="Ray tasks, one shard each")
    ap.add_argument("--cpus-per-shard", type=int, default=1, help="each task's CPUs (its --jobs)")
    ap.add_argument("--binary", help="autoballoon-sim [default: target/release/autoballoon-sim]")
    ap.add_argument("--address", help="an existing Ray cluster (e.g. auto); default: a local one")
    ap.add_argument("--keep", metavar="DIR", help="also keep the shards' JSON in DIR")
    a = ap.parse_args()
    if a.hosts < 1 or a.shards < 1 or a.cpus_per_shard < 1:
        sys.exit("fleet.py: --hosts, --shards and --cpus-per-shard must be at least 1")

    binary = find_binary(a.binary)
    scenario = a.scenario
    if Path(scenario).is_file():  # a file: the same absolute path on every node
        scenario = str(Path(scenario).resolve())
    args = ["--scenario", scenario, "--policy", a.policy, "--hosts", str(a.hosts),
            "--seed", str(a.seed), "--jobs", str(a.cpus_per_shard)]
    if a.vms_per_host is not None:
        args += ["--vms-per-host", str(a.vms_per_host)]
    if a.no_baseline:
        args.append("--no-baseline")

    started = time.monotonic()
    if a.address:
        ray.init(address=a.address, logging_level="WARNING")
    else:
        # A new cluster on this machine (never one a `ray start` left behind), on loopback.
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 logging_level="WARNING")
    print(f"fleet.py: Ray up in {time.monotonic() - started:.1f} s "
          f"({ray.cluster_resources().get('CPU', 0):.0f} CPUs)", file=sys.stderr)
    with open(binary, "rb") as f:
        binary_ref = ray.put(f.read())
    task = run_shard.options(num_cpus=a.cpus_per_shard)
    pending = [task.remote(binary, binary_ref, args, f"{i}/{a.shards}") for i in range(a.shards)]
    results = {}
    failed = False
    tty = sys.stderr.isatty()
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        try:
            shard, text, secs = ray.get(done[0])
        except ray.exceptions.RayTaskError as e:
            print(f"fleet.py: a shard failed: {getattr(e, 'cause', e)}", file=sys.stderr)
            failed = True
            break
        results[shard] = text
        line = (f"fleet.py: {len(results)} / {a.shards} shards done (shard {shard} in {secs:.1f} s), "
                f"{time.monotonic() - started:.1f} s")
        print(("\r" + line) if tty else line, end="" if tty and pending else "\n", file=sys.stderr)
    if tty:
        print(file=sys.stderr)
    for p in pending:
        ray.cancel(p, force=True)
    ray.shutdown()
    if failed:
        sys.exit(1)

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
