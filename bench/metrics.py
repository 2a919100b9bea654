"""What the Prometheus metrics cost (broker.metrics): the time of a /metrics scrape on a
broker with many partitions and groups, and what counting adds to every request.

1. Scrape: one broker of this tree with `metrics.port`, holding `partitions` partitions
   (topics of 100) each with data, and `groups` consumer groups each with an offset
   committed on every partition (so the scrape carries a log size, offsets and a lag per
   partition and group). `scrapes` GETs of /metrics one after another over one keep-alive
   connection, as Prometheus scrapes: p50/p99/max milliseconds, response bytes and
   sample lines. Meanwhile a client sends ApiVersions requests one after another: their
   p99 and max answer times against a stretch of the same length without scrapes show
   how long a scrape holds the broker's event loop (the families are collected on it;
   the text is formatted on a worker thread).
2. Overhead: small produce requests (confluent-kafka, one record per request:
   batch.num.messages=1, acks=1) into one partition, against this tree's broker with
   metrics off and on (on: scraped every second meanwhile), and with `--base REV` against
   that revision's broker (exported and compiled as bench.compare does): broker CPU
   microseconds per request and requests/s, the brokers taking turns, the median of
   `repeats` runs kept. Only same-run figures compare: the machine is shared.

    python -m bench.metrics [--quick] [--base REV] [--out DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import http.client
import multiprocessing
import os
import socket
import statistics
import struct
import tempfile
import threading
import time
import uuid

from bench.common import DEFAULT_OUT, REPO, Probe, _fmt, _loads, client_versions, publish
from bench.e2e_consumer import percentile
from bench.machine import describe_machine, machine_details
from sluice.broker_process import BrokerProcess

TOPIC_PARTITIONS = 100


@dataclasses.dataclass(frozen=True)
class Sizes:
    partitions: int      # holding data, in topics of TOPIC_PARTITIONS
    groups: int          # each with an offset committed on every partition
    scrapes: int
    requests: int        # small produce requests per overhead run
    repeats: int         # overhead runs per broker, taking turns
    timeout: float


FULL = Sizes(partitions=1000, groups=5, scrapes=200, requests=20_000, repeats=3, timeout=300.0)
QUICK = Sizes(partitions=1000, groups=3, scrapes=50, requests=5_000, repeats=1, timeout=300.0)


class MetricsBroker:
    """A broker process of `source_dir`'s tree; with `metrics`, its endpoint on a free port."""

    def __init__(self, workdir: str, name: str, metrics: bool, source_dir: str = REPO):
        self.name = name
        directory = os.path.join(workdir, f"{name}-{uuid.uuid4().hex[:6]}")
        os.makedirs(directory)
        config = os.path.join(directory, "server.properties")
        with open(config, "w") as f:
            f.write("group.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=10\n"
                    + ("metrics.port=0\n" if metrics else ""))
        self.process = BrokerProcess(os.path.join(directory, "data"), config_file=config, source_dir=source_dir)
        self.metrics_port: int | None = None

    def start(self) -> "MetricsBroker":
        self.process.start(timeout=60)
        self.metrics_port = self.process.metrics_port
        return self

    def stop(self) -> None:
        self.process.stop()

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap_servers


def fill(broker: MetricsBroker, sizes: Sizes) -> int:
    """Topics of TOPIC_PARTITIONS partitions up to `sizes.partitions`, one small record in
    each partition, and `sizes.groups` groups committing offset 1 on every partition;
    the records written."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = [f"bench-{i:03d}" for i in range(-(-sizes.partitions // TOPIC_PARTITIONS))]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, TOPIC_PARTITIONS, 1) for t in topics]).values():
        future.result(sizes.timeout)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    partitions = [(t, p) for t in topics for p in range(TOPIC_PARTITIONS)][:sizes.partitions]
    for topic, partition in partitions:
        producer.produce(topic, b"x" * 100, partition=partition)
    if producer.flush(sizes.timeout):
        raise TimeoutError("the records to fill the partitions were not all delivered")
    for g in range(sizes.groups):
        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-group-{g}",
                              "enable.auto.commit": False})
        try:
            committer.commit(offsets=[TopicPartition(t, p, 1) for t, p in partitions], asynchronous=False)
        finally:
            committer.close()
    return len(partitions)


def _quantile_ms(seconds: list[float], q: float) -> float:
    return 1000 * percentile(sorted(seconds), q)


def _ping(port: int, stop, results) -> None:
    """ApiVersions v0 requests one after another on one connection until `stop` is set;
    `results` (a pipe) gets "ready" after the first answer, every answer's seconds at the end."""
    request = struct.pack(">ihhih", 10, 18, 0, 1, -1)  # size, ApiVersions v0, correlation 1, no client id
    seconds = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        reader = sock.makefile("rb")
        while not stop.is_set() and len(seconds) < 10_000_000:
            started = time.perf_counter()
            sock.sendall(request)
            reader.read(struct.unpack(">i", reader.read(4))[0])
            seconds.append(time.perf_counter() - started)
            if len(seconds) == 1:
                results.send("ready")
    results.send(seconds)


class _Pinger:
    """`_ping` in a process of its own while the block lasts, so that this process'
    threads and work (reading scrapes) do not delay its requests."""

    def __init__(self, port: int):
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._results, sending = context.Pipe(duplex=False)
        self._process = context.Process(target=_ping, args=(port, self._stop, sending), daemon=True)
        self.seconds: list[float] = []

    def __enter__(self) -> "_Pinger":
        self._process.start()
        if not self._results.poll(60) or self._results.recv() != "ready":
            raise RuntimeError("the ApiVersions client did not start")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._results.poll(60):
            self.seconds = self._results.recv()
        self._process.join(30)
        if not self.seconds:
            raise RuntimeError("the ApiVersions client measured nothing")


def bench_scrape(workdir: str, sizes: Sizes, log) -> dict:
    broker = MetricsBroker(workdir, "scrape", metrics=True).start()
    try:
        written = fill(broker, sizes)
        connection = http.client.HTTPConnection("127.0.0.1", broker.metrics_port, timeout=sizes.timeout)
        seconds, size, lines = [], 0, 0
        probe = Probe(broker.process.proc.pid)
        with _Pinger(broker.process.port) as during:
            for _ in range(sizes.scrapes):
                started = time.perf_counter()
                connection.request("GET", "/metrics")
                response = connection.getresponse()
                body = response.read()
                seconds.append(time.perf_counter() - started)
                if response.status != 200:
                    raise RuntimeError(f"GET /metrics answered {response.status}")
                size = len(body)
                lines = body.count(b"\n") - body.count(b"\n#") - body.startswith(b"#")
        cpu = probe.stop()["broker_cpu_s"]
        connection.close()
        quiet_until = time.monotonic() + sum(seconds)
        with _Pinger(broker.process.port) as quiet:
            while time.monotonic() < quiet_until:
                time.sleep(0.05)
    finally:
        broker.stop()
    row = {"partitions": written, "groups": sizes.groups, "scrapes": sizes.scrapes,
           "p50_ms": _quantile_ms(seconds, 0.5), "p99_ms": _quantile_ms(seconds, 0.99),
           "max_ms": 1000 * max(seconds), "response_bytes": size, "samples": lines,
           "broker_cpu_ms_per_scrape": 1000 * cpu / sizes.scrapes,
           "ping_p99_ms_scraping": _quantile_ms(during.seconds, 0.99),
           "ping_max_ms_scraping": 1000 * max(during.seconds),
           "ping_p99_ms_quiet": _quantile_ms(quiet.seconds, 0.99),
           "ping_max_ms_quiet": 1000 * max(quiet.seconds)}
    log(f"  scrape: p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, {size:,} bytes, "
        f"{lines:,} samples; ApiVersions p99/max {row['ping_p99_ms_scraping']:.2f}/"
        f"{row['ping_max_ms_scraping']:.1f} ms while scraped, {row['ping_p99_ms_quiet']:.2f}/"
        f"{row['ping_max_ms_quiet']:.1f} ms without")
    return row


def produce_small(bootstrap: str, topic: str, requests: int, timeout: float) -> None:
    """`requests` records, each its own produce request (batch.num.messages=1)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0,
                         "batch.num.messages": 1, "max.in.flight.requests.per.connection": 5})
    deadline = time.monotonic() + timeout
    for i in range(requests):
        while True:
            try:
                producer.produce(topic, b"%099d" % i, partition=0)
                break
            except BufferError:
                producer.poll(0.005)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"produce: {i} of {requests} queued after {timeout:g} s") from None
        producer.poll(0)
    if producer.flush(max(1.0, deadline - time.monotonic())):
        raise TimeoutError(f"produce: records undelivered after {timeout:g} s")


class _Scraper:
    """GET /metrics every second while a run lasts, as Prometheus would."""

    def __init__(self, port: int):
        self._port = port
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.scrapes = 0

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=10)
            try:
                connection.request("GET", "/metrics")
                connection.getresponse().read()
                self.scrapes += 1
            finally:
                connection.close()

    def __enter__(self) -> "_Scraper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)


def bench_overhead(workdir: str, sizes: Sizes, base: str | None, log) -> list[dict]:
    brokers = [MetricsBroker(workdir, "metrics-off", metrics=False),
               MetricsBroker(workdir, "metrics-on", metrics=True)]
    if base is not None:
        from bench.compare import export_tree

        tree = export_tree(base, os.path.join(workdir, "base-tree"))
        brokers.insert(0, MetricsBroker(workdir, "base", metrics=False, source_dir=tree))
    runs: dict[str, list[dict]] = {b.name: [] for b in brokers}
    try:
        for broker in brokers:
            broker.start()
        for repeat in range(sizes.repeats):
            for broker in brokers:
                topic = f"small-{repeat}-{uuid.uuid4().hex[:6]}"
                produce_small(broker.bootstrap, topic, 10, sizes.timeout)  # topic created, connections warm
                probe = Probe(broker.process.proc.pid)
                if broker.metrics_port is not None:
                    with _Scraper(broker.metrics_port):
                        produce_small(broker.bootstrap, topic, sizes.requests, sizes.timeout)
                else:
                    produce_small(broker.bootstrap, topic, sizes.requests, sizes.timeout)
                measured = probe.stop()
                runs[broker.name].append({
                    "requests_per_s": sizes.requests / measured["seconds"],
                    "broker_cpu_us_per_request": 1e6 * measured["broker_cpu_s"] / sizes.requests})
                log(f"  {broker.name}: {runs[broker.name][-1]['requests_per_s']:,.0f} requests/s, "
                    f"{runs[broker.name][-1]['broker_cpu_us_per_request']:.1f} us of broker CPU each")
    finally:
        for broker in brokers:
            broker.stop()
    rows = []
    for name, measured in runs.items():
        rows.append({"broker": name,
                     "requests_per_s": statistics.median(r["requests_per_s"] for r in measured),
                     "broker_cpu_us_per_request": statistics.median(r["broker_cpu_us_per_request"]
                                                                    for r in measured),
                     "all": measured})
    return rows


def run(sizes: Sizes, mode: str, base: str | None = None, log=print) -> dict:
    results = {"mode": mode, "date": datetime.date.today().isoformat(), "machine": machine_details(),
               "clients": client_versions(), "sizes": dataclasses.asdict(sizes), "base": base,
               "load_average_before": os.getloadavg()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sluice-bench-metrics-") as workdir:
        log("1. scrape")
        results["scrape"] = bench_scrape(workdir, sizes, log)
        log("2. per-request overhead")
        results["overhead"] = bench_overhead(workdir, sizes, base, log)
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    return results


def markdown(results: dict) -> str:
    scrape, sizes = results["scrape"], results["sizes"]
    md = [f"# Metrics benchmark: the /metrics scrape and the cost of counting ({results['mode']})", "",
          f"- date: {results['date']}", f"- machine: {describe_machine()}",
          f"- run time: {results['seconds']:.0f} s; load average before {_loads(results, 'before')}, "
          f"after {_loads(results, 'after')}", "",
          "## 1. Scrape", "",
          f"{scrape['partitions']:,} partitions with data, {scrape['groups']} groups with an offset "
          f"committed on each; {scrape['scrapes']} scrapes one after another over one connection.", "",
          "| p50 ms | p99 ms | max ms | broker CPU ms per scrape | response bytes | samples |",
          "|---:|---:|---:|---:|---:|---:|",
          f"| {scrape['p50_ms']:.1f} | {scrape['p99_ms']:.1f} | {scrape['max_ms']:.1f} | "
          f"{scrape['broker_cpu_ms_per_scrape']:.1f} | {scrape['response_bytes']:,} | {scrape['samples']:,} |", "",
          "ApiVersions requests sent one after another meanwhile, and for as long again without scrapes "
          "(how long a scrape holds the event loop):", "",
          "| | p99 ms | max ms |", "|---|---:|---:|",
          f"| while scraped | {scrape['ping_p99_ms_scraping']:.2f} | {scrape['ping_max_ms_scraping']:.1f} |",
          f"| without scrapes | {scrape['ping_p99_ms_quiet']:.2f} | {scrape['ping_max_ms_quiet']:.1f} |", "",
          "## 2. Per-request overhead", "",
          f"{sizes['requests']:,} produce requests of one 100-byte record (acks=1) per run, "
          f"{sizes['repeats']} run(s) per broker taking turns, the median kept; metrics-on is "
          f"scraped every second meanwhile."
          + (f" base: revision {results['base']}, without metrics." if results["base"] else ""), "",
          "| broker | requests/s | broker CPU us per request | vs metrics-off |", "|---|---:|---:|---:|"]
    rows = {row["broker"]: row for row in results["overhead"]}
    off = rows["metrics-off"]["broker_cpu_us_per_request"]
    for row in results["overhead"]:
        md.append(f"| {row['broker']} | {_fmt(row['requests_per_s'])} | "
                  f"{row['broker_cpu_us_per_request']:.1f} | {row['broker_cpu_us_per_request'] / off:.3f}x |")
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer scrapes and requests")
    parser.add_argument("--base", help="also a revision's broker without metrics (e.g. the one before them)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    print(f"machine: {describe_machine()}")
    results = run(QUICK if args.quick else FULL, "quick" if args.quick else "full", args.base,
                  lambda line: print(line, flush=True))
    publish("metrics", results, markdown(results), None if args.no_write else args.out)


if __name__ == "__main__":
    main()
