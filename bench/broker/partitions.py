"""6. Many partitions: creating them, Metadata time, produce rate and broker RSS. The
produce rate is split too: the first record of every partition (a round acknowledged
before the next: where a broker makes a partition's files on its first write), then the
rest."""

from __future__ import annotations

import statistics
import time

from bench.common import VALUE_SIZE, Probe, Sizes, memory_kib, producer_config


def bench_partitions(makes, workdir: str, sizes: Sizes, log) -> list[dict]:
    from confluent_kafka import Consumer, Producer

    from sluice_client import Client

    per_topic = sizes.many_partitions_per_topic
    topics = {f"many-{t:04d}": per_topic for t in range(max(1, sizes.many_partitions // per_topic))}
    partitions = sum(topics.values())
    rows = []
    from bench.kafka_broker import KafkaUnavailable

    for make in makes:
        try:
            target = make(workdir, sizes).start()  # a fresh broker: its RSS is these partitions'
        except KafkaUnavailable as e:
            log(f"  {make.name}: not measured, KAFKA UNAVAILABLE: {e}")
            continue
        try:
            rss_before = memory_kib(target.pid, "VmRSS")
            started = time.perf_counter()
            target.create_topics(topics)
            create_s = time.perf_counter() - started
            consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "bench-md",
                                 "log_level": 3})
            confluent_ms, wire_ms = [], []
            try:
                with Client(target.bootstrap, call_timeout=sizes.step_timeout) as client:
                    for _ in range(sizes.metadata_samples):
                        t0 = time.perf_counter()
                        listed = consumer.list_topics(timeout=sizes.step_timeout)
                        confluent_ms.append((time.perf_counter() - t0) * 1e3)
                        t0 = time.perf_counter()
                        metadata = client.metadata()
                        wire_ms.append((time.perf_counter() - t0) * 1e3)
                seen = sum(len(listed.topics[t].partitions) for t in topics if t in listed.topics)
                if seen != partitions or sum(len(metadata.topics[t].partitions) for t in topics) != partitions:
                    raise RuntimeError(f"{target.name}: metadata shows {seen} of {partitions} partitions")
            finally:
                consumer.close()
            records = partitions * sizes.many_records_per_partition
            probe = Probe(target.pid)
            producer = Producer({**producer_config(target.bootstrap, "all", "none"), "log_level": 3})
            deadline = time.monotonic() + sizes.step_timeout
            first_round_s = None
            for round_ in range(sizes.many_records_per_partition):
                if round_ == 1:  # the first record of every partition is acknowledged
                    if producer.flush(max(1.0, deadline - time.monotonic())):
                        raise TimeoutError("many partitions: records undelivered")
                    first_round_s = time.perf_counter() - probe.t0
                for topic in topics:
                    for p in range(per_topic):
                        while True:
                            try:
                                producer.produce(topic, b"v" * VALUE_SIZE, partition=p)
                                break
                            except BufferError:
                                producer.poll(0.005)
                                if time.monotonic() > deadline:
                                    raise TimeoutError("many partitions: producer stuck")
            if producer.flush(max(1.0, deadline - time.monotonic())):
                raise TimeoutError("many partitions: records undelivered")
            m = probe.stop()
            del producer  # destroyed now, not after its broker stopped (no reconnect noise)
            row = {"broker": target.name, "partitions": partitions, "topics": len(topics),
                   "create_s": create_s,
                   "metadata_confluent_ms": statistics.median(confluent_ms),
                   "metadata_wire_ms": statistics.median(wire_ms),
                   "records": records, "records_per_s": records / m["seconds"],
                   "first_round_s": first_round_s,
                   "rest_records_per_s": first_round_s and (records - partitions) / (m["seconds"] - first_round_s),
                   "rss_before_mib": rss_before / 1024,
                   "rss_after_mib": memory_kib(target.pid, "VmRSS") / 1024, **m}
            rows.append(row)
            log(f"  {partitions} partitions {target.name:6}: create {create_s:.2f} s, metadata "
                f"{row['metadata_confluent_ms']:.1f} ms (confluent) {row['metadata_wire_ms']:.1f} ms "
                f"(wire), produce {row['records_per_s']:,.0f} rec/s (first record of each partition "
                f"{first_round_s or 0:.2f} s, the rest {row['rest_records_per_s'] or 0:,.0f} rec/s), "
                f"RSS {row['rss_after_mib']:.0f} MiB")
        finally:
            target.stop()
    return rows

