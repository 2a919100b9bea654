"""The broker's Prometheus metrics: counters kept on the request paths, and an HTTP
endpoint (`metrics.port`; off by default) that answers GET /metrics in Prometheus' text
format, every other path 404.

Names follow the Prometheus JMX exporter's rules for Kafka's MBeans (its kafka-2_0_0 and
kafka-kraft-3_0_0 examples, lowercaseOutputName), so that dashboards and alerts written
for Kafka read Sluice: a meter `kafka.<domain>:type=<Type>,name=<Name>PerSec,<key>=<v>`
is the counter `kafka_<domain>_<type>_<name>_total{<key>="<v>"}`, a gauge's Value is
`kafka_<domain>_<type>_<name>{...}`, lower-cased, the MBean's keys kept as labels. A
meter Kafka keeps both per topic and for all topics is exported both ways, as the
exporter shows it: the series without a `topic` label is the broker-wide total. Exported:

- kafka_server_brokertopicmetrics_messagesin_total{topic?}: records produced by clients
  (per batch appended by a leader; the coordinators' writes to internal topics are not
  counted). bytesin_total{topic?}: their batches' bytes as stored. bytesout_total{topic?}:
  record bytes in Fetch responses to consumers; replicationbytesout_total: those to
  followers (broker-wide, as Kafka's ReplicationBytesOutPerSec); reassignmentbytesout_total
  and reassignmentbytesin_total: of those, what went to a replica a reassignment adds, and
  what this broker fetched as such a replica (broker-wide, as Kafka's
  ReassignmentBytesOutPerSec and ReassignmentBytesInPerSec). A topic's series go
  when this broker no longer holds it (deleted, or moved away), as Kafka removes a
  topic's metrics; the broker-wide totals keep its counts.
- kafka_network_requestmetrics_requests_total{request,version}: requests answered, by
  API name as Kafka spells it (Produce, Fetch, Metadata, ...; Fetch counts consumers and
  followers alike).
- kafka_network_requestmetrics_totaltimems{request}: a histogram (_bucket, _sum, _count)
  of milliseconds from the request's decoding to its response being ready, waits in
  purgatory included (a long-poll Fetch's, an acks=all Produce's); Kafka's TotalTimeMs
  also counts queueing and the network send, which here are the event loop's.
- kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation="Produce"|"Fetch"}:
  requests waiting now: acks=all produces for the followers, long-poll fetches for data.
- kafka_server_replicamanager_partitioncount, leadercount, underreplicatedpartitions
  (led partitions whose ISR is smaller than their replicas), underminisrpartitioncount,
  reassigningpartitions (led partitions being reassigned);
  kafka_server_replicamanager_isrshrinks_total and isrexpands_total (ISR changes this
  broker made as a partition's leader; 0 on the single node).
- kafka_server_leaderreplication_byte_rate and kafka_server_followerreplication_byte_rate:
  the replication throttles' rates (Kafka's LeaderReplication and FollowerReplication
  byte-rate), bytes a second of throttled replicas' replication sent as their leader and
  fetched as their follower, measured as the throttles measure them (broker.quota).
- kafka_controller_kafkacontroller_activecontrollercount: 1 on the active controller,
  0 elsewhere (the single node is its own controller: 1), so it sums to 1 over a cluster;
  offlinepartitionscount: partitions without a live leader, as the active controller
  sees them (0 elsewhere; 0 on the single node, where every partition is led).
- kafka_controller_controllerstats_leaderelectionrateandtimems: a summary (_count,
  _sum in ms) of the leader changes the active controller wrote (elections of an offline
  partition's leader, preferred and controlled-shutdown moves), with the time of each
  write.
- kafka_log_log_size{topic,partition}: bytes of the partition's segments on disk;
  logstartoffset, logendoffset, numlogsegments the same way (every local replica, the
  internal topics included, as Kafka's Log MBeans).
- kafka_server_socket_server_metrics_connection_count{listener}: open client
  connections per listener (Kafka's socket-server-metrics connection-count attribute,
  named as the exporter names it).
- kafka_server_produce_byte_rate{user,client_id} and kafka_server_fetch_byte_rate: the
  client quotas' measured rates (Kafka's Produce and Fetch byte-rate), bytes a second,
  of each quota entity (user and client id as Kafka tags it: "" for what the entity
  does not name); kafka_server_request_request_time: request_percentage's measure (the
  percentage of one handler thread's time); kafka_server_controllermutation_tokens: what
  each entity's controller_mutation_rate bucket holds. Each type's throttle_time{user,
  client_id}: the average throttle time in ms its clients were given over the quota
  windows (Kafka's throttle-time; NaN when none was given). Only clients under a quota
  are measured, so only their entities have series; an entity's go once it has been
  idle long enough to be dropped (with more than 1,024 entities measured).
- kafka_consumergroup_lag{consumergroup,topic,partition} and
  kafka_consumergroup_current_offset{...}, kafka_consumergroup_members{consumergroup}:
  Kafka brokers do not export lag; these are kafka_exporter's names. They come from the
  group coordinator, for classic and KIP-848 consumer groups alike: a group's committed offsets, on the broker coordinating it, and
  lag = the partition's high watermark - the committed offset (never below 0), for the
  partitions whose high watermark this broker knows (it holds a replica; a follower's
  may trail the leader's by a fetch). In a cluster each group is thus reported by one
  broker, its coordinator, for the partitions that broker holds: a cluster-wide view
  sums (or maxes) over brokers and may miss a partition whose replicas are all on other
  brokers than the group's coordinator.
- process_*: the broker process' CPU, memory and descriptors (prometheus_client's).

Cost: the counters are plain integers bumped once per partition batch (produce), per
Fetch response and per request (one clock read at each end and one bucket increment),
kept whether or not the endpoint is on (about 1 us of CPU per request: see
bench/results/metrics-2026-11-26.md); everything read from broker state (log sizes,
lag, purgatory, ISR) is computed at scrape time by `BrokerCollector`, on the broker's
event loop, each family in one go, so that it reads a consistent state without locks.
The registry is the broker's own, not prometheus_client's global one, so brokers in one
process do not collide.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
from collections import defaultdict
from time import perf_counter

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric,
                                    SummaryMetricFamily)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.samples import Sample
from broker.http import HttpRequest, HttpResponse, HttpServer
from wire.messages import APIS, FETCH, PRODUCE

from broker.groups.coordinator import DEAD

log = logging.getLogger("sluice.metrics")

# TotalTimeMs histogram bucket bounds (ms): a fast request takes well under a millisecond;
# a long-poll Fetch waits up to its max_wait_ms (500 by default, up to minutes).
LATENCY_BUCKETS_MS = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
# Samples formatted between two turns of the event loop (see BrokerMetrics.exposition).
FORMAT_PIECE = 250
# The purgatories exported, by the API whose requests wait there.
PURGATORIES = {PRODUCE.key: "Produce", FETCH.key: "Fetch"}


class _TopicCounts:
    __slots__ = ("messages_in", "bytes_in", "bytes_out")

    def __init__(self):
        self.messages_in = self.bytes_in = self.bytes_out = 0


class _RequestCounts:
    """One API version's requests: how many, and their total times' histogram."""

    __slots__ = ("count", "sum_ms", "buckets")

    def __init__(self):
        self.count = 0
        self.sum_ms = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)  # the last one: above every bound


class BrokerMetrics:
    """The counters kept on the request paths, and the endpoint serving them."""

    def __init__(self, broker):
        self._broker = broker
        self.topics: defaultdict[str, _TopicCounts] = defaultdict(_TopicCounts)
        self.gone = _TopicCounts()  # counts of topics no longer here (see BrokerCollector)
        self.replication_bytes_out = 0
        self.reassignment_bytes_out = 0  # of those, to replicas a reassignment adds
        self.reassignment_bytes_in = 0  # fetched as a replica a reassignment adds (the fetcher counts)
        # (api key, version) -> its requests
        self.requests: defaultdict[tuple[int, int], _RequestCounts] = defaultdict(_RequestCounts)
        self.waiting = dict.fromkeys(PURGATORIES, 0)  # api key -> requests in its purgatory
        self.server: HttpServer | None = None
        self.registry: CollectorRegistry | None = None

    # -- counting (hot paths: keep cheap) -------------------------------------------------
    def produced(self, topic: str, records: int, size: int) -> None:
        """A leader appended a client's batch of `records` records, `size` bytes."""
        counts = self.topics[topic]
        counts.messages_in += records
        counts.bytes_in += size

    def fetched(self, answered, by_id: bool, replica_id: int) -> None:
        """A Fetch response's records are sent to a consumer (`replica_id` -1) or a
        follower: `answered` holds (topic name, or id from v13, PartitionData) pairs."""
        topics = self._broker.topics
        for ref, data in answered:
            size = len(data.records) if data.records else 0
            if not size:
                continue
            topic = topics.by_id.get(ref) if by_id else topics.topics.get(ref)
            if replica_id >= 0:
                self.replication_bytes_out += size
                partition = topic.partitions.get(data.partition_index) if topic is not None else None
                if partition is not None and replica_id in partition.adding_replicas:
                    self.reassignment_bytes_out += size
            elif topic is not None:
                self.topics[topic.name].bytes_out += size

    def request_done(self, api_key: int, version: int, started: float) -> None:
        """A request decoded at perf_counter() `started` has its response ready."""
        elapsed_ms = (perf_counter() - started) * 1000.0
        counts = self.requests[(api_key, version)]
        counts.count += 1
        counts.sum_ms += elapsed_ms
        counts.buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, elapsed_ms)] += 1

    # -- the endpoint ---------------------------------------------------------------------
    async def serve(self, host: str, port: int) -> None:
        """Answer GET /metrics on host:port (0: a free port); OSError naming metrics.port
        when it cannot listen."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(self._broker))
        ProcessCollector(registry=self.registry)
        server = HttpServer(self._handle, host, port, max_body=0, max_connections=16)
        try:
            await server.start()
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise OSError(f"metrics.port: cannot listen on {host or '*'}:{port}: {reason}") from None
        self.server = server
        log.info("Prometheus metrics on http://%s:%d/metrics", host or "0.0.0.0", server.port)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

    async def _handle(self, request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return HttpResponse(404, b"not found: the metrics are at /metrics\n")
        if request.method != "GET":
            return HttpResponse(405, b"only GET /metrics\n", headers=[("allow", "GET")])
        return HttpResponse(200, await self.exposition(), content_type=CONTENT_TYPE_PLAIN_0_0_4)

    async def exposition(self) -> bytes:
        """The registry in the text format, made on the loop without holding it long:
        families are collected one after another, each in one go (a consistent view of
        what it counts), with a turn of the loop between them; formatting, which costs
        several times more (about 6 us a sample: 60 ms for 10,000), goes by pieces of
        FORMAT_PIECE samples, a turn of the loop after each (a worker thread would hold
        the GIL as long, in slices). A family's later pieces drop their HELP and TYPE
        lines, so each family keeps one, its samples together."""
        parts = []
        for family in self.registry.collect():
            for start in range(0, max(len(family.samples), 1), FORMAT_PIECE):
                piece = Metric(family.name, family.documentation, family.type, family.unit)
                piece.samples = family.samples[start:start + FORMAT_PIECE]
                text = generate_latest(_Collected([piece]))
                parts.append(text.split(b"\n", 2)[2] if start else text)
                await asyncio.sleep(0)
        return b"".join(parts)


class _Collected:
    """Families collected already, as generate_latest reads a registry."""

    def __init__(self, families: list):
        self._families = families

    def collect(self):
        return self._families


class BrokerCollector:
    """Every family of the module docstring, read from the broker at scrape time."""

    def __init__(self, broker):
        self._broker = broker

    def collect(self):
        broker = self._broker
        metrics: BrokerMetrics = broker.metrics
        yield from self._topic_counters(metrics, broker.topics.topics)
        yield from self._requests(metrics)
        purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                      "Requests waiting in the purgatory", labels=["delayedOperation"])
        for api_key, name in PURGATORIES.items():
            purgatory.add_metric([name], metrics.waiting[api_key])
        yield purgatory
        yield from self._replicas(broker)
        yield from self._controller(broker)
        yield from self._logs(broker)
        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "Open client connections", labels=["listener"])
        counts = dict.fromkeys((l.name for l in broker.config.listeners), 0)
        for conn in list(broker.server.connections):
            counts[conn.endpoint.name] = counts.get(conn.endpoint.name, 0) + 1
        for listener, count in counts.items():
            connections.add_metric([listener], count)
        yield connections
        yield from self._groups(broker)
        yield from self._client_quotas(broker)

    @staticmethod
    def _topic_counters(metrics: BrokerMetrics, local_topics):
        """Per topic while this broker holds a replica of it (a topic deleted, or moved
        away, loses its series, as Kafka removes its topic's metrics); the broker-wide
        totals keep every count."""
        for topic in [t for t in metrics.topics if t not in local_topics]:
            gone = metrics.topics.pop(topic)
            for attr in _TopicCounts.__slots__:
                setattr(metrics.gone, attr, getattr(metrics.gone, attr) + getattr(gone, attr))
        families = []
        for attr, name, doc in (("messages_in", "messagesin", "Records produced by clients"),
                                ("bytes_in", "bytesin", "Bytes of the record batches produced by clients"),
                                ("bytes_out", "bytesout", "Record bytes fetched by consumers")):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc)
            total = getattr(metrics.gone, attr)
            for topic, counts in sorted(metrics.topics.items()):
                value = getattr(counts, attr)
                total += value
                family.add_sample(family.name + "_total", {"topic": topic}, value)
            family.samples.insert(0, Sample(family.name + "_total", {}, total))
            families.append(family)
        for name, value, doc in (
                ("replicationbytesout", metrics.replication_bytes_out, "Record bytes fetched by followers"),
                ("reassignmentbytesout", metrics.reassignment_bytes_out,
                 "Record bytes fetched by replicas a reassignment adds"),
                ("reassignmentbytesin", metrics.reassignment_bytes_in,
                 "Record bytes fetched here as a replica a reassignment adds")):
            families.append(CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, value=value))
        return families

    @staticmethod
    def _requests(metrics: BrokerMetrics):
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered",
                                       labels=["request", "version"])
        by_api: dict[int, list] = {}
        for (api_key, version), counts in sorted(metrics.requests.items()):
            requests.add_metric([_api_name(api_key), str(version)], counts.count)
            merged = by_api.setdefault(api_key, [0.0, [0] * len(counts.buckets)])
            merged[0] += counts.sum_ms
            merged[1] = [a + b for a, b in zip(merged[1], counts.buckets)]
        times = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                      "Milliseconds from a request's decoding to its response",
                                      labels=["request"])
        for api_key, (sum_ms, buckets) in sorted(by_api.items()):
            cumulative, running = [], 0
            for bound, count in zip((*map(_bound, LATENCY_BUCKETS_MS), "+Inf"), buckets):
                running += count
                cumulative.append((bound, running))
            times.add_metric([_api_name(api_key)], cumulative, sum_ms)
        return [requests, times]

    @staticmethod
    def _replicas(broker):
        partitions = leaders = under_replicated = under_min_isr = reassigning = 0
        for partition in broker.topics.all_partitions():
            partitions += 1
            if partition.is_leader:
                leaders += 1
                isr = len(partition.isr)
                under_replicated += isr < len(partition.replicas)
                under_min_isr += isr < partition.config.min_insync_replicas
                reassigning += partition.is_reassigning
        for name, value, doc in (
                ("partitioncount", partitions, "Partitions with a replica on this broker"),
                ("leadercount", leaders, "Partitions this broker leads"),
                ("underreplicatedpartitions", under_replicated,
                 "Led partitions whose ISR is smaller than their replicas"),
                ("underminisrpartitioncount", under_min_isr,
                 "Led partitions whose ISR is smaller than min.insync.replicas"),
                ("reassigningpartitions", reassigning, "Led partitions being reassigned")):
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=value)
        replicas = broker.replicas
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks made as leader",
                                  value=replicas.isr_shrinks if replicas is not None else 0)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions made as leader",
                                  value=replicas.isr_expands if replicas is not None else 0)
        yield GaugeMetricFamily("kafka_server_leaderreplication_byte_rate",
                                "Bytes a second of throttled replicas sent as their leader",
                                value=broker.leader_replication_quota.rate())
        yield GaugeMetricFamily("kafka_server_followerreplication_byte_rate",
                                "Bytes a second of throttled replicas fetched as their follower",
                                value=broker.follower_replication_quota.rate())

    @staticmethod
    def _controller(broker):
        controller = broker.controller
        if broker.cluster is None:
            active, offline, elections, election_ms = 1, 0, 0, 0.0
        elif controller is None:
            active, offline, elections, election_ms = 0, 0, 0, 0.0
        else:
            active = int(controller.is_active)
            offline = controller.offline_partitions() if controller.is_active else 0
            elections, election_ms = controller.leader_elections, controller.leader_election_ms
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller", value=active)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a live leader (active controller)", value=offline)
        yield SummaryMetricFamily("kafka_controller_controllerstats_leaderelectionrateandtimems",
                                  "Leader changes written by the controller, and their ms",
                                  count_value=elections, sum_value=election_ms)

    @staticmethod
    def _logs(broker):
        families = {name: GaugeMetricFamily(f"kafka_log_log_{name}", doc, labels=["topic", "partition"])
                    for name, doc in (("size", "Bytes of the partition's log segments"),
                                      ("logstartoffset", "The log's first offset"),
                                      ("logendoffset", "The log's next offset"),
                                      ("numlogsegments", "The log's segments"))}
        size, start, end, segments = (family.samples.append for family in families.values())
        for partition in broker.topics.all_partitions():
            labels = {"topic": partition.topic, "partition": str(partition.index)}
            size(Sample("kafka_log_log_size", labels, partition.size_bytes))
            start(Sample("kafka_log_log_logstartoffset", labels, partition.log_start_offset))
            end(Sample("kafka_log_log_logendoffset", labels, partition.log_end_offset))
            segments(Sample("kafka_log_log_numlogsegments", labels, partition.segment_count))
        return families.values()

    @staticmethod
    def _groups(broker):
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark - committed offset",
                                labels=["consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset",
                                    labels=["consumergroup", "topic", "partition"])
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group",
                                    labels=["consumergroup"])
        topics = broker.topics.topics
        coordinated = set(broker.groups.runtime.coordinated.coordinated())
        groups = [g for g in broker.groups.groups.values() if g.state != DEAD] + \
            list(broker.groups.consumer_groups.groups.values())  # classic and KIP-848 ones
        for group in sorted(groups, key=lambda g: g.group_id):
            group_id = group.group_id
            if group.partition not in coordinated:
                continue
            members.add_metric([group_id], len(group.members))
            for (topic, index), committed in sorted(broker.groups.offsets.offsets_of(group_id).items()):
                labels = {"consumergroup": group_id, "topic": topic, "partition": str(index)}
                current.samples.append(Sample("kafka_consumergroup_current_offset", labels, committed.offset))
                found = topics.get(topic)
                partition = found.partitions.get(index) if found is not None else None
                if partition is not None:
                    lag.samples.append(Sample("kafka_consumergroup_lag", labels,
                                              max(partition.high_watermark - committed.offset, 0)))
        return [lag, current, members]


    @staticmethod
    def _client_quotas(broker):
        for kind, measure, doc, manager in (
                ("produce", "byte_rate", "Bytes a second produced by the quota entity's clients",
                 broker.produce_quotas),
                ("fetch", "byte_rate", "Bytes a second fetched by the quota entity's clients", broker.fetch_quotas),
                ("request", "request_time", "Percentage of a handler thread's time spent on the entity's requests",
                 broker.request_quotas),
                ("controllermutation", "tokens", "What the entity's controller mutation bucket holds",
                 broker.mutation_quotas)):
            measured = manager.measured()
            values = GaugeMetricFamily(f"kafka_server_{kind}_{measure}", doc, labels=["user", "client_id"])
            throttle = GaugeMetricFamily(f"kafka_server_{kind}_throttle_time",
                                         "Average throttle time in ms given to the entity's clients",
                                         labels=["user", "client_id"])
            for user, client_id, value, throttle_ms in measured:
                values.add_metric([user, client_id], value)
                throttle.add_metric([user, client_id], throttle_ms)
            yield values
            yield throttle


def _api_name(api_key: int) -> str:
    api = APIS.get(api_key)
    return api.name if api is not None else str(api_key)


def _bound(ms: float) -> str:
    return f"{ms:g}"
