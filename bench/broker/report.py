"""bench.broker's report: one comparison row per figure (Sluice, Kafka, the mock and the
ratios), the targets met or not, and the run's results as a text table, markdown, JSON and
a PNG chart."""

from __future__ import annotations

import json
import os

from bench.broker.consume import CONSUME_CLIENTS, CONSUMER_QUEUE
from bench.broker.e2e import E2E_VARIANTS
from bench.broker.perftest import PERFTEST_SKIPPED
from bench.broker.quotas import QUOTA_TARGET
from bench.common import BROKERS, CLK_TCK, MB, MIB, VALUE_SIZE, _atomic_write, _fmt, _loads, _rounded
from bench.machine import describe_machine


def _pick(rows, **match):
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return found[0] if found else None


# Which way is better, per unit of the table (for "where Sluice is behind")
HIGHER_IS_BETTER = {"rec/s": True, "MB/s": True}


def comparison_rows(results: dict) -> list[dict]:
    """One row per figure: sluice, kafka, mock, sluice/kafka and sluice/mock."""
    out = []

    def add(section, name, unit, sluice, mock=None, kafka=None):
        def ratio(other):
            return sluice / other if sluice is not None and other else None

        out.append({"section": section, "name": name, "unit": unit, "sluice": sluice,
                    "kafka": kafka, "mock": mock, "ratio_kafka": ratio(kafka), "ratio": ratio(mock)})

    def others(rows, key, **match):
        k, m = _pick(rows, broker="kafka", **match), _pick(rows, broker="mock", **match)
        return {"kafka": k and k[key], "mock": m and m[key]}

    produce = results.get("produce") or []
    for r in produce:
        if r["broker"] != "sluice":
            continue
        match = {k: r[k] for k in ("client", "acks", "partitions", "compression")}
        label = f"{r['client']} acks={r['acks']} {r['partitions']}p {r['compression']}"
        for key, unit in (("records_per_s", "rec/s"), ("mb_per_s", "MB/s"), ("broker_cpu_s", "broker CPU s"),
                          ("broker_peak_rss_mib", "broker peak RSS MiB")):
            add("produce", label, unit, r[key], **others(produce, key, **match))
    perf = results.get("perftest") if isinstance(results.get("perftest"), list) else []
    for r in perf:
        if r["broker"] != "sluice":
            continue
        label = f"Kafka ProducerPerformance acks=all {r['partitions']}p"
        for key, unit in (("records_per_s", "rec/s"), ("avg_latency_ms", "avg latency ms"),
                          ("broker_cpu_s", "broker CPU s"), ("broker_peak_rss_mib", "broker peak RSS MiB")):
            add("produce", label, unit, r[key], **others(perf, key, partitions=r["partitions"]))
    consume = results.get("consume") or []
    for r in consume:
        if r["broker"] != "sluice":
            continue
        for key, unit in (("records_per_s", "rec/s"), ("mb_per_s", "MB/s")):
            add("consume", f"{r['client']} cold start", unit, r[key], **others(consume, key, client=r["client"]))
    e2e = results.get("e2e") or []
    for linger, wait in E2E_VARIANTS:
        s = _pick(e2e, broker="sluice", linger_ms=linger, fetch_wait_max_ms=wait)
        if s:
            for key, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")):
                add("e2e", f"{s['rate']:,}/s linger {linger} fetch.wait {wait} {label}", "ms",
                    s[key], **others(e2e, key, linger_ms=linger, fetch_wait_max_ms=wait))
            lost = others(e2e, "lost", linger_ms=linger, fetch_wait_max_ms=wait)
            if s.get("lost") or any(lost.values()):
                add("e2e", f"{s['rate']:,}/s linger {linger} fetch.wait {wait} lost", "records",
                    s.get("lost"), **lost)
    startup = results.get("startup") or []
    s = _pick(startup, broker="sluice")
    if s:
        add("startup", "cold start to first Metadata answer (fastest)", "s", s["start_s"],
            **others(startup, "start_s"))
        add("memory", f"RSS idle ({s['idle_seconds']:g} s after start)", "MiB", s["rss_idle_mib"],
            **others(startup, "rss_idle_mib"))
    if peak_rss(results, "sluice"):
        add("memory", "RSS under load (highest produce peak)", "MiB", peak_rss(results, "sluice"),
            mock=peak_rss(results, "mock"), kafka=peak_rss(results, "kafka"))
    log_ = results.get("log")
    if log_:
        large, small = log_["large"], log_["small"]
        add("log", f"fetch head ({large['log_bytes'] / MB:,.0f} MB log)", "ms median",
            large["fetch"]["head"]["median_ms"])
        add("log", f"fetch tail ({large['log_bytes'] / MB:,.0f} MB log)", "ms median",
            large["fetch"]["tail"]["median_ms"])
        add("log", "start-up clean, small log", "s", small["clean_s"])
        add("log", "start-up clean, large log", "s", large["clean_s"])
        add("log", "start-up after SIGKILL, small log", "s", small["after_sigkill_s"])
        add("log", "start-up after SIGKILL, large log", "s", large["after_sigkill_s"])
    many = results.get("partitions") or []
    s = _pick(many, broker="sluice")
    if s:
        n = f"{s['partitions']:,} partitions"
        for key, name, unit in (("metadata_confluent_ms", "metadata (confluent)", "ms"),
                                ("metadata_wire_ms", "metadata (Sluice client)", "ms"),
                                ("records_per_s", "produce", "rec/s"), ("rss_after_mib", "broker RSS", "MiB"),
                                ("create_s", "create topics", "s")):
            add("partitions", f"{n}: {name}", unit, s[key], **others(many, key))
    return out


def peak_rss(results: dict, broker: str) -> float | None:
    """The broker's highest peak RSS over the produce runs (kcat, Python, ProducerPerformance)."""
    perf = results.get("perftest") if isinstance(results.get("perftest"), list) else []
    values = [r["broker_peak_rss_mib"] for r in (results.get("produce") or []) + perf
              if r["broker"] == broker and r.get("broker_peak_rss_mib") is not None]
    return max(values) if values else None


def behind_kafka(rows: list[dict]) -> list[dict]:
    """The table's rows where Sluice does worse than Kafka, with the gap (Sluice's figure
    as a share of Kafka's, or how many times Kafka's it is)."""
    behind = []
    for r in rows:
        ratio = r.get("ratio_kafka")
        if ratio is None or r["section"] == "e2e" and r["unit"] == "records":
            continue
        higher = HIGHER_IS_BETTER.get(r["unit"], False)
        if (ratio < 1.0) if higher else (ratio > 1.0):
            gap = f"{1 - ratio:.0%} slower" if higher else f"{ratio:.2f}x Kafka's"
            behind.append({**r, "gap": gap})
    return behind


def _target(name: str, ratio, limit: float, higher_is_better: bool, detail: str, **against) -> dict:
    """One target: met when the ratio is on the right side of the limit, None when not run."""
    met = None if ratio is None else ratio >= limit if higher_is_better else ratio <= limit
    return {"target": name, "ratio": ratio, "limit": limit, **against,
            "higher_is_better": higher_is_better, "met": met, "detail": detail}


def _worst_produce(produce: list[dict], client: str, other: str, **match) -> tuple[tuple | None, int]:
    """((Sluice's produce rate / `other`'s, the configuration) where that ratio is lowest, or
    None; and how many configurations both ran), over `client`'s runs matching `match`."""
    ratios = []
    for r in produce:
        if r["broker"] == "sluice" and r["client"] == client and all(r[k] == v for k, v in match.items()):
            o = _pick(produce, broker=other, client=client, acks=r["acks"],
                      partitions=r["partitions"], compression=r["compression"])
            if o:
                ratios.append((r["records_per_s"] / o["records_per_s"],
                               ("" if "acks" in match else f"acks={r['acks']} ")
                               + f"{r['partitions']}p {r['compression']}"))
    return (min(ratios) if ratios else None), len(ratios)


def evaluate_targets(results: dict) -> list[dict]:
    """The issue's targets: each met / NOT met with its ratio (never asserted)."""
    targets = []

    def add(*target):
        targets.append(_target(*target))

    produce = results.get("produce") or []
    for client in ("python", "kcat"):
        worst, count = _worst_produce(produce, client, "mock")
        add(f"produce >= 1.0x mock, {client}", worst and worst[0], 1.0, True,
            f"worst of {count} configurations: {worst[1]}" if worst else "not run")
    splits = cpu_splits(produce)
    worst = max(splits, key=lambda c: c["ratio"]) if splits else None
    add("broker CPU per M records produced <= 2x mock", worst and worst["ratio"], 2.0, False,
        f"worst of {len(splits)} configurations: {worst['label']}, {worst['sluice']:.2f} vs "
        f"{worst['mock']:.2f} CPU-s; Sluice's user CPU alone {worst['user'] / worst['mock']:.2f}x the "
        f"mock's total; writing that run's {worst['log_mb']:,.0f} MB log into the page cache took "
        f"{worst['floor']:.2f} CPU-s beside it (see 'Broker CPU by configuration')" if worst
        else "not measurable: no run used a clock tick (10 ms) of CPU on both brokers" if produce else "not run")
    consume = results.get("consume") or []
    ratios = []
    for r in consume:
        m = _pick(consume, broker="mock", client=r["client"])
        if r["broker"] == "sluice" and m and not CONSUME_CLIENTS[r["client"]]:  # the defaults
            ratios.append((r["records_per_s"] / m["records_per_s"], r["client"]))
    worst = min(ratios) if ratios else None
    add("consume >= 1.0x mock", worst and worst[0], 1.0, True,
        f"worst client: {worst[1]}" if worst else "not run")
    linger, wait = E2E_VARIANTS[0]
    s = _pick(results.get("e2e") or [], broker="sluice", linger_ms=linger, fetch_wait_max_ms=wait)
    ok = s and s["p99_ms"] is not None
    add(f"e2e p99 <= 5 ms at {s['rate'] if s else 10_000:,} rec/s", ok and s["p99_ms"] / 5.0, 1.0, False,
        f"p99 {s['p99_ms']:.2f} ms at {s['achieved_rate']:,.0f} rec/s, linger.ms={linger}, "
        f"fetch.wait.max.ms={wait} (ratio to 5 ms)" if ok else "not run")
    log_ = results.get("log")
    if log_:
        head, tail = log_["large"]["fetch"]["head"]["median_ms"], log_["large"]["fetch"]["tail"]["median_ms"]
        add("head fetch within 1.2x of tail", head / tail, 1.2, False,
            f"head {head:.3f} ms / tail {tail:.3f} ms (medians)")
        big, small = log_["large"]["clean_s"], log_["small"]["clean_s"]
        add("clean start-up independent of log size", big / small, 1.2, False,
            f"{log_['large']['log_bytes'] / MB:,.0f} MB log {big:.2f} s / "
            f"{log_['small']['log_bytes'] / MB:.1f} MB log {small:.2f} s (fastest of "
            f"{len(log_['small']['clean_all_s'])} starts each; limit 1.2x)")
    else:
        add("head fetch within 1.2x of tail", None, 1.2, False, "not run")
        add("clean start-up independent of log size", None, 1.2, False, "not run")
    many = results.get("partitions") or []
    s, m = _pick(many, broker="sluice"), _pick(many, broker="mock")
    add(f"produce >= 1.0x mock with {s['partitions'] if s else 10_000:,} partitions",
        s and m and s["records_per_s"] / m["records_per_s"], 1.0, True,
        f"{s['records_per_s']:,.0f} vs {m['records_per_s']:,.0f} rec/s; the first record of each "
        f"partition {s['first_round_s']:.2f} s vs {m['first_round_s']:.2f} s, the rest "
        f"{s['rest_records_per_s']:,.0f} vs {m['rest_records_per_s']:,.0f} rec/s" if s and m else "not run")
    add(f"creating {s['partitions'] if s else 10_000:,} partitions <= 1 s", s and s["create_s"], 1.0, False,
        f"{s['create_s']:.3f} s (mock {m['create_s']:.3f} s); ratio in seconds" if s and m else "not run")
    quotas = results.get("quotas")
    if quotas is not None:
        worst = min(quotas, key=lambda q: q["ratio"]) if quotas else None
        add(f"produce and consume with quotas set, not reached, >= {QUOTA_TARGET}x without", worst and worst["ratio"],
            QUOTA_TARGET, True, f"worst of {len(quotas)} configurations: {_quota_configuration(worst)}"
            if worst else "not run")
    if (results.get("kafka") or {}).get("included"):
        targets += kafka_targets(results)
    return targets


def _quota_configuration(row: dict) -> str:
    return " ".join([row["section"], row["client"]] + ([f"acks={row['acks']}", f"{row['partitions']}p",
                                                         row["compression"]] if row["section"] == "produce" else []))


def cpu_splits(produce: list[dict]) -> list[dict]:
    """Per produce configuration: Sluice's broker CPU (user, system) beside the mock's, and
    the page-cache floor measured beside Sluice's run (bench.common.page_cache_write_cpu)."""
    out = []
    for r in produce:
        if r["broker"] != "sluice" or "page_cache_sys_s" not in r:
            continue
        m = _pick(produce, broker="mock", client=r["client"], acks=r["acks"], partitions=r["partitions"],
                  compression=r["compression"])
        if not m or not m["broker_cpu_s"] or not r["broker_cpu_s"]:
            continue  # below /proc's clock tick: nothing to compare
        floor = r["page_cache_user_s"] + r["page_cache_sys_s"]
        out.append({"label": f"{r['client']} acks={r['acks']} {r['partitions']}p {r['compression']}",
                    "sluice": r["broker_cpu_s"], "user": r["broker_user_s"], "system": r["broker_sys_s"],
                    "floor": floor, "log_mb": r["log_bytes"] / MB, "mock": m["broker_cpu_s"],
                    "ratio": r["broker_cpu_s"] / m["broker_cpu_s"],
                    "above_floor": (r["broker_cpu_s"] - floor) / m["broker_cpu_s"]})
    return out


def cpu_split_table(produce: list[dict]) -> list[str]:
    splits = cpu_splits(produce)
    if not splits:
        return []
    md = ["", "## Broker CPU by configuration", "",
          "Sluice's broker CPU in each produce run (the median run), split into user and system time "
          "(/proc), beside the CPU this harness spent writing as many bytes as that run's log holds "
          "into a file in the same directory right after it (1 MiB writes; the page cache's cost, "
          "which a log in memory does not pay), and the mock's broker CPU in the same configuration.",
          "", "| run | sluice CPU s | user | system | page-cache floor | log MB | mock CPU s | sluice/mock | "
          "(sluice - floor)/mock |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    md += [f"| {c['label']} | {c['sluice']:.2f} | {c['user']:.2f} | {c['system']:.2f} | {c['floor']:.2f} | "
           f"{c['log_mb']:,.0f} | {c['mock']:.2f} | {c['ratio']:.2f}x | {c['above_floor']:.2f}x |" for c in splits]
    return md


def kafka_targets(results: dict) -> list[dict]:
    """Sluice against Apache Kafka: produce and consume throughput >= 1.0x with the Python
    and kcat clients (the worst configuration counts), e2e p99 <= Kafka's, a faster cold
    start, a lower RSS idle and under load. Each met / NOT met, never asserted."""
    targets = []

    def add(*target):
        targets.append(_target(*target, vs="kafka"))

    produce = results.get("produce") or []
    for client in ("python", "kcat"):
        worst, count = _worst_produce(produce, client, "kafka")
        add(f"produce >= 1.0x Kafka, {client}", worst and worst[0], 1.0, True,
            f"worst of {count} configurations: {worst[1]}" if worst else "not run")
    consume = results.get("consume") or []
    for client in ("python", "kcat"):
        s, k = _pick(consume, broker="sluice", client=client), _pick(consume, broker="kafka", client=client)
        add(f"consume >= 1.0x Kafka, {client}", s and k and s["records_per_s"] / k["records_per_s"], 1.0,
            True, f"{s['records_per_s']:,.0f} vs {k['records_per_s']:,.0f} rec/s (cold start, median)"
            if s and k else "not run")
    linger, wait = E2E_VARIANTS[0]
    e2e = results.get("e2e") or []
    s = _pick(e2e, broker="sluice", linger_ms=linger, fetch_wait_max_ms=wait)
    k = _pick(e2e, broker="kafka", linger_ms=linger, fetch_wait_max_ms=wait)
    ok = s and k and s["p99_ms"] is not None and k["p99_ms"]
    add(f"e2e p99 <= Kafka's at {s['rate'] if s else 10_000:,} rec/s", ok and s["p99_ms"] / k["p99_ms"], 1.0,
        False, f"p99 {s['p99_ms']:.2f} ms vs {k['p99_ms']:.2f} ms, linger.ms={linger}, "
        f"fetch.wait.max.ms={wait}" if ok else "not run")
    startup = results.get("startup") or []
    s, k = _pick(startup, broker="sluice"), _pick(startup, broker="kafka")
    add("cold start faster than Kafka", s and k and s["start_s"] / k["start_s"], 1.0, False,
        f"{s['start_s']:.2f} s vs {k['start_s']:.2f} s to the first Metadata answer (fastest of "
        f"{len(s['all_start_s'])}; Kafka's storage formatted beforehand)" if s and k else "not run")
    add("RSS idle lower than Kafka's", s and k and s["rss_idle_mib"] / k["rss_idle_mib"], 1.0, False,
        f"{s['rss_idle_mib']:.0f} MiB vs {k['rss_idle_mib']:.0f} MiB" if s and k else "not run")
    peaks = {b: peak_rss(results, b) for b in ("sluice", "kafka")}
    add("RSS under load lower than Kafka's", peaks["kafka"] and peaks["sluice"] and peaks["sluice"] / peaks["kafka"],
        1.0, False,
        f"highest peak over the produce runs: {peaks['sluice']:.0f} MiB vs {peaks['kafka']:.0f} MiB "
        f"(Kafka's heap is -Xmx1g -Xms1g)" if peaks["kafka"] and peaks["sluice"] else "not run")
    return targets


def _ratio(ratio) -> str:
    """A target's ratio, with a third decimal (so 0.998 never reads as a missed 1.00)."""
    return "-" if ratio is None else f"{ratio:.3f}x" if ratio < 10 else f"{ratio:.1f}x"


def _verdict(t) -> str:
    if t["met"] is None:
        return "not run"
    return "met" if t["met"] else "NOT met"


def _x(ratio) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3f}x" if ratio >= 0.001 else f"{ratio:.1e}x"


def text_table(rows: list[dict], targets: list[dict]) -> str:
    width = max(len(f"{r['name']} [{r['unit']}]") for r in rows) if rows else 20
    lines = [f"{'benchmark':11} {'figure':{width}} {'sluice':>12} {'kafka':>12} {'mock':>12} "
             f"{'sluice/kafka':>12} {'sluice/mock':>11}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r['section']:11} {r['name'] + ' [' + r['unit'] + ']':{width}} "
                     f"{_fmt(r['sluice']):>12} {_fmt(r.get('kafka')):>12} {_fmt(r['mock']):>12} "
                     f"{_x(r.get('ratio_kafka')):>12} {_x(r['ratio']):>11}")
    lines.append("")
    lines.append("targets:")
    for t in targets:
        ratio = _ratio(t["ratio"])
        sign = ">=" if t["higher_is_better"] else "<="
        lines.append(f"  {_verdict(t):8} {t['target']}: {ratio} (needs {sign} {t['limit']}x; {t['detail']})")
    return "\n".join(lines)


def consume_figures(results: dict) -> str:
    """This run's consume ratios, each broker's CPU beside the wall time, and the cold starts
    that took over 1.5x their median."""
    consume = results.get("consume") or []
    parts = []
    for client in CONSUME_CLIENTS:
        s = _pick(consume, broker="sluice", client=client)
        if not s:
            continue
        vs = [f"{s['records_per_s'] / o['records_per_s']:.2f}x {name}" for name in ("kafka", "mock")
              if (o := _pick(consume, broker=name, client=client))]
        cpu = ", ".join(f"{name} {r['broker_cpu_s']:.2f} s of {r['seconds']:.2f} s" for name in BROKERS
                        if (r := _pick(consume, broker=name, client=client)))
        parts.append(f"{client}: Sluice {' and '.join(vs)} (broker CPU {cpu})")
    if not parts:
        return ""
    slow = [f"{r['client']} {r['broker']} {x:.2f} s (median {r['seconds']:.2f} s)"
            for r in consume for x in r["all_seconds"] if x > 1.5 * r["seconds"]]
    return ("In this run: " + "; ".join(parts) + ". Cold starts over 1.5x their median: "
            + ("; ".join(slow) if slow else "none") + ".")


def profile_figures(profile: dict) -> str:
    """What this run's profile says, in figures: the broker's CPU share of the wall time and
    the leading functions."""
    if "top" not in profile:
        return ""
    top = profile["top"][:3]
    return (f"In this run the broker was busy {profile['broker_cpu_s']:.2f} CPU-s of {profile['seconds']:.2f} s "
            f"({profile['broker_cpu_s'] / profile['seconds']:.0%} of one core); the leading functions: "
            + ", ".join(f"`{e['function']}` {e['share']:.0%}" for e in top) + ".")


def method(results: dict) -> list[str]:
    """What this run did, section by section (only the sections that ran): the clients, their
    settings, the sizes and how each figure was read. Nothing here is a reading of the figures."""
    sizes, kafka = results["sizes"], results.get("kafka") or {}
    brokers = [b for b in BROKERS if (b == "sluice" and (results.get("log") or results.get("profile")))
               or any(isinstance(rows, list) and any(isinstance(r, dict) and r.get("broker") == b for r in rows)
                      for rows in results.values())]
    notes = [f"Brokers in this run: {', '.join(brokers) or 'none'}, each a process of its own on 127.0.0.1; "
             f"they, the clients and this harness share the machine's {results['machine']['cores']} cores. "
             f"Broker CPU: user + system time from /proc/<pid>/stat, in clock ticks of {1000 / CLK_TCK:g} ms. "
             "Peak RSS: VmHWM from /proc/<pid>/status, reset before each run where the kernel allows "
             "(peak_rss_since in the JSON). Client CPU (this process and kcat) is client_cpu_s in the JSON. "
             "No unmeasured round precedes the measured runs (apart from the e2e warm-up)."]
    if kafka.get("included"):
        notes.append("Kafka: server.properties from bench.kafka_broker (num.partitions=4 and auto-created "
                     "topics as for the others, replication factor 1, group.initial.rebalance.delay.ms=0, "
                     "no flush settings), log4j2 at ERROR; topics are created with the admin API and "
                     "produced to once every partition's leader is listed.")
    if results.get("produce"):
        notes.append(f"Produce: each run writes {sizes['records']:,} keyless {VALUE_SIZE}-byte values "
                     "(bench.common.value_pool, the same for both clients) into a fresh topic, linger.ms=5, "
                     "batch.size=1000000, idempotence off; "
                     f"{sizes['produce_repeats']} run(s) per configuration and broker, taking turns, the "
                     "median kept; the records written (sum of high watermarks) are checked against those sent. "
                     "Before each run the page cache is written back (sync), so that no broker's run pays for "
                     "the writeback of the runs before it.")
    if isinstance(results.get("perftest"), list) and results["perftest"]:
        left_out = [b for b in PERFTEST_SKIPPED if b in brokers]
        notes.append(f"ProducerPerformance (kafka-tools {kafka.get('version') or '?'}): {sizes['records']:,} "
                     f"records of {VALUE_SIZE} bytes, acks=all, the producers' batching settings; its rate is "
                     "its own, clocked from its first send; its MB/s converted from MiB/s"
                     + (f"; not run against {', '.join(left_out)} (bench/broker/perftest.py)." if left_out else "."))
    if results.get("consume"):
        queue = ", ".join(f"{k}={v}" for k, v in CONSUMER_QUEUE.items())
        extra = "; ".join(f"'{c}' also sets " + ", ".join(f"{k}={v}" for k, v in config.items())
                          for c, config in CONSUME_CLIENTS.items() if config)
        notes.append(f"Consume: cold starts (consumer creation, metadata and first fetches included) of a "
                     f"topic of {sizes['consume_partitions']} partitions x {sizes['consume_per_partition']:,} "
                     f"records filled beforehand; {sizes['consume_repeats']} run(s) per client and broker, "
                     f"taking turns, the median kept (all_seconds in the JSON). Every consumer gets {queue}"
                     + (f"; {extra}." if extra else "."))
    if results.get("e2e"):
        settings = ", ".join(f"linger.ms={linger}/fetch.wait.max.ms={wait}" for linger, wait in E2E_VARIANTS)
        notes.append(f"End-to-end latency: {sizes['e2e_rate']:,} records/s for {sizes['e2e_seconds']:g} s "
                     f"after {sizes['e2e_warmup_seconds']:g} s of warm-up (not counted), sent with acks=all "
                     "by a paced producer in this process and received by a consumer in another "
                     f"(bench.e2e_consumer), both timed with CLOCK_MONOTONIC; settings: {settings}. "
                     "'lost' counts records sent that never arrived; the percentiles cover those that arrived.")
    if results.get("startup"):
        notes.append(f"Start-up: {sizes['cold_starts']} fresh broker(s) of each kind, taking turns, each "
                     "timed from starting its process to the first Metadata answer naming a broker, polled "
                     "every 20 ms on a new connection; the fastest is the figure. Idle RSS is read "
                     f"{sizes['idle_seconds']:g} s after that answer, without clients; RSS under load is the "
                     "highest VmHWM over the produce runs.")
    if results.get("log"):
        notes.append("Log scaling: one partition of 50 batches of 10 records, then ~1 MiB batches, then 50 "
                     f"batches of 10 records; {sizes['fetch_samples']} fetches of at most 4096 bytes at each end, "
                     "head and tail alternating. Start-up is timed from starting `python -m broker` to its "
                     f"'listening on' line, the fastest of {sizes['startup_repeats']} clean start(s) (all in "
                     "the JSON); 'after SIGKILL' is the first start after the running broker was killed with "
                     "SIGKILL. The page cache is not dropped.")
    if results.get("partitions"):
        notes.append(f"Many partitions: a fresh broker of each kind, {sizes['many_partitions']:,} partitions in topics "
                     f"of {sizes['many_partitions_per_topic']}; Metadata timed with confluent-kafka's list_topics "
                     f"and Sluice's client, median of {sizes['metadata_samples']}; then "
                     f"{sizes['many_records_per_partition']} record(s) per partition produced with acks=all, "
                     "the first record of every partition acknowledged before the rest is sent.")
    return notes


def _profile_section(kind: str, profile: dict) -> list[str]:
    if "error" in profile:
        return ["", f"Profile ({kind}): {profile['error']}"]
    md = ["", f"### While kcat {kind}s", "",
          f"{profile['samples']} samples at {profile['rate_hz']} Hz of the Sluice broker while kcat "
          f"{kind}d {profile['records']:,} records (one partition, no compression"
          + (", acks=all" if kind == "produce" else ", cold starts from the beginning")
          + f") at {profile['records_per_s']:,.0f} records/s, broker CPU {profile['broker_cpu_s']:.2f} s "
          f"of {profile['seconds']:.2f} s. Share of samples per innermost Python function (a system "
          "call counts for the function that made it):", "", "| share | function |", "|---:|---|"]
    md += [f"| {e['share']:.1%} | `{e['function']}` |" for e in profile["top"]]
    md += ["", profile_figures(profile)] + _stage_table(profile)
    return md


def _stage_table(profile: dict) -> list[str]:
    """The samples by stage of the broker's work (bench.broker.profile.STAGES), with the
    broker's CPU seconds shared out over the samples not waiting for the socket."""
    stages = profile.get("stages")
    if not stages:
        return []
    busy = 1.0 - stages.get("waiting for the socket", 0.0)
    md = ["", "By stage (each sample counts for the innermost function named in "
              "bench.broker.profile.STAGES; CPU seconds shared out over the samples not waiting "
              "for the socket):", "", "| stage | share of samples | broker CPU s | per M records |",
          "|---|---:|---:|---:|"]
    for stage, share in stages.items():
        if stage == "waiting for the socket" or busy <= 0:
            md.append(f"| {stage} | {share:.1%} | - | - |")
            continue
        cpu = profile["broker_cpu_s"] * share / busy
        md.append(f"| {stage} | {share:.1%} | {cpu:.3f} | {cpu / profile['records'] * 1e6:.3f} |")
    return md


def cpu_per_record(results: dict) -> list[str]:
    """Wall time, broker CPU (also per million records) and client CPU, Sluice's beside
    Kafka's, for the produce and consume runs where Sluice is behind Kafka."""
    lines = []
    for section, keys in (("produce", ("client", "acks", "partitions", "compression")),
                          ("perftest", ("client", "partitions")), ("consume", ("client",))):
        rows = results.get(section) if isinstance(results.get(section), list) else []
        for s in rows:
            if s["broker"] != "sluice":
                continue
            k = _pick(rows, broker="kafka", **{key: s[key] for key in keys})
            if not k or s["records_per_s"] >= k["records_per_s"]:
                continue
            label = " ".join(f"acks={s[key]}" if key == "acks" else f"{s[key]}p" if key == "partitions"
                             else str(s[key]) for key in keys)
            per = {r["broker"]: r["broker_cpu_s"] / r["records"] * 1e6 for r in (s, k)}
            lines.append(f"| {section} {label} | {1 - s['records_per_s'] / k['records_per_s']:.0%} | "
                         f"{s['seconds']:.2f} / {k['seconds']:.2f} | {s['broker_cpu_s']:.2f} / "
                         f"{k['broker_cpu_s']:.2f} | {per['sluice']:.2f} / {per['kafka']:.2f} | "
                         f"{s['client_cpu_s']:.2f} / {k['client_cpu_s']:.2f} |")
    if not lines:
        return []
    return ["", "Wall time and CPU of each run where Sluice is behind (Sluice / Kafka; broker CPU "
            "from /proc, client CPU this process's and kcat's):", "",
            "| run | Sluice behind by | wall s | broker CPU s | broker CPU s per M records | client CPU s |",
            "|---|---:|---:|---:|---:|---:|"] + lines


def markdown_report(results: dict, rows: list[dict], targets: list[dict], chart_name: str | None) -> str:
    kafka = results.get("kafka") or {}
    if kafka.get("included"):
        kafka_line = (f"- kafka: Apache Kafka {kafka['version']} (Maven Central's kafka_2.13), one KRaft node "
                      "in combined mode (broker and controller), a JVM of its own with Kafka's default "
                      "heap and GC flags (-Xmx1g -Xms1g, G1), its log in a temporary directory "
                      "(bench.kafka_broker).")
    else:
        kafka_line = f"- kafka: NOT IN THIS RUN: {kafka.get('unavailable') or 'no section that uses it ran'}"
    md = [f"# Broker benchmarks: Sluice vs Apache Kafka vs librdkafka's mock cluster ({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']}), {results['clients']['kcat']}"
          + (f", Kafka's ProducerPerformance {kafka['version']}" if kafka.get("included") else ""),
          f"- sizes: {json.dumps(results['sizes'])}",
          "- sluice: `python -m broker`, its data in a temporary directory; mock: librdkafka's mock"
          " cluster in a process of its own (bench.mock_broker), its log in memory.",
          kafka_line,
          f"- run time: {results['seconds']:.0f} s ({results.get('section_seconds', {})}); "
          f"load average (1/5/15 min) before {_loads(results, 'before')}, after "
          f"{_loads(results, 'after')} on {results['machine']['cores']} cores", ""]
    md += ["## Targets", "", "| target | ratio | needs | verdict | detail |", "|---|---|---|---|---|"]
    for t in targets:
        ratio = _ratio(t["ratio"])
        sign = "≥" if t["higher_is_better"] else "≤"
        md.append(f"| {t['target']} | {ratio} | {sign} {t['limit']}x | {_verdict(t)} | {t['detail']} |")
    if results.get("quotas"):
        md += ["", "## Quota accounting (--quotas)", "", "Sluice with producer_byte_rate, consumer_byte_rate "
               "and request_percentage set for every client but never reached, beside Sluice without any quota, "
               "taking turns in each configuration (bench.broker.quotas).", "",
               "| configuration | with quotas (rec/s) | without (rec/s) | ratio |", "|---|---:|---:|---:|"]
        md += [f"| {_quota_configuration(q)} | {_fmt(q['with_quotas'])} | {_fmt(q['without'])} | {_x(q['ratio'])} |"
               for q in results["quotas"]]
    md += ["", "## Figures", "", "| benchmark | figure | unit | sluice | kafka | mock | sluice/kafka | sluice/mock |",
           "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['section']} | {r['name']} | {r['unit']} | {_fmt(r['sluice'])} | "
                  f"{_fmt(r.get('kafka'))} | {_fmt(r['mock'])} | {_x(r.get('ratio_kafka'))} | {_x(r['ratio'])} |")
    startup = results.get("startup") or []
    if startup:
        k = _pick(startup, broker="kafka")
        md += ["", "Start-up: a fresh broker per start, timed from starting its process to its first "
                   "Metadata answer naming a broker"
                   + (" (Kafka: the JVM's start, its storage formatted beforehand"
                      + (f", which took {k['format_s']:.2f} s more" if k.get("format_s") else "") + ")"
                      if k else "")
                   + "; all starts: " + "; ".join(
                       f"{r['broker']} " + ", ".join(f"{x:.2f}" for x in r["all_start_s"]) + " s"
                       for r in startup) + ". Threads once idle: " + ", ".join(
                       f"{r['broker']} {r['threads']}" for r in startup) + "."]
    if results.get("log"):
        large = results["log"]["large"]
        md += ["", f"Log scaling (Sluice only): {large['records']:,} records in {large['segments']} segments of "
                   f"{large['segment_bytes'] // MIB} MiB, filled at {large['fill']['bulk_mb_per_s']:.0f} MB/s "
                   f"(Sluice client, 1 MiB batches, 4 in flight, acks=1). First fetch after a clean "
                   f"restart: head {large['first_fetch_after_restart_ms']['head']:.2f} ms, tail "
                   f"{large['first_fetch_after_restart_ms']['tail']:.2f} ms."]
    behind = behind_kafka(rows)
    if behind:
        md += ["", "## Where Sluice is behind Kafka", "",
               f"{len(behind)} of the {sum(1 for r in rows if r.get('ratio_kafka') is not None)} figures "
               "measured on both:", "", "| benchmark | figure | unit | sluice | kafka | gap |", "|---|---|---|---:|---:|---|"]
        md += [f"| {r['section']} | {r['name']} | {r['unit']} | {_fmt(r['sluice'])} | {_fmt(r['kafka'])} | "
               f"{r['gap']} |" for r in behind]
        md += cpu_per_record(results)
    elif kafka.get("included"):
        md += ["", "## Where Sluice is behind Kafka", "", "Nowhere among the figures measured on both in this run."]
    md += cpu_split_table(results.get("produce") or [])
    fetches = [t for t in results.get("consume_fetches") or [] if "error" not in t]
    if fetches:
        md += ["", "## Where the consume time goes (librdkafka's protocol log)", "",
               "One more kcat cold start per broker (default settings), with `-d protocol`. Read from "
               "its log: the data phase runs from the first Fetch sent to the last Fetch response "
               "that carried data (the final, end-of-topic response is left out); waiting is the sum "
               "of those responses' round trips (rtt), handling the rest of the data phase.", "",
               "| broker | run s | fetches | MB per fetch | first fetch after ms | data phase ms | "
               "waiting ms | handling ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        md += [f"| {t['broker']} | {t['seconds']:.2f} | {t['fetches']} | {t['mb_per_fetch']:.2f} | "
               f"{t['to_first_fetch_ms']:.0f} | {t['data_ms']:.0f} | {t['waiting_ms']:.0f} | "
               f"{t['handling_ms']:.0f} |" for t in fetches]
        md += ["", consume_figures(results)]
    profile = results.get("profile")
    if profile:
        md += ["", "## Where the broker's time goes (py-spy)"]
        md += _profile_section("produce", profile)
        if profile.get("consume"):
            md += _profile_section("consume", profile["consume"])
    md += ["", "## Method", ""] + [f"- {note}" for note in method(results)]
    if chart_name:
        md += ["", f"![chart]({chart_name})"]
    return "\n".join(md) + "\n"


def chart(results: dict, path: str) -> None:
    """Six panels of the table's figures, one bar per broker measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    colors = {"sluice": "#1f77b4", "kafka": "#2ca02c", "mock": "#ff7f0e"}
    rows = comparison_rows(results)
    fig, axes = plt.subplots(2, 3, figsize=(17, 10))
    fig.suptitle(f"Sluice vs Apache Kafka vs librdkafka mock cluster ({results['mode']}, {results['date']})\n"
                 f"{describe_machine()}", fontsize=9)

    def panel(ax, selected, title, xlabel, scale=1.0, log_scale=False, limit=None):
        if not selected:
            ax.set_title(title + " (not run)", fontsize=9)
            ax.axis("off")
            return
        brokers = [b for b in BROKERS if any(r.get(b) is not None for r in selected)]
        y = np.arange(len(selected))
        h = 0.8 / len(brokers)
        for i, broker in enumerate(brokers):
            ax.barh(y - 0.4 + h * (i + 0.5), [(r.get(broker) or 0) * scale for r in selected], h,
                    label=broker, color=colors[broker])
        ax.set_yticks(y, [f"{r['name']} [{r['unit']}]" if r["unit"] not in ("rec/s", "ms", "broker CPU s")
                          else r["name"] for r in selected], fontsize=6.5)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        if log_scale:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if limit:
            ax.axvline(limit, color="red", linestyle="--", linewidth=0.8)
        ax.legend(fontsize=7)

    def pick(section, unit=None, name=None):
        return [r for r in rows if r["section"] == section and (unit is None or r["unit"] == unit)
                and (name is None or name in r["name"])]

    panel(axes[0][0], pick("produce", "rec/s"), "produce (100-byte records)", "thousand records/s", 1e-3)
    panel(axes[1][0], pick("produce", "broker CPU s"), "produce: broker CPU", "CPU seconds")
    panel(axes[0][1], pick("consume", "rec/s"), "consume, cold start", "thousand records/s", 1e-3)
    panel(axes[1][1], pick("e2e", "ms"), "end-to-end latency (producer paced)", "ms (log scale)",
          log_scale=True, limit=5.0)
    panel(axes[0][2], pick("startup") + pick("memory"), "start-up and memory", "s / MiB (log scale)",
          log_scale=True)
    panel(axes[1][2], pick("partitions"), "many partitions", "value (log scale)", log_scale=True)
    fig.tight_layout()
    fig.savefig(path, dpi=72, format="png")
    plt.close(fig)


def write_reports(results: dict, out_dir: str, with_chart: bool = True) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    stem = f"broker-{results['date']}" + ("-quick" if results["mode"] == "quick" else "") \
        + ("" if results["mode"] in ("quick", "full") else f"-{results['mode']}")
    paths = {"json": os.path.join(out_dir, stem + ".json"), "md": os.path.join(out_dir, stem + ".md")}
    chart_name = None
    if with_chart:
        paths["png"] = os.path.join(out_dir, stem + ".png")
        chart(results, paths["png"] + ".tmp")  # format given: the name ends in .tmp
        os.replace(paths["png"] + ".tmp", paths["png"])
        chart_name = os.path.basename(paths["png"])
    _atomic_write(paths["json"], json.dumps(_rounded(results), indent=1) + "\n")
    _atomic_write(paths["md"], markdown_report(results, results["table"], results["targets"], chart_name))
    return paths

