"""Measures the long-poll server beside clients that stall: its RSS, and a
normal client's GET round trip, while N other connections send half their
headers (`half-headers`), half of a 400 KiB body (`stalled-bodies`), or
pipeline GETs of a 512 KiB value they never read, each after a PUT that
changes it (`unread`). Starts the server binary it is given on a free
loopback port and stops it by PID. Python's standard library only.

    cargo build --release -p purgatorio-web
    flock /tmp/bench.lock python3 web/examples/slow_clients.py unread \\
        --bin target/release/purgatorio-web --conns 200

The RSS and the server's open files are sampled for `--seconds` (default
40: past the server's 30 s stall timeouts); the round trips are timed
before the stalled clients come and beside them (a GET that gets no answer
in 5 s counts as lost). With `--waves 2` a second crowd comes after the
first: memory freed by the first is reused (glibc keeps it in the process,
so RSS does not fall), memory still pinned adds up.
"""

import argparse
import socket
import subprocess
import sys
import time

KIB = 1 << 10


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid):
    import os
    return len(os.listdir("/proc/%d/fd" % pid))


def connect(addr):
    s = socket.create_connection(addr, timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def request(s, method, path, body=b""):
    """One request on `s`; its status, or None if no whole head came in 5 s."""
    head = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (method, path, len(body))
    got = b""
    try:
        s.sendall(head.encode() + body)
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                return None
            got += chunk
        head, rest = got.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return int(head.split()[1])
    except OSError:
        return None


def round_trips(addr, count):
    """`count` GETs on one keep-alive connection: milliseconds each, None if lost."""
    times = []
    try:
        s = connect(addr)
    except OSError:
        return [None] * count
    for _ in range(count):
        start = time.perf_counter()
        status = request(s, "GET", "/keys/probe")
        times.append(None if status is None else (time.perf_counter() - start) * 1e3)
        if status is None:
            s.close()
            try:
                s = connect(addr)
            except OSError:
                pass
    s.close()
    return times


def summary(times):
    got = sorted(t for t in times if t is not None)
    lost = len(times) - len(got)
    if not got:
        return "all %d lost" % lost
    pick = lambda q: got[min(len(got) - 1, int(q * len(got)))]
    return "p50 %.2f ms, p99 %.2f ms, max %.2f ms, lost %d" % (pick(0.5), pick(0.99), got[-1], lost)


def stall(kind, addr, conns):
    """`conns` stalled connections; those the server closed at once (a
    per-address limit, a refused body) are counted, not kept."""
    held, closed = [], 0
    for i in range(conns):
        try:
            held.append(stall_one(kind, addr, i))
        except OSError:
            closed += 1
    if closed:
        print("  %d of %d stalled connections were closed by the server as they came" % (closed, conns))
    return held


def stall_one(kind, addr, i):
    s = connect(addr)
    if kind == "half-headers":
        s.sendall(b"GET /keys/probe HTTP/1.1\r\nHost: x\r\n")
    elif kind == "stalled-bodies":
        s.sendall(b"PUT /keys/b%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (i, 512 * KIB))
        s.sendall(b"x" * (400 * KIB))
    else:
        # A new value each time: each connection pins its own answer.
        writer = connect(addr)
        request(writer, "PUT", "/keys/big", bytes([65 + i % 26]) * (512 * KIB))
        writer.close()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /keys/big HTTP/1.1\r\nHost: x\r\n\r\n" * 16)
    return s


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["half-headers", "stalled-bodies", "unread"])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--server-args", default="",
                        help="more arguments for the server, e.g. '--max-connections-per-ip 5000'")
    parser.add_argument("--conns", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--waves", type=int, default=1,
                        help="stalled clients come this many times, each --seconds apart; none leaves")
    args = parser.parse_args()
    addr = ("127.0.0.1", free_port())
    server = subprocess.Popen([args.bin, "%s:%d" % addr] + args.server_args.split(),
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(addr, timeout=1).close()
                break
            except OSError:
                time.sleep(0.01)
        probe = connect(addr)
        request(probe, "PUT", "/keys/probe", b"v")
        probe.close()
        print("%s, %d connections, %s" % (args.kind, args.conns, args.bin))
        print("  alone:  RSS %.1f MiB; round trips %s" % (rss_mib(server.pid), summary(round_trips(addr, args.probes))))
        held = []
        for wave in range(1, args.waves + 1):
            held += stall(args.kind, addr, args.conns)
            peak, start = 0.0, time.time()
            beside = round_trips(addr, args.probes)
            samples = []
            while time.time() - start < args.seconds:
                rss = rss_mib(server.pid)
                peak = max(peak, rss)
                samples.append((time.time() - start, rss, open_fds(server.pid)))
                time.sleep(0.5)
            print("  wave %d beside: round trips %s" % (wave, summary(beside)))
            quarter, end = samples[len(samples) // 4], samples[-1]
            print("  wave %d RSS: peak %.1f MiB; at %.0f s %.1f MiB, %d open files; at %.0f s %.1f MiB, %d open files"
                  % ((wave, peak) + quarter + end))
        for s in held:
            s.close()
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
