#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Boot a kernel under QEMU (TCG) with a virtio balloon and run one scenario.

Scenario "spike": the guest boots and prints "AB: READY"; the runner
balloons it down over QMP (`balloon` with the guest's logical size),
waits until QEMU reports the balloon there (query-balloon), then tells
the guest to run `touchmem THREADS MIB`.  The result line is JSON on
stdout; the full console + QMP log goes to --log.

Scenario "boot": boot, print, power off.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


class QMP:
    def __init__(self, path, log):
        self.log = log
        for _ in range(200):
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("cannot connect to QMP socket")
        self.f = self.sock.makefile("rw")
        self._read()  # greeting
        self.cmd("qmp_capabilities")

    def _read(self):
        while True:
            line = self.f.readline()
            if not line:
                raise RuntimeError("QMP closed")
            msg = json.loads(line)
            self.log("#QMP " + line.strip())
            if "event" not in msg:
                return msg

    def cmd(self, name, **args):
        req = {"execute": name}
        if args:
            req["arguments"] = args
        self.f.write(json.dumps(req) + "\n")
        self.f.flush()
        return self._read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--mem-mib", type=int, default=2048)
    ap.add_argument("--smp", type=int, default=2)
    ap.add_argument("--balloon-mib", type=int, default=256,
                    help="guest size to balloon to (QMP balloon value)")
    ap.add_argument("--doo", choices=["on", "off"], default="on",
                    help="virtio-balloon deflate-on-oom")
    ap.add_argument("--scenario", choices=["boot", "spike", "guest"], default="spike",
                    help="spike: balloon over QMP, then touch memory; "
                    "guest: the guest sets its own target_pages (--gtarget), then touches")
    ap.add_argument("--gtarget", type=int, default=65536,
                    help="guest target in pages for --scenario guest")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--mib", type=int, default=1536)
    ap.add_argument("--append", default="")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()

    logf = open(a.log, "w")
    t_start = time.monotonic()
    lock = threading.Lock()

    def log(line):
        with lock:
            logf.write("%8.3f %s\n" % (time.monotonic() - t_start, line))
            logf.flush()

    tmp = tempfile.mkdtemp(prefix="ab-qemu-")
    qmp_path = os.path.join(tmp, "qmp.sock")
    append = ("console=ttyS0 panic=-1 quiet loglevel=4 mode=%s threads=%d mib=%d gtarget=%d %s"
              % (a.scenario, a.threads, a.mib, a.gtarget, a.append))
    cmd = ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg",
           "-m", str(a.mem_mib), "-smp", str(a.smp), "-nographic", "-no-reboot",
           "-kernel", a.kernel, "-initrd", a.initrd, "-append", append,
           "-qmp", "unix:%s,server=on,wait=off" % qmp_path,
           "-device", "virtio-balloon-pci,id=balloon0,deflate-on-oom=%s" % a.doo]
    log("# " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, bufsize=0)
    res = {"kernel": a.kernel, "scenario": a.scenario, "doo": a.doo,
           "balloon_mib": a.balloon_mib, "threads": a.threads, "mib": a.mib}
    lines = []
    qmp = None
    deadline = time.monotonic() + a.timeout
    timer = threading.Timer(a.timeout, p.kill)
    timer.start()
    buf = b""
    try:
        while True:
            chunk = p.stdout.read1(4096) if hasattr(p.stdout, "read1") else p.stdout.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode("utf-8", "replace").rstrip("\r")
                log(line)
                # The console may prefix the first line with escape codes.
                if "AB: " in line:
                    line = line[line.index("AB: "):]
                lines.append(line)
                if line.startswith("AB: READY"):
                    res["ready_s"] = round(time.monotonic() - t_start, 2)
                    if a.scenario == "spike":
                        qmp = QMP(qmp_path, log)
                        target = a.balloon_mib << 20
                        t0 = time.monotonic()
                        qmp.cmd("balloon", value=target)
                        actual = None
                        while time.monotonic() < deadline:
                            r = qmp.cmd("query-balloon")
                            actual = r.get("return", {}).get("actual")
                            if actual is not None and actual <= target + (8 << 20):
                                break
                            time.sleep(0.2)
                        res["inflate_s"] = round(time.monotonic() - t0, 2)
                        res["actual_before_mib"] = (actual or 0) >> 20
                        p.stdin.write(b"go\n")
                        p.stdin.flush()
                if line.startswith("AB: GO guest-target"):
                    res["inflate_s"] = round(time.monotonic() - t_start - res.get("ready_s", 0), 2)
                if line.startswith("AB: DONE") and qmp:
                    r = qmp.cmd("query-balloon")
                    res["actual_after_mib"] = r.get("return", {}).get("actual", 0) >> 20
    finally:
        timer.cancel()
        p.wait()
    res["wall_s"] = round(time.monotonic() - t_start, 2)
    res["timed_out"] = time.monotonic() >= deadline
    for line in lines:
        if line.startswith("AB: OOMKILLS "):
            res["oom_kills"] = int(line.split()[2] or 0)
        elif line.startswith("AB: RC "):
            res["rc"] = int(line.split()[2])
        elif line.startswith("touchmem:"):
            for kv in line.split()[1:]:
                k, v = kv.split("=")
                if k == "seconds":
                    res["touch_s"] = float(v)
        elif line.startswith("AB: DEFLATED"):
            f = line.split()
            res["deflated_fully"] = f[-3] == f[-1]
        elif line.startswith("AB: dmesg"):
            res.setdefault("dmesg", []).append(line[10:])
        elif line.startswith("AB: ") and (" hook" in line or "hook_" in line):
            res.setdefault("hook", []).append(line[4:])
    res["done"] = any(l.startswith("AB: DONE") for l in lines)
    print(json.dumps(res))
    return 0 if res["done"] else 1


if __name__ == "__main__":
    sys.exit(main())
