"""The floor under an idle long poll, measured with an idle fleet's pattern.

    wake_floor.py --bin target/release/examples/wake_floor
                  [--threads 2] [--clients 100] [--secs 10] [--work-us 400]

Starts `wake_floor` (see wake_floor.rs: it answers each frame after 500 ms
and does nothing else) and, in this one asyncio loop, `--clients`
connections that each send a 100-byte frame, wait for the answer and send
the next, as aiokafka's consumers do with their fetches: the answers are
read one after another by one loop, so the next requests arrive one at a
time. Each answer costs the client `--work-us` of CPU before it sends the
next request (busy, in the one loop: aiokafka's consumers spend about
400 us of Python per fetch, so the answers of one expiry reach the
server's next requests spread that far apart). After a 3 s warm-up it reports, over `--secs`, the server's CPU
(`/proc/PID/task/*/schedstat`, user and kernel) and context switches per
answered request.
"""

import argparse
import asyncio
import subprocess
import sys
import time

from procstat import cpu_ns, switches


async def client(host, port, counter, stop, work):
    reader, writer = await asyncio.open_connection(host, port)
    frame = (96).to_bytes(4, "big") + bytes(96)
    try:
        while not stop.is_set():
            writer.write(frame)
            head = await reader.readexactly(4)
            await reader.readexactly(int.from_bytes(head, "big"))
            counter[0] += 1
            busy = time.perf_counter() + work
            while time.perf_counter() < busy:
                pass
    finally:
        writer.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--secs", type=float, default=10)
    parser.add_argument("--work-us", type=float, default=400)
    args = parser.parse_args()
    server = subprocess.Popen(
        [args.bin, "--threads", str(args.threads)], stdout=subprocess.PIPE
    )
    try:
        host, port = server.stdout.readline().decode().strip().rsplit(":", 1)
        counter = [0]
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(client(host, int(port), counter, stop, args.work_us / 1e6))
            for _ in range(args.clients)
        ]
        await asyncio.sleep(3)
        t0, c0, s0, n0 = time.monotonic(), cpu_ns(server.pid), switches(server.pid), counter[0]
        await asyncio.sleep(args.secs)
        t1, c1, s1, n1 = time.monotonic(), cpu_ns(server.pid), switches(server.pid), counter[0]
        answered = max(n1 - n0, 1)
        print(
            "%d clients (%.0f us of work per answer), wake_floor with %s over %.1f s: %.3f %% of a core, "
            "%.1f us of server CPU and %.2f context switches per answer (%d answered)"
            % (
                args.clients,
                args.work_us,
                "a current-thread runtime" if args.threads == 0 else "%d workers" % args.threads,
                t1 - t0,
                (c1 - c0) / (t1 - t0) / 1e7,
                (c1 - c0) / 1e3 / answered,
                (s1 - s0) / answered,
                answered,
            )
        )
        stop.set()
        await asyncio.wait(tasks, timeout=2)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
