"""1. Produce: acks=all/1 x 1/8 partitions x none/lz4, with confluent-kafka's Producer and
with kcat -P, into a fresh topic per run; records/s, MB/s, broker CPU and peak RSS."""

from __future__ import annotations

import os
import time
import uuid

from bench.common import (KCAT, MB, VALUE_SIZE, Probe, Sizes, median_run, page_cache_write_cpu,
                          producer_config, run_bounded, watermarks)


def produce_python(bootstrap: str, topic: str, records: int, pool: list[bytes], acks: str,
                   compression: str, timeout: float, settings: dict | None = None) -> None:
    """`settings`: more client settings (security)."""
    from confluent_kafka import Producer

    errors = []
    producer = Producer({**producer_config(bootstrap, acks, compression), **(settings or {}), "log_level": 3,
                         "error_cb": errors.append})
    produce, poll, mask = producer.produce, producer.poll, len(pool) - 1
    deadline = time.monotonic() + timeout
    i = 0
    while i < records:
        try:
            produce(topic, pool[i & mask])
            i += 1
        except BufferError:  # the local queue is full: serve delivery reports and retry
            poll(0.005)
            if time.monotonic() > deadline:
                raise TimeoutError(f"produce: {i} of {records} records queued after {timeout:g} s")
        else:
            if i & 0x3FFF == 0:
                poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left:
        raise TimeoutError(f"produce: {left} records undelivered after {timeout:g} s ({errors[:3]})")


def kcat_records_file(path: str, records: int, pool: list[bytes]) -> None:
    """`records` lines of 100 bytes (the same values as the Python producer's)."""
    mask = len(pool) - 1
    block = b"".join(v + b"\n" for v in pool)
    with open(path, "wb") as f:
        full, rest = divmod(records, len(pool))
        for _ in range(full):
            f.write(block)
        f.write(b"".join(pool[i & mask] + b"\n" for i in range(rest)))


def produce_kcat(bootstrap: str, topic: str, path: str, acks: str, compression: str,
                 timeout: float, settings: dict | None = None) -> None:
    args = [KCAT, "-P", "-q", "-b", bootstrap, "-t", topic, "-l", path]
    for key, value in {**producer_config(bootstrap, acks, compression), **(settings or {})}.items():
        if key not in ("bootstrap.servers", "compression.type"):
            args += ["-X", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    if compression != "none":
        args += ["-z", compression]
    run_bounded(args, timeout)


def bench_produce(targets, sizes: Sizes, pool, workdir: str, log) -> list[dict]:
    path = os.path.join(workdir, "records.txt")
    kcat_records_file(path, sizes.records, pool)
    rows = []
    for client in ("python", "kcat"):
        for acks in ("all", "1"):
            for partitions in (1, 8):
                for compression in ("none", "lz4"):
                    runs = {target.name: [] for target in targets}
                    for _ in range(sizes.produce_repeats):  # alternating: load drifts hit both
                        for target in targets:
                            runs[target.name].append(produce_once(target, client, acks, partitions,
                                                                  compression, sizes, pool, path))
                    for target in targets:
                        m = median_run(runs[target.name])
                        row = {"client": client, "acks": acks, "partitions": partitions,
                               "compression": compression, "broker": target.name,
                               "records": sizes.records, "repeats": len(runs[target.name]),
                               "records_per_s": sizes.records / m["seconds"],
                               "mb_per_s": sizes.records * VALUE_SIZE / m["seconds"] / MB,
                               "all_seconds": [r["seconds"] for r in runs[target.name]],
                               "all_written": [r["written"] for r in runs[target.name]], **m}
                        short = [w for w in row["all_written"] if w != sizes.records]
                        rows.append(row)
                        log(f"  produce {client:6} acks={acks:3} {partitions}p {compression:4} "
                            f"{target.name:6}: {row['records_per_s']:10,.0f} rec/s "
                            f"{row['mb_per_s']:6.1f} MB/s cpu {m['broker_cpu_s']:5.2f}s "
                            f"rss {m['broker_peak_rss_mib']:6.0f} MiB"
                            + (f"  (high watermarks sum {short}, not {sizes.records})" if short else ""))
    os.remove(path)
    return rows


def produce_once(target, client: str, acks: str, partitions: int, compression: str,
                 sizes: Sizes, pool, path: str) -> dict:
    """One produce run into a fresh topic (deleted afterwards): the Probe's figures, the
    records the broker reports written (sum of high watermarks) and, for Sluice, the
    CPU this process spends writing as many bytes as the topic's log holds into a file
    beside it (bench.common.page_cache_write_cpu)."""
    topic = f"produce-{client}-{acks}-{partitions}-{compression}-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: partitions})
    os.sync()  # the previous runs' dirty pages written back now, not during this run
    probe = Probe(target.pid)
    if client == "python":
        produce_python(target.bootstrap, topic, sizes.records, pool, acks, compression,
                       sizes.step_timeout)
    else:
        produce_kcat(target.bootstrap, topic, path, acks, compression, sizes.step_timeout)
    m = probe.stop()
    m["written"] = sum(high for _, high in watermarks(target.bootstrap, topic, partitions))
    if target.name == "sluice":  # what writing its log into the page cache costs at least
        m["log_bytes"] = target.log_bytes(topic)
        m["page_cache_user_s"], m["page_cache_sys_s"] = page_cache_write_cpu(target.data_dir, m["log_bytes"])
    target.delete_topic(topic)
    return m

