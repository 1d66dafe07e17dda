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
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class Guest:
    def __init__(self, qemu, image, memory_mib=2048):
        self.dir = tempfile.mkdtemp(prefix="hint-round-")
        ser, qmp = f"{self.dir}/ser", f"{self.dir}/qmp"
        cmd = [qemu, "-accel", "tcg,thread=single", "-machine", "pc", "-cpu", "qemu64", "-nodefaults", "-display", "none",
               "-no-reboot", "-m", str(memory_mib), "-smp", "1", "-kernel", f"{image}/vmlinuz", "-initrd", f"{image}/initrd.img",
               "-append", "console=ttyS0 quiet panic=-1 init_on_alloc=0 no_timer_check autoballoon.agent=none",
               "-chardev", f"socket,id=ser0,path={ser},server=on,wait=off", "-serial", "chardev:ser0",
               "-qmp", f"unix:{qmp},server=on,wait=off", "-object", "iothread,id=iothread0",
               "-device", "virtio-balloon-pci,id=balloon0,free-page-reporting=on,free-page-hint=on,iothread=iothread0"]
        self.memory = memory_mib << 20
        self.proc = subprocess.Popen(cmd, stdout=open(f"{self.dir}/qemu.log", "w"), stderr=subprocess.STDOUT)
        self.ser = self._connect(ser)
        self.buf = b""
        self.n = 0
        self._until(b"AUTOBALLOON-GUEST BOOTED", 400)
        self.qmp = self._connect(qmp).makefile("rw")
        json.loads(self.qmp.readline())
        self.cmd("qmp_capabilities")
        self.cmd("migrate-set-parameters", **{"max-bandwidth": 128 << 20})

    @staticmethod
    def _connect(path):
        s = socket.socket(socket.AF_UNIX)
        deadline = time.time() + 30
        while True:
            try:
                s.connect(path)
                return s
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

    def _until(self, token, timeout):
        deadline = time.time() + timeout
        while token not in self.buf:
            self.ser.settimeout(max(0.1, deadline - time.time()))
            try:
                chunk = self.ser.recv(65536)
            except socket.timeout:
                sys.exit(f"hint-round: no {token!r} on the console within {timeout} s")
            self.buf += chunk.replace(b"\r", b"")
        self.buf = self.buf[self.buf.index(token) + len(token):]

    def shell(self, line, timeout=300):
        self.n += 1
        mark = f"DONE{self.n}X"
        self.ser.sendall(f"{line}; echo DONE\"\"{self.n}X\n".encode())
        self._until(mark.encode() + b"\n", timeout)

    def cmd(self, name, **args):
        self.qmp.write(json.dumps({"execute": name, "arguments": args}) + "\n")
        self.qmp.flush()
        while True:
            r = json.loads(self.qmp.readline())
            if "return" in r or "error" in r:
                return r

    def migrate(self, delay=None, spam=0.0):
        self.cmd("migrate", uri="exec:cat > /dev/null")
        start = time.time()
        if delay is not None:
            time.sleep(delay)
            self.cmd("balloon", value=self.memory)
        while time.time() - start < spam:
            self.cmd("balloon", value=self.memory)
            time.sleep(0.01)
        deadline = time.time() + 300
        while True:
            r = self.cmd("query-migrate")["return"]
            if r.get("status") in ("completed", "failed"):
                break
            if time.time() > deadline:
                sys.exit("hint-round: the migration did not end within 300 s")
            time.sleep(0.05)
        self.cmd("cont")
        ram = r["ram"]
        return f"{r['status']}, {ram['transferred'] / 2**20:.1f} MiB sent, {ram.get('duplicate', 0)} zero pages, {r.get('total-time')} ms"

    def close(self):
        self.proc.kill()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("qemu")
    ap.add_argument("--image", default=None, help="the guest image's directory (default: run/image.path's)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--delays", default="0,0.05,0.1,0.2,0.4", help="seconds after `migrate` of the single command, comma-separated")
    ap.add_argument("--spam", type=float, default=0.0, help="also migrations with a command every 10 ms for this many seconds")
    a = ap.parse_args()
    image = a.image or open(os.path.join(REPO, "run/image.path")).read().strip()
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
