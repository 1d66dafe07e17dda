#!/usr/bin/python3
# A fake QEMU for packaging/test-systemd.sh: serves QMP on a unix socket (argv[1]) in QEMU
# 7.2's shapes, enough for the host daemon to manage it as a VM of SIZE MiB (argv[2],
# default 1024): the greeting, qmp_capabilities, query-balloon, balloon (the balloon moves
# at once), qom-get/qom-set of the balloon's guest statistics, query-status,
# query-memory-size-summary, query-migrate, query-kvm; everything else CommandNotFound.
# One client at a time, like QEMU's monitor. Each balloon request is printed
# ("balloon BYTES") so the journal shows the daemon drove it. Python's standard library
# only (python3-minimal).
import json, os, socket, sys, time

path = sys.argv[1]
size = int(sys.argv[2] if len(sys.argv) > 2 else 1024) << 20
actual = size
interval = 0
BALLOON = "/machine/peripheral/balloon0"
GREETING = {"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7},
                                "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}


def stats():
    used = 300 << 20
    return {"stats": {"stat-swap-in": 0, "stat-swap-out": 0, "stat-major-faults": 0, "stat-minor-faults": 0,
                      "stat-htlb-pgalloc": 0, "stat-htlb-pgfail": 0,
                      "stat-total-memory": actual, "stat-free-memory": max(actual - used, 0),
                      "stat-available-memory": max(actual - used, 0), "stat-disk-caches": 0},
            "last-update": int(time.time())}


def answer(cmd, negotiated):
    global actual, interval
    name, args = cmd.get("execute"), cmd.get("arguments") or {}
    if not negotiated:
        if name == "qmp_capabilities":
            return {}, True
        return ("CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'"), False
    if name == "query-balloon":
        return {"actual": actual}, True
    if name == "balloon":
        actual = min(int(args["value"]), size)
        print("balloon", actual, flush=True)
        return {}, True
    if name in ("qom-get", "qom-set"):
        if args.get("path") != BALLOON:
            return ("DeviceNotFound", "Device '%s' not found" % args.get("path")), True
        prop = args.get("property")
        if name == "qom-set" and prop == "guest-stats-polling-interval":
            interval = int(args["value"])
            return {}, True
        if name == "qom-get" and prop == "guest-stats":
            return stats(), True
        if name == "qom-get" and prop == "guest-stats-polling-interval":
            return interval, True
        if name == "qom-get" and prop in ("deflate-on-oom", "free-page-reporting", "free-page-hint"):
            return prop == "deflate-on-oom", True
        return ("GenericError", "Property 'virtio-balloon-pci.%s' not found" % prop), True
    if name == "query-status":
        return {"status": "running", "singlestep": False, "running": True}, True
    if name == "query-memory-size-summary":
        return {"base-memory": size, "plugged-memory": 0}, True
    if name == "query-migrate":
        return {}, True
    if name == "query-kvm":
        return {"enabled": False, "present": True}, True
    return ("CommandNotFound", "The command %s has not been found" % name), True


def serve(conn):
    f = conn.makefile("rwb", buffering=0)
    f.write((json.dumps(GREETING) + "\r\n").encode())
    negotiated = False
    for line in f:
        try:
            cmd = json.loads(line)
        except ValueError:
            continue
        ret, negotiated_now = answer(cmd, negotiated)
        negotiated = negotiated or (negotiated_now and cmd.get("execute") == "qmp_capabilities")
        reply = {"error": {"class": ret[0], "desc": ret[1]}} if isinstance(ret, tuple) else {"return": ret}
        if "id" in cmd:
            reply["id"] = cmd["id"]
        f.write((json.dumps(reply) + "\r\n").encode())


try:
    os.unlink(path)
except FileNotFoundError:
    pass
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(1)
print("listening on", path, flush=True)
while True:
    conn, _ = srv.accept()
    print("client connected", flush=True)
    try:
        serve(conn)
    except (OSError, KeyError, ValueError) as e:
        print("connection ended:", e, flush=True)
    finally:
        conn.close()
    print("client gone", flush=True)
