"""What security costs: produce and consume throughput over SSL and SASL_SSL (SCRAM-SHA-512)
against PLAINTEXT, on Sluice and on Apache Kafka, side by side in one run.

Each broker in turn serves three listeners (PLAINTEXT, SSL, SASL_SSL), its certificate
from a throwaway CA (trustme), with a SCRAM-SHA-512 user (confluent-kafka authenticates
with it; kcat with PLAIN, see SecuredBroker.settings). The same clients as bench.broker
(confluent-kafka's Producer and Consumer, kcat) run over each listener in turn, repeats
taking turns; the median run counts. The issue's goal: Sluice over SASL_SSL at least 0.7x
its PLAINTEXT for produce and consume; Sluice against Kafka over SASL_SSL is reported
too. Nothing here asserts speed.

    python -m bench.security [--quick] [--no-kafka] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shutil
import tempfile
import time
import uuid

from bench.broker.consume import consume_kcat, consume_python
from bench.broker.produce import kcat_records_file, produce_kcat, produce_python
from bench.common import (DEFAULT_OUT, MB, VALUE_SIZE, Probe, _loads, client_versions, median_run, publish,
                          value_pool, watermarks)
from bench.machine import describe_machine, machine_details

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
CLIENTS = ("python", "kcat")
USER, PASSWORD, MECHANISM = "bench", "bench-secret", "SCRAM-SHA-512"
PLAIN_USER, PLAIN_PASSWORD = "bench-plain", "bench-plain-secret"
GOAL = 0.7  # SASL_SSL / PLAINTEXT


@dataclasses.dataclass(frozen=True)
class Sizes:
    records: int          # produced per run (one partition, acks=all, no compression)
    consume_records: int  # in the 8-partition topic read from the beginning per run
    repeats: int          # runs per client and listener, taking turns; the median counts
    timeout: float


FULL = Sizes(records=2_000_000, consume_records=320_000, repeats=3, timeout=600.0)
QUICK = Sizes(records=200_000, consume_records=40_000, repeats=1, timeout=300.0)


class SecuredBroker:
    """A broker with PLAINTEXT, SSL and SASL_SSL listeners, its certificate from a throwaway
    CA, and the client settings of each listener."""

    name: str

    def __init__(self, workdir: str):
        import trustme

        self.dir = os.path.join(workdir, f"{self.name}-{uuid.uuid4().hex[:6]}")
        os.makedirs(self.dir)
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_path = os.path.join(self.dir, "ca.pem")
        self.key_path = os.path.join(self.dir, "broker.pem")  # the key (PKCS#8, as Kafka reads) and chain
        ca.cert_pem.write_to_path(self.ca_path)
        with open(self.key_path, "wb") as f:
            f.write(_pkcs8(leaf.private_key_pem.bytes()) + b"".join(p.bytes() for p in leaf.cert_chain_pems))
        self.plain_jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                           f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";')

    def bootstrap(self, protocol: str) -> str:
        raise NotImplementedError

    def settings(self, protocol: str, client: str) -> tuple[str, dict]:
        """(bootstrap, librdkafka settings) of one listener for one client. kcat (Debian's,
        on librdkafka 2.0.2) authenticates with PLAIN: librdkafka before 2.6.1 sends a
        SCRAM client-final nonce that RFC 5802 (and Kafka 4, and Sluice) refuse."""
        settings = {"security.protocol": protocol}
        if protocol != "PLAINTEXT":
            settings["ssl.ca.location"] = self.ca_path
        if protocol == "SASL_SSL":
            mechanism, user, password = (MECHANISM, USER, PASSWORD) if client == "python" else \
                ("PLAIN", PLAIN_USER, PLAIN_PASSWORD)
            settings.update({"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password})
        return self.bootstrap(protocol), settings

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap("PLAINTEXT"), "log_level": 3})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def _pkcs8(key_pem: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(key_pem, None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class SecuredSluice(SecuredBroker):
    """`python -m broker`; its SCRAM user made over the wire with AlterUserScramCredentials."""

    name = "sluice"

    def __init__(self, workdir: str):
        from sluice.broker_process import BrokerProcess

        super().__init__(workdir)
        config = os.path.join(self.dir, "server.properties")
        with open(config, "w") as f:
            f.write("listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0\n"
                    "inter.broker.listener.name=PLAINTEXT\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={self.key_path}\n"
                    f"sasl.enabled.mechanisms={MECHANISM},PLAIN\nnum.partitions=1\n"
                    f"listener.name.sasl_ssl.plain.sasl.jaas.config={self.plain_jaas}\n")
        self.process = BrokerProcess(os.path.join(self.dir, "data"), config_file=config)

    def start(self) -> "SecuredSluice":
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        self.process.start(timeout=60)
        admin = AdminClient({"bootstrap.servers": self.bootstrap("PLAINTEXT")})
        upsertion = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                                 PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(30)
        return self

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    def bootstrap(self, protocol: str) -> str:
        return self.process.bootstrap(protocol)

    def stop(self) -> None:
        self.process.stop(60)


class SecuredKafka(SecuredBroker):
    """Apache Kafka (bench.kafka_broker), KRaft, its SCRAM user added when its storage is
    formatted."""

    name = "kafka"

    def __init__(self, workdir: str):
        from bench.kafka_broker import KafkaBrokerProcess

        super().__init__(workdir)
        self.process = KafkaBrokerProcess(self.dir, listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL"}, config={
            "ssl.keystore.type": "PEM", "ssl.keystore.location": self.key_path,
            "sasl.enabled.mechanisms": f"{MECHANISM},PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": self.plain_jaas,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"})

    def start(self) -> "SecuredKafka":
        self.process.format(extra_args=["--add-scram", f"{MECHANISM}=[name={USER},password={PASSWORD}]"])
        self.process.start()
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def bootstrap(self, protocol: str) -> str:
        return self.process.bootstrap_servers if protocol == "PLAINTEXT" else self.process.bootstrap(protocol)

    def stop(self) -> None:
        self.process.stop(60)


def bench_produce(broker, sizes: Sizes, pool, path: str, log) -> list[dict]:
    rows = []
    for client in CLIENTS:
        runs = {p: [] for p in PROTOCOLS}
        for _ in range(sizes.repeats):
            for protocol in PROTOCOLS:
                bootstrap, settings = broker.settings(protocol, client)
                topic = f"produce-{client}-{protocol.lower()}-{uuid.uuid4().hex[:6]}"
                broker.create_topic(topic, 1)
                os.sync()
                probe = Probe(broker.pid)
                if client == "python":
                    produce_python(bootstrap, topic, sizes.records, pool, "all", "none", sizes.timeout, settings)
                else:
                    produce_kcat(bootstrap, topic, path, "all", "none", sizes.timeout, settings)
                run = probe.stop()
                run["written"] = sum(high for _, high in watermarks(broker.bootstrap("PLAINTEXT"), topic, 1))
                runs[protocol].append(run)
        rows += median_rows(broker.name, "produce", client, runs, sizes.records, log)
    return rows


def median_rows(broker: str, benchmark: str, client: str, runs: dict[str, list[dict]], records: int,
                log) -> list[dict]:
    """One row per listener: the median of its runs, with every run's seconds (and
    records written, for produce)."""
    rows = []
    for protocol in PROTOCOLS:
        m = median_run(runs[protocol])
        row = {"broker": broker, "benchmark": benchmark, "client": client, "protocol": protocol,
               "records": records, "records_per_s": records / m["seconds"],
               "mb_per_s": records * VALUE_SIZE / m["seconds"] / MB,
               "all_seconds": [r["seconds"] for r in runs[protocol]], **m}
        if "written" in m:
            row["all_written"] = [r["written"] for r in runs[protocol]]
        rows.append(row)
        log(f"  {broker:6} {benchmark} {client:6} {protocol:10}: {row['records_per_s']:10,.0f} rec/s "
            f"{row['mb_per_s']:6.1f} MB/s broker cpu {m['broker_cpu_s']:5.2f} s")
    return rows


def bench_consume(broker, sizes: Sizes, pool, log) -> list[dict]:
    topic = f"consume-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 8)
    produce_python(broker.bootstrap("PLAINTEXT"), topic, sizes.consume_records, pool, "all", "none", sizes.timeout)
    rows = []
    for client in CLIENTS:
        runs = {p: [] for p in PROTOCOLS}
        for _ in range(sizes.repeats):
            for protocol in PROTOCOLS:
                bootstrap, settings = broker.settings(protocol, client)
                probe = Probe(broker.pid)
                if client == "python":
                    consume_python(bootstrap, topic, 8, sizes.consume_records, sizes.timeout, settings)
                else:
                    consume_kcat(bootstrap, topic, sizes.consume_records, sizes.timeout, config=settings)
                runs[protocol].append(probe.stop())
        rows += median_rows(broker.name, "consume", client, runs, sizes.consume_records, log)
    return rows


def _pick(rows, **match) -> dict | None:
    return next((r for r in rows if all(r[k] == v for k, v in match.items())), None)


def targets(rows: list[dict]) -> list[dict]:
    """Sluice's SASL_SSL / PLAINTEXT per benchmark and client against the goal, and Sluice
    against Kafka over SASL_SSL where Kafka ran; met or not, never asserted."""
    out = []
    for benchmark in ("produce", "consume"):
        for client in CLIENTS:
            secured = _pick(rows, broker="sluice", benchmark=benchmark, client=client, protocol="SASL_SSL")
            plain = _pick(rows, broker="sluice", benchmark=benchmark, client=client, protocol="PLAINTEXT")
            if secured and plain:
                ratio = secured["records_per_s"] / plain["records_per_s"]
                out.append({"target": f"{benchmark} over SASL_SSL >= {GOAL}x PLAINTEXT, {client}", "ratio": ratio,
                            "met": ratio >= GOAL, "detail": f"{secured['records_per_s']:,.0f} vs "
                                                          f"{plain['records_per_s']:,.0f} rec/s"})
            kafka = _pick(rows, broker="kafka", benchmark=benchmark, client=client, protocol="SASL_SSL")
            if secured and kafka:
                ratio = secured["records_per_s"] / kafka["records_per_s"]
                out.append({"target": f"{benchmark} over SASL_SSL >= 1.0x Kafka, {client}", "ratio": ratio,
                            "met": ratio >= 1.0, "detail": f"{secured['records_per_s']:,.0f} vs "
                                                         f"{kafka['records_per_s']:,.0f} rec/s"})
    return out


def markdown(results: dict) -> str:
    sizes = results["sizes"]
    kafka = results["kafka"]
    md = [f"# Security benchmark: SSL and SASL_SSL vs PLAINTEXT, Sluice and Apache Kafka ({results['mode']})", "",
          f"- date: {results['date']}", f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} (librdkafka "
          f"{results['clients']['librdkafka']}), {results['clients']['kcat']}",
          "- kafka: " + (f"Apache Kafka {kafka['version']}, one KRaft node (bench.kafka_broker)" if kafka["included"]
                         else f"NOT IN THIS RUN: {kafka['unavailable']}"),
          f"- sizes: produce {sizes['records']:,} records of {VALUE_SIZE} bytes into one partition (acks=all, "
          f"no compression, linger.ms=5, batch.size=1000000); consume {sizes['consume_records']:,} records "
          f"from 8 partitions from a cold start; {sizes['repeats']} run(s) per client and listener, taking "
          f"turns, the median kept",
          f"- run time: {results['seconds']:.0f} s; load average before {_loads(results, 'before')}, "
          f"after {_loads(results, 'after')}", "",
          "## Targets", "", "| target | ratio | verdict | detail |", "|---|---:|---|---|"]
    md += [f"| {t['target']} | {t['ratio']:.2f}x | {'met' if t['met'] else 'NOT met'} | {t['detail']} |"
           for t in results["targets"]]
    md += ["", "## Figures", "",
           "| broker | benchmark | client | listener | rec/s | MB/s | vs its PLAINTEXT | broker CPU s |",
           "|---|---|---|---|---:|---:|---:|---:|"]
    for r in results["rows"]:
        base = _pick(results["rows"], broker=r["broker"], benchmark=r["benchmark"], client=r["client"],
                     protocol="PLAINTEXT")
        md.append(f"| {r['broker']} | {r['benchmark']} | {r['client']} | {r['protocol']} | "
                  f"{r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} | "
                  f"{r['records_per_s'] / base['records_per_s']:.2f}x | {r['broker_cpu_s']:.2f} |")
    md += ["", "## Method", "",
           "- Each broker is a process of its own on 127.0.0.1 with three listeners: PLAINTEXT, SSL and "
           "SASL_SSL; TLS with a certificate from a throwaway CA (trustme). The brokers run one after the "
           "other, never at once.",
           f"- SASL: confluent-kafka authenticates with {MECHANISM} (4096 iterations; Sluice's user made with "
           "AlterUserScramCredentials, Kafka's at storage format), kcat with PLAIN, because its librdkafka "
           "(before 2.6.1) sends a SCRAM nonce RFC 5802 refuses.",
           "- Sluice's TLS connections cannot use sendfile: fetched file regions go through the TLS layer.",
           "- The page cache is written back (sync) before each produce run. Broker CPU: user + system "
           "time from /proc."]
    return "\n".join(md) + "\n"


def run(sizes: Sizes, mode: str, log=print, with_kafka: bool = True) -> dict:
    from bench.kafka_broker import KafkaUnavailable, version

    results = {"mode": mode, "date": datetime.date.today().isoformat(), "machine": machine_details(),
               "clients": client_versions(), "load_average_before": os.getloadavg(),
               "sizes": dataclasses.asdict(sizes),
               "kafka": {"included": False, "version": None,
                         "unavailable": None if with_kafka else "left out (--no-kafka)"}}
    workdir = tempfile.mkdtemp(prefix="sluice-bench-security-")
    started = time.perf_counter()
    pool = value_pool()
    rows = []
    try:
        path = os.path.join(workdir, "records.txt")
        kcat_records_file(path, sizes.records, pool)
        for make in (SecuredSluice, SecuredKafka) if with_kafka else (SecuredSluice,):
            broker = make(workdir)
            try:
                broker.start()
            except KafkaUnavailable as exc:
                results["kafka"]["unavailable"] = str(exc)
                log(f"  KAFKA UNAVAILABLE: {exc}")
                broker.stop()
                continue
            try:
                log(f"{broker.name}: produce")
                rows += bench_produce(broker, sizes, pool, path, log)
                log(f"{broker.name}: consume")
                rows += bench_consume(broker, sizes, pool, log)
            finally:
                broker.stop()
            if broker.name == "kafka":
                results["kafka"].update(included=True, version=version())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results.update(rows=rows, targets=targets(rows), seconds=time.perf_counter() - started,
                   load_average_after=os.getloadavg())
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.security", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--no-kafka", action="store_true", help="Sluice only")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    print(f"machine: {describe_machine()}")
    results = run(QUICK if args.quick else FULL, "quick" if args.quick else "full",
                  lambda line: print(line, flush=True), with_kafka=not args.no_kafka)
    publish("security", results, markdown(results), None if args.no_write else args.out)


if __name__ == "__main__":
    main()
