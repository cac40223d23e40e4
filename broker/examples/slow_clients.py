"""Measures the broker beside clients that stall: a real client's latency
and the broker's memory while other connections stop sending a request
halfway (`stalled-frames`) or never read their fetch answers
(`unread-fetches`). Starts the broker binary it is given on a free loopback
port, in memory, and stops it by PID.

    cargo build --release -p purgatorio-broker
    PY=target/venv/bin/python   # kafka-python 3, as the tests install it
    flock /tmp/bench.lock $PY broker/examples/slow_clients.py stalled-frames \\
        --bin target/release/purgatorio-broker
    flock /tmp/bench.lock $PY broker/examples/slow_clients.py unread-fetches \\
        --bin target/release/purgatorio-broker --conns 200
    flock /tmp/bench.lock $PY broker/examples/slow_clients.py wide-create \\
        --bin target/release/purgatorio-broker --partitions 10000

stalled-frames: three connections each send 70 MiB of an announced 100 MiB
request and stop; Metadata round trips (raw v1, fresh connection each) are
timed before and beside them (a timeout counts as not answered).

unread-fetches: 55 MiB is produced to one partition; N connections each
send a Fetch for all of it (v4, max_bytes 55 MiB) and read only the
answer's 4-byte length; the broker's RSS is sampled for 15 s, while a
kafka-python producer and consumer time produce-to-consume round trips
(before and beside them).

wide-create: on a fresh data directory, one connection asks CreateTopics
for a topic of N partitions while a kafka-python producer times its
acks=1 produces to an existing topic until the answer arrives.
"""

import argparse
import socket
import struct
import subprocess
import sys
import threading
import time

MIB = 1 << 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    """The broker process, its address and its latest stats line."""

    def __init__(self, binary, extra):
        self.addr = ("127.0.0.1", free_port())
        self.proc = subprocess.Popen(
            [binary, "--listen", "%s:%d" % self.addr, "--stats-ms", "100"] + extra,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stats = ""
        threading.Thread(target=self._read_stats, daemon=True).start()
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(self.addr, timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    sys.exit("the broker did not listen")
                time.sleep(0.05)

    def _read_stats(self):
        for line in self.proc.stderr:
            self.stats = line

    def stat(self, name):
        for kv in self.stats.split():
            if kv.startswith(name + "="):
                return int(kv.split("=", 1)[1])
        return None

    def rss_mib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0

    def bootstrap(self):
        return "%s:%d" % self.addr

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def request(api_key, version, body, correlation_id=7):
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"slow"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError("closed")
        out += chunk
    return out


def metadata_ms(broker, timeout):
    """One Metadata v1 round trip on a fresh connection, ms (None: not
    answered within `timeout`)."""
    started = time.perf_counter()
    try:
        s = socket.create_connection(broker.addr, timeout=timeout)
        s.sendall(request(3, 1, struct.pack(">i", -1)))
        length = struct.unpack(">i", read_exact(s, 4))[0]
        read_exact(s, length)
        s.close()
    except (OSError, EOFError):
        return None
    return (time.perf_counter() - started) * 1000


def summary(samples):
    answered = sorted(x for x in samples if x is not None)
    if not answered:
        return "none of %d answered" % len(samples)
    pick = lambda q: answered[min(len(answered) - 1, int(q * len(answered)))]
    return "%d/%d answered, p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (
        len(answered), len(samples), pick(0.5), pick(0.99), answered[-1])


def stalled_frames(args):
    broker = Broker(args.bin, [])
    try:
        unloaded = [metadata_ms(broker, 15) for _ in range(20)]
        print("metadata unloaded:", summary(unloaded))

        def stall():
            s = socket.create_connection(broker.addr)
            try:
                s.sendall(struct.pack(">i", 100 * MIB) + bytes(70 * MIB))
                s.recv(1)
            except OSError:
                pass

        for _ in range(3):
            threading.Thread(target=stall, daemon=True).start()
        deadline = time.time() + 10
        while time.time() < deadline and (broker.stat("budget_free") or 1 << 40) > 26 * MIB:
            time.sleep(0.05)
        print("budget_free beside three stalled frames:", broker.stat("budget_free"))
        loaded = [metadata_ms(broker, 15)]
        # Unanswered: two more tries, not twenty timeouts.
        loaded += [metadata_ms(broker, 15) for _ in range(19 if loaded[0] else 2)]
        print("metadata beside three stalled 70 MiB frames:", summary(loaded))
        print("broker RSS %.0f MiB" % broker.rss_mib())
    finally:
        broker.stop()


def produce_big(broker, topic, mib):
    line = b"r" * 1023 + b"\n"
    kcat = subprocess.run(
        ["kcat", "-b", broker.bootstrap(), "-t", topic, "-P", "-p", "0"],
        input=line * (mib * 1024),
        capture_output=True,
    )
    if kcat.returncode != 0:
        sys.exit("kcat: %s" % kcat.stderr)


def fetch_v4(topic, max_bytes):
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 0, 1, max_bytes, 0)
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iiqi", 1, 0, 0, max_bytes)
    return request(1, 4, body)


def round_trips(broker, n):
    """Produce-to-consume round trips of a kafka-python producer and
    consumer on topic `ping`, ms."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap(), acks=1, linger_ms=0)
    producer.send("ping", b"warm").get(timeout=30)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap(), fetch_max_wait_ms=500,
                             enable_auto_commit=False)
    tp = TopicPartition("ping", 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)  # resolved now, not after the first send
    samples = []
    for i in range(n):
        started = time.perf_counter()
        producer.send("ping", b"%d" % i).get(timeout=30)
        got = False
        deadline = started + 30
        while not got and time.perf_counter() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                got = got or any(r.value == b"%d" % i for r in records)
        samples.append((time.perf_counter() - started) * 1000 if got else None)
    producer.close()
    consumer.close()
    return samples


def unread_fetches(args):
    broker = Broker(args.bin, [])
    try:
        produce_big(broker, "big", 55)
        print("RSS after 55 MiB produced: %.0f MiB" % broker.rss_mib())
        print("round trips unloaded:", summary(round_trips(broker, 200)))
        conns = []
        started = time.time()
        for _ in range(args.conns):
            s = socket.create_connection(broker.addr)
            s.sendall(fetch_v4("big", 55 * MIB))
            conns.append(s)
        for s in conns:
            s.settimeout(60)
            read_exact(s, 4)
        print("%d unread answers begun in %.1f s" % (len(conns), time.time() - started))
        peak = [0.0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], broker.rss_mib())
                time.sleep(0.2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        loaded = round_trips(broker, 200)
        stop.wait(max(0, 15 - (time.time() - started)))
        stop.set()
        sampler.join()
        print("round trips beside them:", summary(loaded))
        print("broker RSS peak %.0f MiB with %d unread 55 MiB answers (write_stalled=%s)" % (
            peak[0], len(conns), broker.stat("write_stalled")))
    finally:
        broker.stop()


def create_topics_v4(name, partitions):
    topic = struct.pack(">h", len(name)) + name.encode()
    topic += struct.pack(">ihii", partitions, 1, 0, 0)  # no assignments, no configs
    body = struct.pack(">i", 1) + topic + struct.pack(">ib", 120000, 0)
    return request(19, 4, body)


def wide_create(args):
    import shutil
    import tempfile
    from kafka import KafkaProducer
    data = tempfile.mkdtemp(prefix="slow-clients-")
    broker = Broker(args.bin, ["--data-dir", data])
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap(), acks=1, linger_ms=0)
        producer.send("existing", b"warm").get(timeout=30)

        def produce_ms():
            started = time.perf_counter()
            producer.send("existing", b"x").get(timeout=120)
            return (time.perf_counter() - started) * 1000

        unloaded = [produce_ms() for _ in range(200)]
        print("produce round trips unloaded:", summary(unloaded))
        done = threading.Event()
        took = [0.0]

        def create():
            started = time.perf_counter()
            s = socket.create_connection(broker.addr)
            s.sendall(create_topics_v4("wide", args.partitions))
            s.settimeout(300)
            length = struct.unpack(">i", read_exact(s, 4))[0]
            answer = read_exact(s, length)
            took[0] = time.perf_counter() - started
            error = struct.unpack(">h", answer[4 + 4 + 4 + 2 + len("wide"):][:2])[0]
            print("CreateTopics of %d partitions answered in %.2f s, error %d" % (
                args.partitions, took[0], error))
            done.set()

        creator = threading.Thread(target=create)
        creator.start()
        loaded = []
        while not done.is_set():
            loaded.append(produce_ms())
        creator.join()
        print("produce round trips while it ran:", summary(loaded))
        producer.close()
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["stalled-frames", "unread-fetches", "wide-create"])
    parser.add_argument("--bin", required=True, help="the broker binary")
    parser.add_argument("--conns", type=int, default=200, help="unread-fetches: connections")
    parser.add_argument("--partitions", type=int, default=10000, help="wide-create: partitions")
    args = parser.parse_args()
    {"stalled-frames": stalled_frames, "unread-fetches": unread_fetches,
     "wide-create": wide_create}[args.mode](args)


if __name__ == "__main__":
    main()
