#!/usr/bin/env python3
"""How long the host takes to back fresh memory, right after it was freed and after idling.

On a bare-metal host every free page is backed and the times stay flat. On a host that is
itself a VM whose hypervisor takes free memory back (free page reporting, a balloon), pages
left free for a second or more cost an exit to that hypervisor when touched again, and the
times after idling grow (this project's test machines: 0.12 s right after, 0.44-1.41 s
after 0.5-5 s idle, for 1,200 MiB). docs/migration.md, "The spike during a migration: the
host's own hypervisor".

Usage: scripts/host-refault/after-free.py [MiB]   (default 1200). run.sh beside it measures
the refault after a discard inside one mapping, whole or by 4 KiB pages.
"""
import mmap
import os
import sys
import time


def touch(size):
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE)
    t, cpu = time.perf_counter(), os.times()
    for off in range(0, size, 4096):
        m[off] = 1
    elapsed, system = time.perf_counter() - t, os.times().system - cpu.system
    m.close()
    return elapsed, system


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1200
    for idle in [0, 0, 0, 0.5, 1, 2, 3, 5, 5, 0]:
        time.sleep(idle)
        elapsed, system = touch(mib << 20)
        print(f"after {idle:.1f} s idle: touching {mib} MiB took {elapsed:.2f} s ({system:.2f} s system)", flush=True)


if __name__ == "__main__":
    main()
