#!/usr/bin/env python3
"""A measuring device, not part of the product: when a migration ends while the guest is still
handing over free page hints, does the destination ever take the hints the guest had queued,
and does the guest's hinting work on its next migration?

Boots one guest of the project's image (no agent, FPR and hinting on) and, for each trial and
each STOP delay: writes and frees 1.5 GiB (`fill 1536`); migrates it once to
`exec:cat > /dev/null` (the control: are its hints taken?); writes and frees again; migrates it
to a new destination QEMU and stops the source (QMP `stop`) STOP seconds after `migrate`, so
that the guest is cut off in the middle of its round; starts the destination and reads its free
page queue (`x-query-virtio-queue-status` and `-element`, queue 3): buffers the guest made
available that the device has not taken, right after the load and again 5 s later. The
destination is the next trial's guest. Prints one line per migration; a guest whose console
says `err = -28` could not even send a round's start id.

    scripts/hint-round/queue-after-load.py QEMU [--image DIR] [--trials N] [--stop-after 0.05,0.2] [--ping]

--stop-after=-1 stops the source as soon as the guest's avail index on the hint queue has
moved by 2 (a start id and a block) instead. --ping times the guest's shell during each
control migration: a driver that spins on a full queue keeps a 1-vCPU guest from answering.

docs/migration.md, *A free page queue nobody reads after a migration*, has what it measured.
"""
import argparse
import time

from guest import Guest, default_image, sent

BALLOON = "/machine/peripheral/balloon0/virtio-backend"
# inflate, deflate, stats, then the free page hint queue (the reporting queue is 4)
HINT_QUEUE = 3


def hint_queue(g):
    """(buffers available and not taken, the guest's avail index, the device's last_avail_idx)"""
    st = g.cmd("x-query-virtio-queue-status", path=BALLOON, queue=HINT_QUEUE)["return"]
    el = g.cmd("x-query-virtio-queue-element", path=BALLOON, queue=HINT_QUEUE)["return"]
    avail, last = el["avail"]["idx"], st["last-avail-idx"]
    return (avail - last) & 0xFFFF, avail, last


def console_marks(g):
    """How often the guest's console said the driver could not start a round, and that a
    CPU was stuck (soft lockup)."""
    text = g.drain_console()
    return f"err = -28 {text.count('err = -28')} time(s), soft lockup {text.count('soft lockup')} time(s)"


def wait_loaded(g, timeout=300):
    deadline = time.time() + timeout
    while True:
        status = g.cmd("query-status")["return"]["status"]
        if status != "inmigrate":
            return status
        if time.time() > deadline:
            raise SystemExit(f"queue-after-load: the destination still loads after {timeout} s")
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("qemu")
    ap.add_argument("--image", default=None, help="the guest image's directory (default: run/image.path's)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--stop-after", default="0.05,0.2", help="seconds after `migrate` of QMP `stop`, comma-separated; -1: as soon as the guest's avail index on the hint queue has moved by 2")
    ap.add_argument("--ping", action="store_true", help="during each control migration, time the guest's shell (a guest driver that spins on a full queue does not answer)")
    a = ap.parse_args()
    image = a.image or default_image()
    stops = [float(d) for d in a.stop_after.split(",") if d]
    print(f"[queue-after-load] booting {a.qemu} with {image}", flush=True)
    g = Guest(a.qemu, image)
    n = 0
    try:
        for t in range(a.trials):
            for stop in stops:
                n += 1
                g.shell("fill 1536")
                time.sleep(2)
                control = g.migrate(ping=a.ping)
                print(f"[queue-after-load] guest {n}, control: {control}", flush=True)
                g.shell("fill 1536")
                time.sleep(2)
                dst = Guest(a.qemu, image, incoming=True)
                uri = f"unix:{dst.dir}/migration"
                dst.cmd("migrate-incoming", uri=uri)
                before = hint_queue(g)[1]
                g.cmd("migrate", uri=uri)
                if stop < 0:
                    # As soon as the guest has handed over its start id and a first block.
                    deadline = time.time() + 30
                    while (hint_queue(g)[1] - before) & 0xFFFF < 2 and time.time() < deadline:
                        pass
                else:
                    time.sleep(stop)
                g.cmd("stop")
                r = g.wait_migration()
                status = wait_loaded(dst)
                loaded = hint_queue(dst)
                if status != "running":
                    dst.cmd("cont")
                time.sleep(5)
                later = hint_queue(dst)
                print(f"[queue-after-load] guest {n}, stop {'once hinting' if stop < 0 else f'{stop:.2f} s after migrate'}: {sent(r)}; destination "
                      f"{status}, hint queue not taken {loaded[0]} (avail {loaded[1]}, last_avail {loaded[2]}), "
                      f"5 s after cont {later[0]} (avail {later[1]}, last_avail {later[2]}); source console: "
                      f"{console_marks(g)}", flush=True)
                g.close()
                g = dst
        control = g.migrate(ping=a.ping)
        print(f"[queue-after-load] guest {n + 1}, control: {control}; console: {console_marks(g)}", flush=True)
    finally:
        g.close()


if __name__ == "__main__":
    main()
