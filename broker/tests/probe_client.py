"""Single questions to purgatorio-broker through kafka-python, each printing
one line per answer for the Rust test to check.

    probe_client.py commit BOOTSTRAP TOPIC GROUP
        commits offset 5 with metadata "kept" to TOPIC[0] (which exists), prints
        `COMMITTED offset metadata`; then commits to a topic that does not
        exist and prints `UNKNOWN accepted` or `UNKNOWN refused ErrorName`.
    probe_client.py times BOOTSTRAP TOPIC
        produces ten records in one batch with timestamps 1000..10000, then
        prints `AT ts offset` from offsets_for_times for 0, 3500, 10000 and
        20000.
    probe_client.py produce_timed BOOTSTRAP TOPIC COUNT FIRST_TS STEP_MS
        produces COUNT records `v<i>` to TOPIC[0] with timestamps FIRST_TS +
        i * STEP_MS (FIRST_TS "now-N": N ms before now), in small batches
        (about 30 records each), prints `DONE`.
    probe_client.py at BOOTSTRAP TOPIC TS...
        prints `EARLIEST n` and `LATEST n` of TOPIC[0], then `AT ts offset
        timestamp` (or `AT ts none`) from offsets_for_times for each TS.
    probe_client.py topics BOOTSTRAP
        creates "five" (5 partitions) and "one" (1) with the admin client,
        prints `PARTITIONS name n` for each, tries "five" again and prints
        `AGAIN ErrorName`, tries "huge" with 100,001 partitions (one past the
        broker's bound) and prints `HUGE ErrorName`, deletes "five" and
        prints `AFTER five n|none`.
    probe_client.py recreate BOOTSTRAP TOPIC GROUP
        creates TOPIC (1 partition) with the admin client, produces 50
        records, commits offset 40 for GROUP, deletes TOPIC, creates it
        again, produces 50 records, and prints `COMMITTED n|none` and
        `FIRST offset` (the first record GROUP's consumer then reads, with
        auto_offset_reset earliest).
    probe_client.py committed BOOTSTRAP TOPIC GROUP
        prints `COMMITTED n|none` for GROUP on TOPIC[0].
    probe_client.py transactions BOOTSTRAP
        init_transactions() of a transactional producer; prints `TXN ok` or
        `TXN ErrorName message`.
    probe_client.py configs BOOTSTRAP
        creates "kept" (retention.ms 3600000, segment.bytes 4096,
        max.message.bytes 2048) and "two" (min.insync.replicas 2) and prints
        `CREATED name` for each, then `REFUSED name ErrorName` for topics
        with an unknown config and retention.ms=banana; prints `DESCRIBED
        kept name value` for its retention.ms and segment.bytes; sends a
        3000-byte record to "kept" (`BIG ErrorName`) and an acks=all record
        to "two" (`ALL ErrorName`); creates "compacted"
        (cleanup.policy=compact) and sends it a record without a key
        (`KEYLESS ErrorName`) and one with (`KEYED accepted`).
    probe_client.py assign BOOTSTRAP
        creates "placed" with a manual replica assignment of partitions 0
        and 1 on broker 0 and prints `PLACED n` (its partitions), then tries
        "elsewhere" on broker 1 and prints `ELSEWHERE ErrorName`.
    probe_client.py grow BOOTSTRAP
        creates "grown" (1 partition), grows it to 4 with the admin client,
        prints `GROWN n` (its partitions, from a fresh client), sends a
        record to its partition 3 (`SENT 3 offset`), then tries 2 and
        prints `SHRINK ErrorName`.
    probe_client.py partitions BOOTSTRAP TOPIC
        prints `PARTITIONS topic n` from a fresh client.
    probe_client.py alter BOOTSTRAP
        creates "altered" (segment.bytes 4096), alters its configs to
        retention.ms 1000 (kafka-python 3 sends IncrementalAlterConfigs: the
        other configs stay), prints its `DESCRIBED` lines, again after
        retention.ms 2000 through AlterConfigs, then tries an unknown config
        and prints `BAD error`.
    probe_client.py describe BOOTSTRAP TOPIC
        prints `DESCRIBED topic name value` for retention.ms and segment.bytes.
    probe_client.py groups BOOTSTRAP TOPIC
        joins group "watchers" as client "probe-1" on TOPIC, then with the
        admin client prints `LISTED group state`, `DESCRIBED group state
        protocol members client_id host`, and `CONFIG name value` for the
        topic's max.message.bytes and the broker's socket.request.max.bytes.
"""

import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata


def commit(bootstrap, topic, group):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.commit({tp: OffsetAndMetadata(5, "kept", -1)})
    got = consumer.committed(tp, metadata=True)
    print("COMMITTED %d %s" % (got.offset, got.metadata), flush=True)
    try:
        # The client retries UNKNOWN_TOPIC_OR_PARTITION until its timeout.
        consumer.commit({TopicPartition("absent-topic", 0): OffsetAndMetadata(1, "", -1)}, timeout_ms=2000)
        print("UNKNOWN accepted", flush=True)
    except Exception as e:  # the client's error for the partition's code
        print("UNKNOWN refused %s" % type(e).__name__, flush=True)
    consumer.close()


def times(bootstrap, topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1000)
    for i in range(10):
        producer.send(topic, value=b"v%d" % i, timestamp_ms=1000 * (i + 1))
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    for ts in (0, 3500, 10000, 20000):
        found = consumer.offsets_for_times({tp: ts})[tp]
        if found is None:
            print("AT %d none" % ts, flush=True)
        else:
            print("AT %d %d %d" % (ts, found.offset, found.timestamp), flush=True)
    consumer.close()


def produce_timed(bootstrap, topic, count, first_ts, step_ms):
    if first_ts.startswith("now-"):
        first_ts = int(time.time() * 1000) - int(first_ts[4:])
    first_ts, step_ms = int(first_ts), int(step_ms)
    producer = KafkaProducer(bootstrap_servers=bootstrap, batch_size=1024, linger_ms=5)
    for i in range(int(count)):
        producer.send(topic, value=b"v%d" % i, partition=0, timestamp_ms=first_ts + i * step_ms)
    producer.flush()
    producer.close()
    print("DONE", flush=True)


def at(bootstrap, topic, *stamps):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    print("EARLIEST %d" % consumer.beginning_offsets([tp])[tp], flush=True)
    print("LATEST %d" % consumer.end_offsets([tp])[tp], flush=True)
    for ts in stamps:
        found = consumer.offsets_for_times({tp: int(ts)})[tp]
        if found is None:
            print("AT %s none" % ts, flush=True)
        else:
            print("AT %s %d %d" % (ts, found.offset, found.timestamp), flush=True)
    consumer.close()


def topics(bootstrap):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("five", 5, 1), NewTopic("one", 1, 1)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    for name in ("five", "one"):
        print("PARTITIONS %s %d" % (name, len(consumer.partitions_for_topic(name))), flush=True)
    try:
        admin.create_topics([NewTopic("five", 2, 1)])
        print("AGAIN created", flush=True)
    except Exception as e:
        print("AGAIN %s" % type(e).__name__, flush=True)
    try:
        admin.create_topics([NewTopic("huge", 100001, 1)])
        print("HUGE created", flush=True)
    except Exception as e:
        print("HUGE %s" % type(e).__name__, flush=True)
    admin.delete_topics(["five"])
    consumer.close()
    # A fresh client: no cached metadata.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, allow_auto_create_topics=False)
    found = consumer.partitions_for_topic("five")
    print("AFTER five %s" % ("none" if not found else len(found)), flush=True)
    consumer.close()
    admin.close()


def groups(bootstrap, topic):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="watchers", client_id="probe-1")
    deadline = time.time() + 20
    while not consumer.assignment() and time.time() < deadline:
        consumer.poll(timeout_ms=200)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    for g in admin.list_groups():
        print("LISTED %s %s" % (g["group_id"], g["group_state"]), flush=True)
    for gid, g in admin.describe_groups(["watchers"]).items():
        m = g["members"][0]
        print("DESCRIBED %s %s %s %d %s %s" % (
            gid, g["group_state"], g["protocol_data"], len(g["members"]), m["client_id"], m["client_host"]), flush=True)
    topic_configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    print("CONFIG max.message.bytes %s" % topic_configs["topic"][topic]["max.message.bytes"]["value"], flush=True)
    broker_configs = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
    print("CONFIG socket.request.max.bytes %s" % broker_configs["broker"]["0"]["socket.request.max.bytes"]["value"], flush=True)
    consumer.close()
    admin.close()


def committed(bootstrap, topic, group):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    got = consumer.committed(TopicPartition(topic, 0))
    print("COMMITTED %s" % ("none" if got is None else got), flush=True)
    consumer.close()


def recreate(bootstrap, topic, group):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)

    def fill():
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for i in range(50):
            producer.send(topic, value=b"v%d" % i, partition=0)
        producer.flush()
        producer.close()

    admin.create_topics([NewTopic(topic, 1, 1)])
    fill()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(40, "", -1)})
    consumer.close()
    admin.delete_topics([topic])
    admin.create_topics([NewTopic(topic, 1, 1)])
    fill()
    admin.close()
    committed(bootstrap, topic, group)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    deadline = time.time() + 20
    while time.time() < deadline:
        records = consumer.poll(timeout_ms=500).get(tp)
        if records:
            print("FIRST %d" % records[0].offset, flush=True)
            break
    consumer.close()


def transactions(bootstrap):
    try:
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-probe",
                                 max_block_ms=10000)
        producer.init_transactions()
        print("TXN ok", flush=True)
        producer.close()
    except Exception as e:
        print("TXN %s %s" % (type(e).__name__, e), flush=True)


def describe(bootstrap, topic):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    for name in ("retention.ms", "segment.bytes"):
        print("DESCRIBED %s %s %s" % (topic, name, configs["topic"][topic][name]["value"]), flush=True)
    admin.close()


def assign(bootstrap):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("placed", -1, -1, replica_assignments={0: [0], 1: [0]})])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    print("PLACED %d" % len(consumer.partitions_for_topic("placed")), flush=True)
    consumer.close()
    try:
        admin.create_topics([NewTopic("elsewhere", -1, -1, replica_assignments={0: [1]})])
        print("ELSEWHERE created", flush=True)
    except Exception as e:
        print("ELSEWHERE %s" % type(e).__name__, flush=True)
    admin.close()


def partitions(bootstrap, topic):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    print("PARTITIONS %s %d" % (topic, len(consumer.partitions_for_topic(topic) or ())), flush=True)
    consumer.close()


def grow(bootstrap):
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("grown", 1, 1)])
    admin.create_partitions({"grown": NewPartitions(4)})
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    print("GROWN %d" % len(consumer.partitions_for_topic("grown")), flush=True)
    consumer.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    sent = producer.send("grown", b"three", partition=3).get(timeout=20)
    print("SENT %d %d" % (sent.partition, sent.offset), flush=True)
    producer.close()
    try:
        admin.create_partitions({"grown": NewPartitions(2)})
        print("SHRINK accepted", flush=True)
    except Exception as e:
        print("SHRINK %s" % type(e).__name__, flush=True)
    admin.close()


def alter(bootstrap):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("altered", 1, 1, topic_configs={"segment.bytes": "4096"})])
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "altered", configs={"retention.ms": "1000"})])
    describe(bootstrap, "altered")
    # AlterConfigs (the client adds the other configs set, which it replaces).
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "altered", configs={"retention.ms": "2000"})],
                        incremental=False)
    describe(bootstrap, "altered")
    # Past the client's own check: the broker's answer.
    result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "altered", configs={"no.such": "1"})],
                                 raise_on_unknown=False)
    print("BAD %s" % result["topic"]["altered"], flush=True)
    admin.close()


def configs(bootstrap):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    made = {
        "kept": {"retention.ms": "3600000", "segment.bytes": "4096", "max.message.bytes": "2048"},
        "two": {"min.insync.replicas": "2"},
    }
    for name, topic_configs in made.items():
        admin.create_topics([NewTopic(name, 1, 1, topic_configs=topic_configs)])
        print("CREATED %s" % name, flush=True)
    for name, topic_configs in [
        ("unknown", {"no.such.config": "1"}),
        ("banana", {"retention.ms": "banana"}),
    ]:
        try:
            admin.create_topics([NewTopic(name, 1, 1, topic_configs=topic_configs)])
            print("REFUSED %s none" % name, flush=True)
        except Exception as e:
            print("REFUSED %s %s" % (name, type(e).__name__), flush=True)
    admin.create_topics([NewTopic("compacted", 1, 1, topic_configs={"cleanup.policy": "compact"})])
    print("CREATED compacted", flush=True)
    admin.close()
    describe(bootstrap, "kept")
    for label, topic, value, acks, key in (
        ("BIG", "kept", b"x" * 3000, 1, None),
        ("ALL", "two", b"v", "all", None),
        ("KEYLESS", "compacted", b"v", 1, None),
        ("KEYED", "compacted", b"v", 1, b"k"),
    ):
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, retries=0)
        try:
            producer.send(topic, value, key=key, partition=0).get(timeout=20)
            print("%s accepted" % label, flush=True)
        except Exception as e:
            print("%s %s" % (label, type(e).__name__), flush=True)
        producer.close()


if __name__ == "__main__":
    {
        "commit": commit,
        "times": times,
        "produce_timed": produce_timed,
        "at": at,
        "topics": topics,
        "groups": groups,
        "recreate": recreate,
        "committed": committed,
        "transactions": transactions,
        "configs": configs,
        "describe": describe,
        "assign": assign,
        "grow": grow,
        "partitions": partitions,
        "alter": alter,
    }[sys.argv[1]](*sys.argv[2:])
