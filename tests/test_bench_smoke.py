"""The benchmarks run and report (their figures are judged by reading them, not here).
The longest (the broker's, the sink's and the comparison of two trees) run with
`make test-long`."""

import pytest

from bench.codec import run


def test_codec_benchmark_runs_and_checks_zero_copy():
    results = run(seconds=0.01)
    assert results["produce_request_bytes"] >= 1 << 20
    assert all(results[k] > 0 for k in ("produce_decode_per_s", "produce_encode_per_s",
                                        "fetch_decode_per_s", "fetch_encode_per_s"))
    assert results["machine"]["cores"] >= 1


def test_group_protocols_benchmark_runs():
    """bench.group_protocols once per protocol on Sluice: both times measured, the goal judged."""
    from bench import group_protocols

    results = group_protocols.run(group_protocols.Sizes(repeats=1, step_timeout=60.0), "tiny", ("sluice",))
    assert all(results["sluice"][p]["median_s"] > 0 for p in group_protocols.PROTOCOLS)
    assert results["goal"]["met"] in (True, False)
    assert "| Sluice |" in group_protocols.markdown_report(results)


def test_spark_read_benchmark_runs(spark):
    from bench.spark_read import run as run_spark_read

    results = run_spark_read(rows=16_000, repeats=1, spark=spark, with_kafka=False)
    assert results["rows"] == 16_000
    assert results["sluice_rows_per_s"] > 0 and results["ceiling_rows_per_s"] > 0
    # the shared session has no spark.jars: Spark's Kafka connector is reported missing, not fatal
    assert results.get("spark_kafka_rows_per_s") or "spark_kafka" in results["unavailable"]


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_spark_write_benchmark_runs_and_reports(spark, tmp_path):
    """bench.spark_write at a tiny size: every writer and the reads produce figures, the
    target is evaluated (met or not: never asserted), and both reports are written."""
    import json

    from bench import spark_write

    results = spark_write.run(rows=400, repeats=1, read_rows=16_000, read_repeats=1, spark=spark,
                              mode="tiny", read_with_kafka=False)
    assert set(results["write"]) == {key for key, _ in spark_write.WRITERS}
    for entry in results["write"].values():
        assert entry["rows_per_s"] > 0 and len(entry["all_seconds"]) == 1, entry
    assert results["write"]["confluent"]["vs_confluent"] == 1
    streaming = results["write"]["streaming_exactly_once"]["last_run"]
    assert [b["rows"] for b in streaming["batches"]] == [400]
    assert streaming["batches"][0]["tasks"] == 8 and streaming["start_ms"] > 0, streaming
    assert results["target"]["met"] in (True, False) and results["target"]["ratio"] > 0
    assert results["read"]["rows"] == 16_000 and results["read"]["sluice_rows_per_s"] > 0
    assert results["code"]["commit"]

    paths = spark_write.write_reports(results, str(tmp_path))
    assert json.loads(open(paths["json"]).read())["mode"] == "tiny"
    report = open(paths["md"]).read()
    assert "## Target" in report and "## Writes" in report and "## Reads (bench.spark_read)" in report
    assert "## Streaming copy: where the last run's time went" in report and "write stage (8 tasks" in report
    assert report.count("| sink, batch") == 2


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_broker_benchmark_runs_every_section_and_reports(tmp_path):
    """bench.broker at tiny sizes against every broker (Apache Kafka too, unless it cannot be
    resolved or started, which the results then say), with --quotas (Sluice with quotas set
    but not reached takes its turns in the produce, perftest, consume and e2e sections):
    every section produces figures for each, the targets are evaluated (met or not: never
    asserted), and the markdown, JSON and PNG reports are written."""
    import json
    import shutil

    import pytest

    pytest.importorskip("matplotlib")
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    from bench import broker
    from bench.broker.consume import CONSUME_CLIENTS
    from bench.broker.e2e import E2E_VARIANTS
    from bench.broker.perftest import PERFTEST_PARTITIONS, PERFTEST_SKIPPED
    from bench.broker.profile import PROFILE_TOP
    from bench.broker.report import cpu_splits, text_table, write_reports
    from bench.common import TINY

    results = broker.run(TINY, "tiny", log=lambda line: None, with_quotas=True)
    kafka = results["kafka"]
    assert kafka["included"] or kafka["unavailable"], kafka
    brokers = {"sluice", "mock"} | ({"kafka"} if kafka["included"] else set())
    taking_turns = brokers | {"sluice-quotas"}  # the sections every started broker runs
    assert len(results["produce"]) == 2 * 2 * 2 * 2 * len(taking_turns)  # client x acks x partitions x codec x broker
    for row in results["produce"]:
        assert row["all_written"] == [TINY.records] * row["repeats"], row
        assert row["records_per_s"] > 0 and row["broker_cpu_s"] >= 0
        assert row["broker_peak_rss_mib"] > 0
        assert abs(row["broker_user_s"] + row["broker_sys_s"] - row["broker_cpu_s"]) < 1e-9
        if row["broker"] == "sluice":  # the page-cache floor beside it
            assert row["log_bytes"] > 0 and row["page_cache_sys_s"] >= 0
    perf_brokers = taking_turns - set(PERFTEST_SKIPPED)
    if kafka["included"]:  # ProducerPerformance needs Kafka's jars too
        assert {(r["broker"], r["partitions"]) for r in results["perftest"]} == {
            (b, p) for b in perf_brokers for p in PERFTEST_PARTITIONS}
        assert all(r["written"] == TINY.records and r["records_per_s"] > 0 for r in results["perftest"])
    assert {(r["client"], r["broker"]) for r in results["consume"]} == {
        (c, b) for c in CONSUME_CLIENTS for b in taking_turns}
    assert all(r["records_per_s"] > 0 for r in results["consume"])
    assert {t["broker"] for t in results["consume_fetches"]} == taking_turns
    for timeline in results["consume_fetches"]:  # from kcat's protocol log
        assert timeline["fetches"] > 0 and timeline["mb"] > 0, timeline
        assert 0 <= timeline["waiting_ms"] and 0 <= timeline["handling_ms"] <= timeline["data_ms"]
    assert len(results["e2e"]) == len(taking_turns) * len(E2E_VARIANTS)
    for row in results["e2e"]:
        assert row["complete"] and row["measured"] > 0 and row["p50_ms"] <= row["p99_ms"] <= row["p999_ms"], row
    assert {r["broker"] for r in results["startup"]} == brokers
    assert all(r["start_s"] > 0 and r["rss_idle_mib"] > 0 for r in results["startup"])
    large = results["log"]["large"]
    assert large["segments"] >= 2 and large["fetch"]["head"]["median_ms"] > 0
    for log in ("small", "large"):
        assert results["log"][log]["clean_s"] > 0 and results["log"][log]["after_sigkill_s"] > 0
    assert {r["broker"] for r in results["partitions"]} == brokers
    assert all(r["partitions"] == TINY.many_partitions for r in results["partitions"])
    assert all(0 < r["first_round_s"] < r["seconds"] and r["rest_records_per_s"] > 0 for r in results["partitions"])
    assert len(results["targets"]) == 10 + (8 if kafka["included"] else 0)
    assert len(results["quotas"]) == 2 * 2 * 2 * 2 + len(CONSUME_CLIENTS)  # every produce and consume configuration
    assert all(q["ratio"] > 0 for q in results["quotas"])
    profile = results["profile"]
    for p in (profile, profile["consume"]):
        assert p.get("samples", 0) > 0 and p["top"], p  # py-spy is a test dependency
        assert abs(sum(e["share"] for e in p["top"]) - 1) < 1e-9 or len(p["top"]) == PROFILE_TOP
    assert all(t["met"] in (True, False) and t["ratio"] > 0 or t["detail"].startswith("not measurable")
               for t in results["targets"])
    assert "targets:" in text_table(results["table"], results["targets"])

    paths = write_reports(results, str(tmp_path))
    assert json.loads(open(paths["json"]).read())["mode"] == "tiny"
    report = open(paths["md"]).read()
    assert "## Targets" in report and "## Where the broker's time goes (py-spy)" in report
    assert "## Where the consume time goes" in report and "## Quota accounting (--quotas)" in report
    # runs too short to use a clock tick of CPU have nothing to split
    assert ("## Broker CPU by configuration" in report) == bool(cpu_splits(results["produce"]))
    assert ("## Where Sluice is behind Kafka" in report) == kafka["included"]
    assert open(paths["png"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_broker_benchmark_reports_without_kafka():
    """Kafka left out (as when it cannot be resolved): Sluice vs mock, and the report says so."""
    from bench import broker
    from bench.broker.report import markdown_report
    from bench.common import TINY

    results = broker.run(TINY, "tiny", sections=("startup",), log=lambda line: None, with_kafka=False)
    assert {r["broker"] for r in results["startup"]} == {"sluice", "mock"}
    assert not results["kafka"]["included"] and results["kafka"]["unavailable"]
    assert "kafka: NOT IN THIS RUN" in markdown_report(results, results["table"], results["targets"], None)


def test_mock_broker_process_creates_and_deletes_topics():
    from confluent_kafka import Consumer

    from bench.mock_broker import MockBrokerProcess

    with MockBrokerProcess(max_seconds=60) as mock:
        mock.create_topic("eight", 8)
        consumer = Consumer({"bootstrap.servers": mock.bootstrap_servers, "group.id": "smoke"})
        try:
            assert len(consumer.list_topics("eight", timeout=10).topics["eight"].partitions) == 8
            mock.delete_topic("eight")
            assert "eight" not in consumer.list_topics(timeout=10).topics
        finally:
            consumer.close()
        process = mock.proc
    assert process.returncode == 0  # it ended with its input, and was waited for


def test_profile_leaf_shares_from_py_spy_raw_output():
    from bench.broker.profile import leaf_shares

    raw = ["<module> (broker/__main__.py:5);run (asyncio/runners.py:190);"
           "LogSegment.append (broker/storage/segment.py:79) 6\n",
           "<module> (broker/__main__.py:5);LogSegment.append (broker/storage/segment.py:80) 2\n",
           "<module> (broker/__main__.py:5);EpollSelector.select (selectors.py:468) 2\n",
           "not a py-spy line\n"]
    total, top = leaf_shares(raw, top=5)
    assert total == 10
    assert top == [{"function": "LogSegment.append (segment.py)", "share": 0.8},
                   {"function": "EpollSelector.select (selectors.py)", "share": 0.2}]


def test_fetch_timeline_from_librdkafka_protocol_log():
    """Fetches alternate with handling; the last response (the end-of-topic poll) is left
    out; other requests and other lines are ignored."""
    from bench.broker.consume import fetch_timeline
    from bench.common import MB

    def line(t, text):
        return f"%7|{t:.3f}|SEND|rdkafka#consumer-1| [thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/0: {text}\n"

    log = [line(100.000, "Sent ApiVersionRequest (v3, 40 bytes @ 0, CorrId 1)"),
           line(100.002, "Sent FetchRequest (v11, 183 bytes @ 0, CorrId 2)"),
           line(100.010, "Received FetchResponse (v11, 4000000 bytes, CorrId 2, rtt 7.50ms)"),
           line(100.011, "Received ListOffsetsResponse (v5, 45 bytes, CorrId 3, rtt 8.00ms)"),
           line(100.030, "Sent FetchRequest (v11, 295 bytes @ 0, CorrId 4)"),
           line(100.034, "Received FetchResponse (v11, 2000000 bytes, CorrId 4, rtt 3.50ms)"),
           line(100.040, "Sent FetchRequest (v11, 295 bytes @ 0, CorrId 5)"),
           line(100.540, "Received FetchResponse (v11, 357 bytes, CorrId 5, rtt 500.00ms)"),
           "kcat: not a debug line\n"]
    timeline = fetch_timeline(log)
    assert timeline["fetches"] == 2 and timeline["mb"] == 6_000_000 / MB
    assert timeline["mb_per_fetch"] == 3_000_000 / MB
    assert round(timeline["to_first_fetch_ms"], 6) == 2.0
    assert round(timeline["data_ms"], 6) == 32.0 and timeline["waiting_ms"] == 11.0
    assert round(timeline["handling_ms"], 6) == 21.0
    assert "error" in fetch_timeline(log[:1])


def test_durability_benchmark_runs_and_reports():
    """bench.durability at a tiny size: both producer shapes get a rate per flush policy."""
    from bench import durability

    results = durability.run(records=2_000, repeats=1, mode="tiny", log=lambda line: None)
    assert set(results["shapes"]) == {"batches", "single"}
    for shape in results["shapes"].values():
        assert all(rate > 0 for rate in shape["rec_per_s"].values())
    report = durability.markdown_report(results)
    assert "flush.messages=1" in report and results["file_system"] in report


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_compare_benchmark_runs_two_trees_side_by_side():
    """bench.compare at tiny sizes against HEAD's own tree (exported and compiled): every
    produce and consume configuration gets a rate from each broker, every e2e configuration
    a p99 latency."""
    from bench import compare
    from bench.common import TINY

    results = compare.run("HEAD", records=300, repeats=1, log=lambda line: None, sizes=TINY)
    assert len(results["rows"]) == 16 + 3
    assert all(row["base_rec_per_s"] > 0 and row["head_rec_per_s"] > 0 for row in results["rows"])
    assert len(results["e2e"]) == 4
    assert all(row["base_p99_ms"] > 0 and row["head_p99_ms"] > 0 and row["lost"] == 0
               for row in results["e2e"])
    report = compare.markdown_report(results)
    assert "| produce, kcat |" in report and "head / base p99" in report


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_cluster_benchmark_runs_every_section_and_reports(tmp_path):
    """bench.cluster at its tiny size (a ZooKeeper server, three brokers and one alone):
    produce, e2e and a SIGTERM failover each give figures, the goals are evaluated (met or
    not: never asserted), and both reports are written."""
    import json

    from bench import cluster

    results = cluster.run(cluster.TINY, "tiny", log=lambda line: None)
    (row,) = results["produce"]
    for target in ("rf1", "rf3"):
        assert row[target]["all_written"] == [cluster.TINY.records] and row[target]["records_per_s"] > 0
    assert len(row["rf3"]["broker_cpu_s_each"]) == cluster.BROKERS and row["ratio"] > 0
    assert [r["target"] for r in results["e2e"]] == ["rf1", "rf3"]
    (run,) = results["failover"]
    assert run["fault"] == "SIGTERM" and run["recovered"] and run["unavailable_s"] > 0, run
    assert run["led_partitions"] and run["victim"] != run["controller"]
    assert 0 <= run["controller_noticed_s"] <= run["new_leaders_s"], run  # from the brokers' logs
    assert {g["met"] for g in results["goals"]} <= {True, False} and len(results["goals"]) == 3

    paths = cluster.write_reports(results, str(tmp_path))
    assert json.loads(open(paths["json"]).read())["mode"] == "tiny"
    report = open(paths["md"]).read()
    assert "## Goals" in report and "## 3. Unavailability after a leader fails" in report


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_security_benchmark_runs_every_listener_and_reports():
    """bench.security at tiny sizes: produce and consume over PLAINTEXT, SSL and SASL_SSL
    with both clients on Sluice and Apache Kafka (unless Kafka cannot run, which the
    results then say), every run's records all written, the targets evaluated."""
    import shutil

    import pytest

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    from bench import security

    sizes = security.Sizes(records=2_000, consume_records=800, repeats=1, timeout=120.0)
    results = security.run(sizes, "tiny", log=lambda line: None)
    kafka = results["kafka"]
    assert kafka["included"] or kafka["unavailable"], kafka
    brokers = ["sluice", "kafka"] if kafka["included"] else ["sluice"]
    assert {(r["broker"], r["benchmark"], r["client"], r["protocol"]) for r in results["rows"]} == {
        (k, b, c, p) for k in brokers for b in ("produce", "consume") for c in security.CLIENTS
        for p in security.PROTOCOLS}
    assert all(r["records_per_s"] > 0 for r in results["rows"])
    assert all(r["all_written"] == [sizes.records] for r in results["rows"] if r["benchmark"] == "produce")
    assert len(results["targets"]) == 4 * len(brokers) and all(t["met"] in (True, False) for t in results["targets"])
    assert "## Targets" in security.markdown(results)


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_metrics_benchmark_scrapes_and_measures_the_overhead():
    """bench.metrics at tiny sizes: the scrape of a broker with its partitions and groups
    is timed and carries a sample per partition and group, and every broker of the
    overhead runs gets a rate and a CPU cost per request."""
    from bench import metrics

    # Enough requests that the broker's CPU, counted in clock ticks of 10 ms, is a tick or
    # more: 300 (some 10 ms of CPU) measured 0 once.
    sizes = metrics.Sizes(partitions=150, groups=2, scrapes=5, requests=3000, repeats=1, timeout=120.0)
    results = metrics.run(sizes, "tiny", log=lambda line: None)
    scrape = results["scrape"]
    assert scrape["partitions"] == 150 and scrape["p99_ms"] >= scrape["p50_ms"] > 0
    assert scrape["samples"] > 150 * (4 + 2 * 2)  # 4 log gauges a partition, lag and offset a group
    assert scrape["ping_max_ms_scraping"] > 0 and scrape["ping_max_ms_quiet"] > 0
    assert [row["broker"] for row in results["overhead"]] == ["metrics-off", "metrics-on"]
    assert all(row["requests_per_s"] > 0 and row["broker_cpu_us_per_request"] > 0 for row in results["overhead"])
    assert "## 2. Per-request overhead" in metrics.markdown(results)


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_compaction_benchmark_runs_every_section_and_reports(tmp_path):
    """bench.compaction at its tiny size: the cleaner compacts the keyed topic (its own log
    lines give the MB/s), produce latency is measured idle and while it cleans, and the
    coordinator serves the last offsets after each restart; the report is written."""
    import json

    from bench import compaction
    from bench.common import write_result_files

    results = compaction.run(compaction.TINY, "tiny", log=lambda line: None)
    t = results["throughput"]
    assert t["after"]["log_bytes"] < t["before"]["log_bytes"] and t["cleanings"], t
    assert t["cleaner_mb_per_s"] > 0 and t["removed_mb_per_s"] > 0
    windows = results["latency"]["windows"]
    assert set(windows) == {"idle_before", "cleaning", "idle_after"}
    for w in windows.values():
        assert w["failed"] == 0 and w["measured"] > 0 and w["p50_ms"] <= w["p99_ms"] <= w["max_ms"], w
    assert results["latency"]["backlog_after"]["log_bytes"] < results["latency"]["backlog_before"]["log_bytes"]
    steps = results["load"]["steps"]
    assert [s["commits"] for s in steps] == list(compaction.TINY.commit_counts)
    assert all(s["served_s"] > 0 and s["compacted"]["log_bytes"] > 0 for s in steps)

    report = compaction.markdown_report(results)
    paths = write_result_files("compaction", results, str(tmp_path), report)
    assert json.loads(open(paths["json"]).read())["mode"] == "tiny"
    assert "## 3. Coordinator load after offset commits" in open(paths["md"]).read()


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_reassignment_benchmark_runs_every_section_and_reports(tmp_path):
    """bench.reassignment at its tiny size (a ZooKeeper server, two clusters of four
    brokers): the filled partition moves with sluice reassign unthrottled and throttled
    while the foreground producer writes, a broker is retired while the partitions'
    leaders are sampled and then stopped; the goals are evaluated (met or not: never
    asserted), and both reports are written."""
    import json

    from bench import reassignment
    from bench.common import write_result_files

    tiny = reassignment.TINY
    results = reassignment.run(tiny, "tiny", log=lambda line: None)
    moves = results["moves"]
    assert moves["produce"]["records"] == tiny.move_bytes // 100 and moves["produce"]["mb_per_s"] > 0
    for name, target, throttle in (("unthrottled", reassignment.MOVED, None),
                                   ("throttled", reassignment.ORIGINAL, tiny.throttle_rate)):
        move = moves[name]
        assert move["to"] == list(target) and move["throttle"] == throttle, move
        assert move["samples"][-1][1] == move["bytes"] > 0  # the new replica ends holding the whole log
        assert 0 < move["first_bytes_s"] <= move["copied_s"] <= move["seconds"], move
        window = move["foreground"]
        assert window["acked"] > 0 and window["p50_ms"] <= window["p99_ms"] <= window["max_ms"], window
    assert moves["throttled"]["window_rates"] and moves["throttled"]["verify_exit"] == 0
    assert all(moves["idle"][w]["acked"] > 0 for w in ("before", "after", "pooled"))
    retired = results["decommission"]
    assert retired["exit_code"] == 0 and retired["can_stop"] is True, retired
    assert retired["moved"] == retired["replicas_on_retiring"] > 0 and retired["stop_exit_status"] == 0
    assert sum(1 for s in retired["samples"] if s["at_s"] > retired["stopped_s"]) >= tiny.after_stop_samples
    assert retired["max_unavailable"] is not None
    assert len(results["goals"]) == 6 and {g["met"] for g in results["goals"]} <= {True, False}

    report = reassignment.markdown_report(results)
    paths = write_result_files("reassignment", results, str(tmp_path), report)
    assert json.loads(open(paths["json"]).read())["mode"] == "tiny"
    for heading in ("## Goals", "## 1. Moving a partition, unthrottled", "## 2. Moving it back, throttled",
                    "## 3. A producer beside the moves", "## 4. Retiring a broker"):
        assert heading in report, heading


@pytest.mark.long  # a benchmark run end to end: `make test-long`
def test_coordinators_benchmark_runs_transactions_against_kafka_and_reports():
    """bench.coordinators' transactions section at its quick size (as `--quick --only
    transactions --no-write`): Sluice RF=1 and RF=3 and Apache Kafka's one node and three
    (unless Kafka cannot run, which the results then say) each commit transactions, each
    cluster's replication round trip is measured, the three goals are evaluated (met or
    not: never asserted), a profile of each target says where a transaction's time goes,
    and the report has them all."""
    from bench import coordinators

    results = coordinators.run(coordinators.QUICK, "quick", ("transactions",), log=lambda line: None)
    t = results["transactions"]
    kafka = {"kafka_rf1", "kafka_rf3"} - set(t["kafka_unavailable"])
    assert set(t["median"]) == {"rf1", "rf3"} | kafka, t["kafka_unavailable"]
    assert all(m["transactions"] > 0 and m["commit_p99_ms"] >= m["commit_p50_ms"] > 0 for m in t["median"].values())
    assert set(t["round_trip"]) == {"rf3"} | (kafka & {"kafka_rf3"})
    assert all(trip["acks_all_p50_ms"] > 0 and trip["acks_1_p50_ms"] > 0 for trip in t["round_trip"].values())
    if "kafka_rf3" in kafka:
        assert len(t["kafka_jvms"]["kafka_rf3"]["rss_mib"]) == 3
    assert set(t["profiles"]) == set(t["median"])
    for profile in t["profiles"].values():
        assert all(profile[request]["p50_ms"] > 0 for request in coordinators.PROFILED_REQUESTS), profile
        assert profile["completion_p50_ms"] > 0, profile
    assert len(t["goals"]) == 3 and {g["met"] for g in t["goals"][:2]} <= {True, False}
    report = coordinators.markdown_report(results)
    for heading in ("## 2. Transactions", "### Goals", "### One replication round trip",
                    "### Where a transaction's time goes"):
        assert heading in report, heading
    assert all(f"| {label} |" in report for _, label, _ in coordinators.TXN_TARGETS)  # run or not


@pytest.mark.long  # a benchmark run end to end: `make test-long`
@pytest.mark.timeout(1200)  # 24 queries of 5 s warm-up and 5 s measured: about 6 minutes on two loaded cores
def test_spark_latency_benchmark_runs_every_case_on_the_sluice_broker(spark_kafka):
    """bench.spark_latency as `--quick --only sluice,breakdown,floor --no-write` runs it,
    on the shared session: every pipeline at every rate and trigger gives latencies,
    micro-batch stages and the Sluice broker's requests per batch, the floor query gives
    micro-batch stages at every rate and trigger, the goals are evaluated (met or not:
    never asserted), and the report is made."""
    from bench import spark_latency

    results = spark_latency.run(spark_latency.QUICK, "quick", ("sluice", "breakdown", "floor"),
                                log=lambda line: None, spark=spark_kafka)
    assert not results["unavailable"], results["unavailable"]
    cases = [(c["pipeline"], c["rate"], c["trigger"]) for c in results["cases"]]
    assert sorted(cases) == sorted(
        [(p, r, t) for p in spark_latency.PIPELINES for r in spark_latency.RATES for t in spark_latency.TRIGGERS]
        + [(p, r, spark_latency.BREAKDOWN_TRIGGER) for p in spark_latency.BREAKDOWN for r in spark_latency.RATES])
    for case in results["cases"]:
        assert case["broker"] == "sluice" and case["measured"] > 0, case
        assert case["p50_ms"] <= case["p99_ms"] <= case["max_ms"], case
        assert case["batches"] > 0 and case["batch_ms_median"] > 0, case
        assert set(case["stage_ms_median"]) == set(spark_latency.STAGES)
        assert case["requests_per_batch"]["Produce"]["requests"] > 0, case
    assert len(results["goals"]) == 2 * 2 * 2 and {g["met"] for g in results["goals"]} <= {True, False}
    assert sorted((f["rate"], f["trigger"]) for f in results["floor"]) == sorted(
        (r, t) for r in spark_latency.RATES for t in spark_latency.TRIGGERS)
    for floor in results["floor"]:
        assert floor["batches"] > 0 and floor["batch_ms_median"] > 0, floor
        assert set(floor["stage_ms_median"]) == set(spark_latency.STAGES)

    report = spark_latency.markdown_report(results)
    for heading in ("## Goals", "## End-to-end latency", "## Where a micro-batch's time goes",
                    "## The floor: a Python data source that reads and writes nothing",
                    "## Requests the Sluice broker answered per micro-batch", "## Method"):
        assert heading in report, heading
