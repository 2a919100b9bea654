"""librdkafka's mock cluster as a process of its own, the baseline broker of `bench.broker`.

The mock cluster is a Kafka broker written in C that keeps its log in memory. The
usual way to get one (`Producer({"test.mock.num.brokers": 1})`) runs it inside the
calling process and offers no way to create topics (the mock does not implement
CreateTopics; it auto-creates topics with 4 partitions). Here it runs in a child
process through librdkafka's C API (ctypes, on the librdkafka that confluent-kafka
ships), so that:

- its CPU time and peak RSS can be read from /proc/<pid> exactly as for Sluice's
  broker process (the child also holds an idle Python interpreter, ~10 MB of RSS);
- it never competes for the benchmark process's GIL;
- topics get the partition count a benchmark asks for (`rd_kafka_mock_topic_create`).

Protocol (one line each way, on stdin/stdout): the child prints
`listening on HOST:PORT`, then answers `create TOPIC PARTITIONS` and `delete TOPIC`
with `ok` or `error CODE`, and exits on end of input, on `quit`, or after
`--max-seconds` whatever happens (a watchdog).

    python -m bench.mock_broker [--max-seconds S]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
import threading

_LISTENING = re.compile(r"listening on (\S+:\d+)")


def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    candidates = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not candidates:  # a confluent-kafka built against a system librdkafka
        candidates = ["librdkafka.so.1"]
    lib = ctypes.CDLL(candidates[0])
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, res, args in [
        ("rd_kafka_conf_new", vp, []),
        ("rd_kafka_conf_set", i, [vp, cp, cp, cp, ctypes.c_size_t]),
        ("rd_kafka_new", vp, [i, vp, cp, ctypes.c_size_t]),
        ("rd_kafka_destroy", None, [vp]),
        ("rd_kafka_mock_cluster_new", vp, [vp, i]),
        ("rd_kafka_mock_cluster_destroy", None, [vp]),
        ("rd_kafka_mock_cluster_bootstraps", cp, [vp]),
        ("rd_kafka_mock_topic_create", i, [vp, cp, i, i]),
        ("rd_kafka_mock_topic_delete", i, [vp, cp]),
    ]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def serve(max_seconds: float) -> int:
    lib = _librdkafka()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
    rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER
    if not rk:
        print(f"error rd_kafka_new: {errstr.value.decode()}", flush=True)
        return 1
    cluster = lib.rd_kafka_mock_cluster_new(rk, 1)
    if not cluster:
        print("error rd_kafka_mock_cluster_new failed", flush=True)
        return 1
    threading.Timer(max_seconds, lambda: os._exit(3)).start()  # never outlive the benchmark
    bootstrap = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
    print(f"listening on {bootstrap}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "create" and len(words) == 3:
            err = lib.rd_kafka_mock_topic_create(cluster, words[1].encode(), int(words[2]), 1)
        elif words[0] == "delete" and len(words) == 2:
            err = lib.rd_kafka_mock_topic_delete(cluster, words[1].encode())
        else:
            err = -1
        print("ok" if err == 0 else f"error {err}", flush=True)
    lib.rd_kafka_mock_cluster_destroy(cluster)
    lib.rd_kafka_destroy(rk)
    os._exit(0)  # the watchdog timer thread must not keep the process alive


class MockBrokerProcess:
    """The mock cluster in a child process: `with MockBrokerProcess() as mock: mock.pid`."""

    def __init__(self, max_seconds: float = 3600.0):
        self.max_seconds = max_seconds
        self.proc: subprocess.Popen | None = None
        self.bootstrap_servers = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> "MockBrokerProcess":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.mock_broker", "--max-seconds", str(self.max_seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        line = self._read_line(timeout)
        match = _LISTENING.search(line)
        if not match:
            self.stop()
            raise RuntimeError(f"mock cluster did not start: {line!r}")
        self.bootstrap_servers = match.group(1)
        return self

    def _read_line(self, timeout: float) -> str:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            raise TimeoutError(f"mock cluster gave no answer within {timeout:g} s")
        return result[0]

    def _command(self, line: str, timeout: float = 10.0) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self._read_line(timeout).strip()
        if answer != "ok":
            raise RuntimeError(f"mock cluster: {line!r} -> {answer!r}")

    def create_topic(self, topic: str, partitions: int) -> None:
        self._command(f"create {topic} {partitions}")

    def delete_topic(self, topic: str) -> None:
        self._command(f"delete {topic}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        finally:
            self.proc = None

    def __enter__(self) -> "MockBrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=3600.0,
                        help="exit after this long whatever happens (default 3600)")
    args = parser.parse_args(argv)
    return serve(args.max_seconds)


if __name__ == "__main__":
    sys.exit(main())
