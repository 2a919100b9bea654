"""7. Where the Sluice broker's time goes: py-spy samples while kcat produces, then while
kcat consumes, as the share of samples per innermost Python function."""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

from bench.broker.consume import consume_kcat
from bench.broker.produce import kcat_records_file, produce_kcat
from bench.common import Probe, Sizes, SluiceTarget


_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
PROFILE_TOP = 12
PROFILE_RATE_HZ = 250
PROFILE_MIN_SECONDS = 2.0  # py-spy skips idle samples: a produce shorter than a few of its
PROFILE_MAX_ROUNDS = 200   # intervals (a tiny run) can leave it with none, so short runs repeat


def py_spy_path() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def leaf_shares(raw_lines, top: int = PROFILE_TOP) -> tuple[int, list[dict]]:
    """(samples, the `top` innermost functions by share) from py-spy's raw output, one
    `frame;frame;...;leaf count` line per distinct stack. A system call counts for the
    Python function that made it (py-spy samples Python frames only)."""
    counts: collections.Counter = collections.Counter()
    total = 0
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.split(";")[-1].strip()
        match = _FRAME.match(leaf)
        name = f"{match['function']} ({os.path.basename(match['file'])})" if match else leaf or "?"
        counts[name] += int(count)
        total += int(count)
    return total, [{"function": name, "share": n / total} for name, n in counts.most_common(top)]


# The broker's stages, each named by the functions (file basename, function name or None
# for any in the file) whose samples it takes. A sample goes to the stage of the innermost
# frame that names one, so a function counts for the finest stage it lies in (an index
# entry written during an append counts for "index", a checksum for "validation").
STAGES = (
    ("request read", (("selector_events.py", "_SelectorSocketTransport._read_ready__get_buffer"),
                      ("server.py", "Connection.get_buffer"), ("server.py", "Connection.buffer_updated"),
                      ("frames.py", None))),
    ("decode", (("protocol.py", None), ("schema.py", None), ("primitives.py", None))),
    ("validation", (("records.py", None),)),
    ("idempotence check", (("producer_state.py", None),)),
    ("index", (("index.py", None),)),
    ("append", (("segment.py", "LogSegment.append"), ("log.py", "PartitionLog.append"),
                ("log.py", "PartitionLog._store"))),
    ("fetch read", (("log.py", "PartitionLog.read"), ("log.py", "PartitionLog._read"),
                    ("log.py", "PartitionLog.read_committed"), ("segment.py", None))),
    ("response", (("broker.py", "Broker._encode"), ("broker.py", "Broker._encode_when_done"),
                  ("server.py", "Connection._send"), ("server.py", "Connection._flush"),
                  ("server.py", "Connection._add_response"), ("server.py", "Connection._write_replies"),
                  ("unix_events.py", None), ("selector_events.py", "_SelectorSocketTransport.write"),
                  ("transports.py", None))),
    ("request handling", (("handlers", None), ("partition.py", None), ("delayed.py", None),
                          ("broker.py", "Broker.handle_frame"), ("server.py", "Connection._answer"),
                          ("server.py", "Connection._handle"))),
    ("waiting for the socket", (("selectors.py", None),)),
    ("event loop", (("base_events.py", None), ("events.py", None), ("tasks.py", None),
                    ("futures.py", None))),
)


def _stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        match = _FRAME.match(frame.strip())
        if not match:
            continue
        path, function = match["file"], match["function"]
        base = os.path.basename(path)
        for stage, rules in STAGES:
            for where, name in rules:
                if (where == base or where in path.split(os.sep)) and (name is None or name == function):
                    return stage
    return "other"


def stage_shares(raw_lines) -> dict[str, float]:
    """Each stage's share of py-spy's samples (see STAGES), from its raw output."""
    counts: collections.Counter = collections.Counter()
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            counts[_stage_of(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return {stage: counts[stage] / total for stage, _ in STAGES + (("other", ()),) if counts[stage]}


def _stop_recorder(recorder: subprocess.Popen) -> str:
    """SIGINT makes py-spy write its output and exit; its stderr."""
    recorder.send_signal(signal.SIGINT)
    try:
        return recorder.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        recorder.kill()
        return recorder.communicate()[1]


def _recorded(spy: str, pid: int, out: str, work) -> tuple[dict, str, int]:
    """py-spy recording broker `pid` while `work(round)` runs (again until PROFILE_MIN_SECONDS
    have passed): (the Probe's figures, py-spy's stderr, rounds)."""
    recorder = subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw",
                                 "--output", out, "--rate", str(PROFILE_RATE_HZ), "--nonblocking"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # attached before the first record
        probe = Probe(pid)
        rounds = 0
        while rounds < PROFILE_MAX_ROUNDS and (
                rounds == 0 or time.perf_counter() - probe.t0 < PROFILE_MIN_SECONDS):
            work(rounds)
            rounds += 1
        m = probe.stop()
    finally:
        err = _stop_recorder(recorder)
    return m, err, rounds


def bench_profile(workdir: str, sizes: Sizes, pool, log) -> dict:
    """py-spy of the Sluice broker while kcat produces (acks=all, one partition), then while
    kcat consumes that partition from the beginning (cold starts, as in 2.)."""
    spy = py_spy_path()
    if spy is None:
        log("  py-spy is not installed: no profile")
        return {"error": "py-spy is not installed"}
    path = os.path.join(workdir, "profile-records.txt")
    kcat_records_file(path, sizes.records, pool)
    outs = {kind: os.path.join(workdir, f"profile-{kind}.txt") for kind in ("produce", "consume")}
    target = SluiceTarget(os.path.join(workdir, "profile"), sizes).start()
    topic = f"profile-{uuid.uuid4().hex[:6]}"
    try:
        target.create_topics({topic: 1})
        m, err, rounds = _recorded(spy, target.pid, outs["produce"], lambda _: produce_kcat(
            target.bootstrap, topic, path, "all", "none", sizes.step_timeout))
        produced = rounds * sizes.records
        cm, cerr, crounds = _recorded(spy, target.pid, outs["consume"], lambda _: consume_kcat(
            target.bootstrap, topic, produced, sizes.step_timeout))
    finally:
        target.stop()
        os.remove(path)
    result = {}
    for kind, figures, error, records in (("produce", m, err, produced),
                                          ("consume", cm, cerr, crounds * produced)):
        if not os.path.exists(outs[kind]):
            log(f"  py-spy recorded nothing ({kind}): {error.strip()[-300:]}")
            result[kind] = {"error": f"py-spy recorded nothing: {error.strip()[-300:]}"}
            continue
        with open(outs[kind]) as f:
            samples, top = leaf_shares(f)
        with open(outs[kind]) as f:
            stages = stage_shares(f)
        log(f"  {kind}: {samples} samples while kcat {kind}d {records:,} records "
            f"({records / figures['seconds']:,.0f} rec/s, broker CPU {figures['broker_cpu_s']:.2f} s "
            f"of {figures['seconds']:.2f} s):")
        for entry in top:
            log(f"    {entry['share']:6.1%}  {entry['function']}")
        log("    by stage: " + ", ".join(f"{stage} {share:.1%}" for stage, share in stages.items()))
        result[kind] = {"client": "kcat", "partitions": 1, "compression": "none", "records": records,
                        "records_per_s": records / figures["seconds"], "samples": samples,
                        "rate_hz": PROFILE_RATE_HZ, "top": top, "stages": stages, **figures}
    produce = result["produce"]
    # the produce profile's figures stay at the top level, as before; the consume one beside them
    return {**({"acks": "all"} if "error" not in produce else {}), **produce, "consume": result["consume"]}

