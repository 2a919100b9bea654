"""Capture real client requests to Sluice, as the seed corpus of the protocol fuzz test.

Runs a broker process, puts `tests.kafka_capture.KafkaCaptureProxy` in front of it and
drives confluent-kafka (admin, idempotent and transactional producers, a group
consumer), kafka-python and aiokafka through it. The request frames are written to
tests/fuzz_corpus.json; a stored corpus keeps a fuzz seed replayable (live captures
differ in timestamps, producer ids and member ids). Usage:

    python tools/capture_fuzz_corpus.py [OUTPUT]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import aiokafka
import confluent_kafka as ck
import kafka
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.kafka_capture import KafkaCaptureProxy  # noqa: E402
from wire.messages import APIS  # noqa: E402

# The only names the captured frames use; the fuzz test keeps its canary elsewhere.
TOPIC, SCRATCH, GROUP, TXN_ID = "fuzz", "fuzz-scratch", "fuzz-group", "fuzz-txn"
FRAMES_PER_VERSION = 3  # per client, API and version: a few shapes, not every repeat
MAX_FRAME_BYTES = 16 * 1024


def confluent_session(bootstrap: str) -> None:
    base = {"bootstrap.servers": bootstrap, "client.id": "confluent-kafka"}
    admin = AdminClient(base)
    for future in admin.create_topics([
            NewTopic(TOPIC, num_partitions=2, replication_factor=1,
                     config={"retention.ms": "3600000"}),
            NewTopic(SCRATCH, num_partitions=1, replication_factor=1)]).values():
        future.result(10)
    admin.create_partitions([NewPartitions(SCRATCH, 2)])[SCRATCH].result(10)
    resource = ConfigResource("topic", TOPIC)
    admin.describe_configs([resource])[resource].result(10)
    admin.describe_configs([ConfigResource("broker", "0")])

    for codec in ("none", "gzip", "lz4"):
        producer = ck.Producer({**base, "enable.idempotence": True, "compression.type": codec,
                                "linger.ms": 5})
        for n in range(5):
            producer.produce(TOPIC, key=f"k{n}".encode(), value=f"{codec}-{n}".encode(),
                             headers=[("h", b"v")])
        assert producer.flush(10) == 0

    producer = ck.Producer({**base, "transactional.id": TXN_ID})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(TOPIC, key=b"t", value=b"committed")
    offsets_consumer = ck.Consumer({**base, "group.id": GROUP})
    producer.send_offsets_to_transaction([ck.TopicPartition(TOPIC, 0, 1)],
                                         offsets_consumer.consumer_group_metadata(), 10)
    offsets_consumer.close()
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.produce(TOPIC, key=b"t", value=b"aborted")
    producer.flush(10)
    producer.abort_transaction(10)
    del producer

    consumer = ck.Consumer({**base, "group.id": GROUP, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "heartbeat.interval.ms": 100,
                            "isolation.level": "read_committed"})
    consumer.subscribe([TOPIC])
    got, deadline = 0, time.monotonic() + 20
    while got < 16 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        got += message is not None and not message.error()
    consumer.commit(asynchronous=False)
    time.sleep(0.3)  # a heartbeat or two
    consumer.close()
    partitions = [ck.TopicPartition(TOPIC, p) for p in range(2)]
    admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(GROUP, partitions)])[
        GROUP].result(10)
    admin.describe_consumer_groups([GROUP])[GROUP].result(10)
    admin.list_consumer_groups().result(10)
    admin.delete_topics([SCRATCH])[SCRATCH].result(10)


def kafka_python_session(bootstrap: str) -> None:
    common = {"bootstrap_servers": bootstrap, "client_id": "kafka-python",
              "request_timeout_ms": 10000}
    producer = kafka.KafkaProducer(**common, compression_type="gzip")
    for n in range(3):
        producer.send(TOPIC, key=b"kp", value=f"kp-{n}".encode()).get(10)
    producer.close(5)
    consumer = kafka.KafkaConsumer(TOPIC, **common, group_id=GROUP + "-kp",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   heartbeat_interval_ms=100, consumer_timeout_ms=3000)
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()
    admin = kafka.KafkaAdminClient(**common)
    admin.describe_topics([TOPIC])
    admin.describe_cluster()
    admin.close()


async def aiokafka_session(bootstrap: str) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="aiokafka",
                                         enable_idempotence=True)
    await producer.start()
    await producer.send_and_wait(TOPIC, key=b"aio", value=b"aio")
    await producer.stop()
    consumer = aiokafka.AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap,
                                         client_id="aiokafka", group_id=GROUP + "-aio",
                                         auto_offset_reset="earliest", enable_auto_commit=False,
                                         heartbeat_interval_ms=100)
    await consumer.start()
    await consumer.getmany(timeout_ms=2000)
    await consumer.commit()
    await consumer.stop()


def main(output: str) -> None:
    corpus, seen = [], defaultdict(int)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "server.properties"
        config.write_text("group.initial.rebalance.delay.ms=0\n")
        with BrokerProcess(Path(tmp) / "data", config_file=str(config)) as broker:
            sessions = [("confluent-kafka", confluent_session),
                        ("kafka-python", kafka_python_session),
                        ("aiokafka", lambda b: asyncio.run(aiokafka_session(b)))]
            for client, session in sessions:
                with KafkaCaptureProxy(broker.bootstrap_servers) as proxy:
                    session(proxy.bootstrap)
                for frame in proxy.requests():
                    shape = (client, frame.api_key, frame.api_version)
                    if len(frame.data) > MAX_FRAME_BYTES or seen[shape] >= FRAMES_PER_VERSION:
                        continue
                    seen[shape] += 1
                    corpus.append({"client": client, "api": APIS[frame.api_key].name,
                                   "version": frame.api_version, "frame": frame.data.hex()})
    Path(output).write_text(json.dumps(corpus, indent=0) + "\n")
    apis = sorted({(entry["api"], entry["version"]) for entry in corpus})
    print(f"{len(corpus)} frames, {len(apis)} API versions: {apis}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "tests" / "fuzz_corpus.json"))
