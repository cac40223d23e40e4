"""Measures a restart on a data directory of many partitions: the time
from the process's start to its listening socket, to its first Metadata
answer, and to the first ListOffsets answer of a partition holding data
(the first use of a partition that a lazy start has not opened yet), and
the broker's RSS then.

    cargo build --release -p purgatorio-broker
    PY=target/venv/bin/python   # kafka-python 3, as the tests install it
    flock /tmp/bench.lock $PY broker/examples/restart.py \\
        --bin target/release/purgatorio-broker --bin /tmp/broker-before \\
        --empty 100000 --with-data 200 --restarts 3

The data directory is made once, by the first binary given: `--with-data`
partitions of a topic `data` get `--mib-each` MiB from a kafka-python
producer (segments of 256 KiB, so each has several), then `--empty`
partitions are added as ten topics `wide-N` of empty partition directories,
which is what CreateTopics makes for a partition (made directly here: the
broker makes them at about 2 ms each). Then each binary is restarted on
it `--restarts` times, in turn, stopped by PID each time.
"""

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slow_clients import free_port, read_exact, request  # noqa: E402

SEGMENT_BYTES = 256 * 1024


def start(binary, data_dir, partitions=1):
    addr = ("127.0.0.1", free_port())
    started = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "--listen", "%s:%d" % addr, "--data-dir", data_dir,
         "--partitions", str(partitions), "--segment-bytes", str(SEGMENT_BYTES)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = started + 300
    while True:
        try:
            s = socket.create_connection(addr, timeout=1)
            break
        except OSError:
            if time.perf_counter() > deadline or proc.poll() is not None:
                proc.kill()
                sys.exit("the broker did not listen")
            time.sleep(0.002)
    listening = time.perf_counter() - started
    return proc, addr, s, started, listening


def answer(s, frame):
    s.sendall(frame)
    length = struct.unpack(">i", read_exact(s, 4))[0]
    return read_exact(s, length)


def metadata_v1(topic):
    name = topic.encode()
    return request(3, 1, struct.pack(">ih", 1, len(name)) + name)


def list_offsets_v1(topic, partition):
    name = topic.encode()
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">iiq", 1, partition, -1)
    return request(2, 1, body)


def fill(binary, data_dir, partitions, mib_each):
    from kafka import KafkaProducer

    proc, addr, s, _, _ = start(binary, data_dir, partitions)
    s.close()
    producer = KafkaProducer(bootstrap_servers="%s:%d" % addr, acks=1, linger_ms=5)
    value = os.urandom(1000)
    for _ in range(mib_each * 1024 * 1024 // 1000):
        for p in range(partitions):
            producer.send("data", value, partition=p)
    producer.flush()
    producer.close()
    proc.kill()
    proc.wait()


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def restart(binary, data_dir, data_partitions):
    proc, _, s, started, listening = start(binary, data_dir)
    answer(s, metadata_v1("wide-0"))
    metadata = time.perf_counter() - started
    first_use = None
    if data_partitions:
        answer(s, list_offsets_v1("data", data_partitions - 1))
        first_use = time.perf_counter() - started
    rss = rss_mib(proc.pid)
    s.close()
    proc.kill()
    proc.wait()
    return listening, metadata, first_use, rss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", action="append", required=True)
    parser.add_argument("--empty", type=int, default=100_000)
    parser.add_argument("--with-data", type=int, default=0)
    parser.add_argument("--mib-each", type=int, default=1)
    parser.add_argument("--restarts", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="pg-restart-")
    data_dir = os.path.join(root, "data")
    try:
        if args.with_data:
            fill(args.bin[0], data_dir, args.with_data, args.mib_each)
        per_topic = -(-args.empty // 10)
        made = 0
        for t in range(10):
            for i in range(min(per_topic, args.empty - made)):
                os.makedirs(os.path.join(data_dir, "wide-%d" % t, str(i)))
            made += min(per_topic, args.empty - made)
        print("load: %s" % open("/proc/loadavg").read().split()[:3])
        for n in range(args.restarts):
            for binary in args.bin:
                listening, metadata, first_use, rss = restart(binary, data_dir, args.with_data)
                used = "" if first_use is None else ", first ListOffsets of a data partition %.3f s" % first_use
                print("%s restart %d: listening %.3f s, first Metadata %.3f s%s, RSS %.0f MiB" % (
                    binary, n + 1, listening, metadata, used, rss), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
