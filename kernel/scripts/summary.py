#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Merge the records of crates/testbed/tests/kernel.rs (one JSON object per line,
each with "variant" and "scenario") into one summary line per variant, and
check the outcome the series exists for: the patched kernel has no OOM kill
and completes the spike; the stock kernel without deflate-on-oom has OOM kills.

    summary.py RESULTS.jsonl [--filtered]   exit 1 if the outcome does not hold

--filtered: only some scenarios ran (kernel-test.sh with a filter), so a variant
without results is reported, not a failure.
"""
import json
import sys

VARIANTS = ("patched", "stock", "stock-deflate-on-oom")


def main(path, filtered=False):
    merged = {v: {"variant": v} for v in VARIANTS}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            rec.pop("scenario", None)
            merged.setdefault(rec["variant"], {"variant": rec["variant"]}).update(rec)
    bad = []
    for v, rec in merged.items():
        print(json.dumps(rec))
        if len(rec) == 1 and not filtered:
            bad.append(v + ": no results")
        elif len(rec) == 1:
            print("%s: not run (filtered)" % v, file=sys.stderr)
    p, s = merged["patched"], merged["stock"]
    kills = [p.get(k) for k in ("oom_kills", "floor_oom_kills", "cycle_oom_kills") if k in p]
    if any(k != 0 for k in kills):
        bad.append("patched: OOM kills %s" % kills)
    if p.get("spike_completed") is False:
        bad.append("patched: spike did not complete")
    if "oom_kills" in s and not (s["oom_kills"] > 0 or s.get("spike_completed") is False):
        bad.append("stock: no OOM kill without deflate-on-oom (the baseline changed?)")
    for b in bad:
        print("FAIL " + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "--filtered" in sys.argv[2:]))
