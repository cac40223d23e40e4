"""What an idle fleet of aiokafka consumers costs the broker.

    idle_aiokafka.py --bin BROKER [--consumers 100] [--secs 10]
                     [--same-partition] [--perf FILE] [--io-threads N]

Starts the broker release build BROKER on a free loopback port (in memory,
a stats line every second), creates topic "quiet" with one partition per
consumer, and starts the consumers in this one process: aiokafka's
defaults (no group, `fetch_max_wait_ms` 500), each assigned its own
partition (`--same-partition`: all partition 0), each reading in a loop.
Nothing is produced, so every fetch expires empty. After a 3 s warm-up it
measures over `--secs` seconds, from one stats line to another: the
broker's CPU from `/proc/PID/task/*/schedstat` (user and kernel, to the
nanosecond), its context switches (`/proc/PID/task/*/status`), its counts
of expired fetches and timer wake-ups, and the requests the clients sent,
by type (counted in aiokafka's connection). With `--perf FILE`,
`perf record -g` samples the broker over the window into FILE instead (the
CPU figure then includes perf's own cost; `PERF_FREQ` sets its sampling
rate, 4000 Hz by default; read it with `perf report -i FILE`).

`--io-threads N` passes the broker's flag of that name.

Install aiokafka first, e.g. `target/venv/bin/python -m pip install aiokafka`.
"""

import argparse
import asyncio
import collections
import os
import re
import socket
import subprocess
import threading
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
import aiokafka.conn

from procstat import cpu_ns, switches

SENT = collections.Counter()
_send = aiokafka.conn.AIOKafkaConnection.send


def counting_send(self, request, *args, **kwargs):
    SENT[type(request).__name__] += 1
    return _send(self, request, *args, **kwargs)


aiokafka.conn.AIOKafkaConnection.send = counting_send


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stats:
    """The broker's stats lines, read from its stderr; at each one, the
    broker's CPU."""

    def __init__(self, broker):
        self.cond = threading.Condition()
        self.seen = []
        self.broker = broker
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.broker.stderr:
            expired = re.search(rb" expired=(\d+)", line)
            wakeups = re.search(rb"timer_wakeups=(\d+)", line)
            if expired and wakeups:
                pid = self.broker.pid
                seen = (time.monotonic(), cpu_ns(pid), int(expired.group(1)), int(wakeups.group(1)), switches(pid))
                with self.cond:
                    self.seen.append(seen)
                    self.cond.notify_all()

    def next(self):
        with self.cond:
            n = len(self.seen)
            self.cond.wait_for(lambda: len(self.seen) > n, timeout=10)
            return self.seen[-1]


async def consume(bootstrap, partition, stop):
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    consumer.assign([TopicPartition("quiet", partition)])
    try:
        while not stop.is_set():
            await consumer.getmany(timeout_ms=1000)
    finally:
        await consumer.stop()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--consumers", type=int, default=100)
    parser.add_argument("--secs", type=float, default=10)
    parser.add_argument("--same-partition", action="store_true")
    parser.add_argument("--perf")
    parser.add_argument("--io-threads", type=int)
    args = parser.parse_args()
    port = free_port()
    bootstrap = "127.0.0.1:%d" % port
    broker = subprocess.Popen(
        [args.bin, "--listen", bootstrap, "--stats-ms", "1000"]
        + (["--io-threads", str(args.io_threads)] if args.io_threads else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        stats = Stats(broker)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        partitions = 1 if args.same_partition else args.consumers
        await admin.create_topics([NewTopic("quiet", partitions, 1)])
        await admin.close()
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(consume(bootstrap, 0 if args.same_partition else i, stop))
            for i in range(args.consumers)
        ]
        await asyncio.sleep(3)
        loop = asyncio.get_running_loop()
        t0, c0, e0, w0, s0 = await loop.run_in_executor(None, stats.next)
        sent0 = SENT.copy()
        perf = None
        if args.perf:
            perf = subprocess.Popen(
                ["perf", "record", "-F", os.environ.get("PERF_FREQ", "4000"), "-g", "-o", args.perf, "-p", str(broker.pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        await asyncio.sleep(args.secs)
        t1, c1, e1, w1, s1 = await loop.run_in_executor(None, stats.next)
        if perf:
            perf.send_signal(2)
            perf.wait()
        sent = SENT - sent0
        secs = t1 - t0
        expired = max(e1 - e0, 1)
        print(
            "%d idle aiokafka consumers (%s) over %.1f s: %.3f %% of a core, %.1f us of broker CPU, "
            "%.2f timer wake-ups and %.2f context switches per expired fetch (%d expired)"
            % (
                args.consumers,
                "one partition" if args.same_partition else "a partition each",
                secs,
                (c1 - c0) / secs / 1e7,
                (c1 - c0) / 1e3 / expired,
                (w1 - w0) / expired,
                (s1 - s0) / expired,
                expired,
            )
        )
        print("requests sent meanwhile: %s" % ", ".join("%s %d" % kv for kv in sorted(sent.items())))
        stop.set()
        await asyncio.wait(tasks, timeout=10)
    finally:
        broker.kill()
        broker.wait()


if __name__ == "__main__":
    asyncio.run(main())
