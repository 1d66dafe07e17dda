#!/usr/bin/env python3
"""A measuring device, not part of the product: does a QMP `balloon` command during a
migration's first round of free page hints end the round?

Boots one guest of the project's image (no agent) with free page reporting and hinting on,
writes and frees 1.5 GiB in it (`fill 1536`) before every migration, and migrates it to
`exec:cat > /dev/null` at 128 MiB/s, in turn: without any command, and with QMP `balloon`
at the guest's full size (no change of size: QEMU notifies the guest of a configuration
change all the same) sent once DELAY seconds after `migrate` for each DELAY given, or every
10 ms for the first SPAM seconds. Prints one line per migration: MiB sent, zero pages
(pages QEMU read and found zero: free pages that hinting left in), total time.

    scripts/hint-round/hint-round.py QEMU [--image DIR] [--rounds N] [--delays 0,0.05,...] [--spam S]

QEMU is a binary or wrapper (scripts/install-qemu10.sh, scripts/build-qemu72-fixed.sh);
DIR defaults to run/image.path's. docs/migration.md, *A balloon command ends a round of
hints*, has what it measured.
"""
import argparse
import time

from guest import Guest, default_image


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("qemu")
    ap.add_argument("--image", default=None, help="the guest image's directory (default: run/image.path's)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--delays", default="0,0.05,0.1,0.2,0.4", help="seconds after `migrate` of the single command, comma-separated")
    ap.add_argument("--spam", type=float, default=0.0, help="also migrations with a command every 10 ms for this many seconds")
    a = ap.parse_args()
    image = a.image or default_image()
    delays = [float(d) for d in a.delays.split(",") if d]
    modes = [("no command", None, 0.0)] + [(f"one balloon {d:.2f} s after migrate", d, 0.0) for d in delays]
    if a.spam > 0:
        modes.append((f"a balloon every 10 ms for {a.spam} s", None, a.spam))
    print(f"[hint-round] booting {a.qemu} with {image}", flush=True)
    g = Guest(a.qemu, image)
    try:
        for r in range(a.rounds):
            for label, delay, spam in modes:
                g.shell("fill 1536")
                time.sleep(5)
                print(f"[hint-round] round {r + 1}/{a.rounds}, {label}: {g.migrate(delay, spam)}", flush=True)
    finally:
        g.close()


if __name__ == "__main__":
    main()
