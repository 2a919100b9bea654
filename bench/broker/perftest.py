"""1b. Kafka's own producer benchmark (org.apache.kafka.tools.ProducerPerformance) against
each broker, with the producers' record count, size and batching."""

from __future__ import annotations

import uuid

from bench.common import VALUE_SIZE, Probe, Sizes, producer_config, watermarks


PERFTEST_PARTITIONS = (1, 8)
# Kafka's Java client cannot use librdkafka's mock cluster: the mock answers its ApiVersions
# v5 request with UNSUPPORTED_VERSION in a body the client reads as throttle_time_ms=1179648,
# and the client then waits those 20 minutes before sending anything (seen with Kafka 4.4's
# client and confluent-kafka 2.16's librdkafka).
PERFTEST_SKIPPED = ("mock",)


def bench_perftest(targets, sizes: Sizes, log) -> list[dict] | dict:
    """org.apache.kafka.tools.ProducerPerformance against each broker: acks=all, the same
    record count and size and the same batching settings as the other producers. Its rate
    is its own (clock started at the first send); wall time includes the JVM's start."""
    from bench.kafka_broker import KafkaUnavailable, producer_performance

    props = {k: v for k, v in producer_config("", "all", "none").items() if k != "bootstrap.servers"}
    props = {k: str(v).lower() for k, v in props.items()}
    rows = []
    for name in PERFTEST_SKIPPED:
        if any(t.name == name for t in targets):
            log(f"  ProducerPerformance against {name}: not run (left out: bench/broker/perftest.py)")
    for partitions in PERFTEST_PARTITIONS:
        for target in targets:
            if target.name in PERFTEST_SKIPPED:
                continue
            topic = f"perftest-{partitions}-{uuid.uuid4().hex[:6]}"
            target.create_topics({topic: partitions})
            probe = Probe(target.pid)
            try:
                perf = producer_performance(target.bootstrap, topic, sizes.records, VALUE_SIZE, props,
                                            sizes.step_timeout)
            except KafkaUnavailable as e:
                log(f"  Kafka's ProducerPerformance is unavailable: {e}")
                return {"error": str(e)}
            m = probe.stop()
            written = sum(high for _, high in watermarks(target.bootstrap, topic, partitions))
            target.delete_topic(topic)
            row = {"client": "kafka-perf", "acks": "all", "partitions": partitions, "compression": "none",
                   "broker": target.name, "written": written, **m, **perf,
                   "wall_seconds": m["seconds"]}
            rows.append(row)
            log(f"  ProducerPerformance acks=all {partitions}p {target.name:6}: "
                f"{row['records_per_s']:10,.0f} rec/s {row['mb_per_s']:6.1f} MB/s, avg latency "
                f"{row['avg_latency_ms']:.0f} ms, broker cpu {m['broker_cpu_s']:5.2f}s rss "
                f"{m['broker_peak_rss_mib']:6.0f} MiB"
                + (f"  (high watermarks sum {written}, not {sizes.records})" if written != sizes.records else ""))
    return rows

