"""A real Kafka client (kafka-python) against purgatorio-broker.

    group_client.py produce BOOTSTRAP TOPIC FROM COUNT
    group_client.py produce_paced BOOTSTRAP TOPIC FROM COUNT PAUSE_MS
    group_client.py consume BOOTSTRAP TOPIC GROUP NAME

`produce` sends the values FROM..FROM+COUNT-1, keyed so that they spread
over the partitions; `produce_paced` sends them unkeyed, pausing PAUSE_MS
after each, and prints `DONE` once every one is acknowledged. Both use the
producer's default settings (idempotent, acks=all, retrying). `consume` joins GROUP and, for every record, prints
`REC name partition offset value` and after every batch commits and prints
`COMMIT name partition next_offset` for each partition it consumed; on every
assignment it prints `ASSIGN name p,p,...`. Every line is flushed at once.

With `GROUP_INSTANCE_ID=ID` in its environment, `consume` is a static
member (KIP-345) with that `group_instance_id`, and with
`GROUP_SESSION_MS=MS` its session timeout is MS (6000 otherwise); it prints
`REVOKE name p,p,...` whenever partitions are taken from it.

With `GROUP_CLIENT_GO=PATH` in its environment, `consume` makes its consumer,
prints `READY name`, and joins the group only once PATH exists (waiting at
most 60 s): a test can then start several members together, however long
each interpreter took to start.
"""

import os
import sys
import time

from kafka.errors import CommitFailedError
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition


def produce(bootstrap, topic, first, count):
    # The client's defaults: idempotent, acks=all.
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for value in range(first, first + count):
        producer.send(topic, key=str(value).encode(), value=str(value).encode())
    producer.flush()
    producer.close()


def produce_paced(bootstrap, topic, first, count, pause_ms):
    import time

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    futures = []
    for value in range(first, first + count):
        futures.append(producer.send(topic, value=str(value).encode()))
        time.sleep(pause_ms / 1000.0)
    producer.flush()
    for future in futures:
        future.get(timeout=60)
    producer.close()
    print("DONE", flush=True)


class Announce(ConsumerRebalanceListener):
    def __init__(self, name):
        self.name = name

    def on_partitions_revoked(self, revoked):
        if revoked:
            parts = ",".join(str(tp.partition) for tp in sorted(revoked, key=lambda tp: tp.partition))
            print("REVOKE %s %s" % (self.name, parts), flush=True)

    def on_partitions_assigned(self, assigned):
        parts = ",".join(str(tp.partition) for tp in sorted(assigned, key=lambda tp: tp.partition))
        print("ASSIGN %s %s" % (self.name, parts), flush=True)


def consume(bootstrap, topic, group, name):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=int(os.environ.get("GROUP_SESSION_MS", "6000")),
        heartbeat_interval_ms=500,
        group_instance_id=os.environ.get("GROUP_INSTANCE_ID"),
        max_poll_records=20,
    )
    consumer.subscribe([topic], listener=Announce(name))
    go = os.environ.get("GROUP_CLIENT_GO")
    if go:
        print("READY %s" % name, flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
    while True:
        batch = consumer.poll(timeout_ms=200)
        if not batch:
            continue
        nexts = {}
        for tp, records in batch.items():
            for record in records:
                print("REC %s %d %d %s" % (name, tp.partition, record.offset, record.value.decode()), flush=True)
                nexts[tp.partition] = record.offset + 1
        try:
            consumer.commit()
        except CommitFailedError:
            # The group rebalanced under this batch: its partitions may
            # belong to someone else now, who starts from the last commit.
            print("REBALANCED %s" % name, flush=True)
            continue
        for partition, offset in sorted(nexts.items()):
            print("COMMIT %s %d %d" % (name, partition, offset), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "produce_paced":
        produce_paced(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        consume(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
