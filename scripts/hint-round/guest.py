"""The guest both measuring scripts of this folder boot: the project's image, no agent, one
vCPU under single-thread TCG, free page reporting and hinting on (with an iothread), a serial
shell and QMP on Unix sockets in a temporary directory. With `incoming=True` it waits for a
migration instead of booting (`-incoming defer`, then QMP `migrate-incoming`), on the same command line. Not part of the
product; crates/testbed/src/qemu.rs is the test bed's own.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_image():
    return open(os.path.join(REPO, "run/image.path")).read().strip()


def sent(r):
    """What a finished migration sent, from its query-migrate answer."""
    ram = r["ram"]
    return f"{r['status']}, {ram['transferred'] / 2**20:.1f} MiB sent, {ram.get('duplicate', 0)} zero pages"


class Guest:
    def __init__(self, qemu, image, memory_mib=2048, incoming=False):
        self.dir = tempfile.mkdtemp(prefix="hint-round-")
        ser, qmp = f"{self.dir}/ser", f"{self.dir}/qmp"
        cmd = [qemu, "-accel", "tcg,thread=single", "-machine", "pc", "-cpu", "qemu64", "-nodefaults", "-display", "none",
               "-no-reboot", "-m", str(memory_mib), "-smp", "1", "-kernel", f"{image}/vmlinuz", "-initrd", f"{image}/initrd.img",
               "-append", "console=ttyS0 quiet panic=-1 init_on_alloc=0 no_timer_check autoballoon.agent=none",
               "-chardev", f"socket,id=ser0,path={ser},server=on,wait=off", "-serial", "chardev:ser0",
               "-qmp", f"unix:{qmp},server=on,wait=off", "-object", "iothread,id=iothread0",
               "-device", "virtio-balloon-pci,id=balloon0,free-page-reporting=on,free-page-hint=on,iothread=iothread0"]
        if incoming:
            cmd += ["-incoming", "defer"]
        self.memory = memory_mib << 20
        self.proc = subprocess.Popen(cmd, stdout=open(f"{self.dir}/qemu.log", "w"), stderr=subprocess.STDOUT)
        self.ser = self._connect(ser)
        self.buf = b""
        self.console = b""
        self.n = 0
        if not incoming:
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
            self._take(chunk)
        self.buf = self.buf[self.buf.index(token) + len(token):]

    def _take(self, chunk):
        chunk = chunk.replace(b"\r", b"")
        self.buf += chunk
        self.console += chunk

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

    def migrate(self, delay=None, spam=0.0, ping=False):
        """Migrates to `exec:cat > /dev/null` and resumes the guest; returns a line of what it
        sent. `delay`: one QMP `balloon` at the guest's full size that many seconds after
        `migrate`; `spam`: one every 10 ms for that many seconds; `ping`: the guest's shell
        asked `true` back to back meanwhile (from a thread; the VM pauses when the migration
        completes, until `cont`), and the longest it took to answer added to the line."""
        worst, stop = [0.0], threading.Event()

        def pinger():
            while not stop.is_set():
                t = time.time()
                self.shell("true")
                worst[0] = max(worst[0], time.time() - t)

        self.cmd("migrate", uri="exec:cat > /dev/null")
        start = time.time()
        pinging = threading.Thread(target=pinger) if ping else None
        if pinging:
            pinging.start()
        if delay is not None:
            time.sleep(delay)
            self.cmd("balloon", value=self.memory)
        while time.time() - start < spam:
            self.cmd("balloon", value=self.memory)
            time.sleep(0.01)
        r = self.wait_migration()
        stop.set()
        self.cmd("cont")
        line = f"{sent(r)}, {r.get('total-time')} ms"
        if pinging:
            pinging.join()
            line += f"; the shell answered within {worst[0]:.2f} s at the longest"
        return line

    def drain_console(self):
        """Reads what the console has printed so far without waiting; returns all of it."""
        self.ser.setblocking(False)
        try:
            while True:
                chunk = self.ser.recv(65536)
                if not chunk:
                    break
                self._take(chunk)
        except BlockingIOError:
            pass
        finally:
            self.ser.setblocking(True)
        return self.console.decode(errors="replace")

    def wait_migration(self, timeout=300):
        """Polls query-migrate until the migration has ended; returns its last answer."""
        deadline = time.time() + timeout
        while True:
            r = self.cmd("query-migrate")["return"]
            if r.get("status") in ("completed", "failed", "cancelled"):
                return r
            if time.time() > deadline:
                sys.exit(f"hint-round: the migration did not end within {timeout} s")
            time.sleep(0.05)

    def close(self):
        self.proc.kill()
        self.proc.wait()
