"""Topics of one broker: names, topic ids, partition counts, config overrides, logs.

The registry is `topics.json` in the data directory, rewritten atomically on every
change; each partition's log lives in `<topic>-<partition>/`, as in Kafka. Recovery
points, log start offsets and high watermarks go to Kafka-style checkpoint files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode

from broker.config import BrokerConfig, ConfigError, parse_topic_configs
from broker.storage.checkpoint import read_checkpoint, write_atomically, write_checkpoint
from broker.storage.log import PartitionLog

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
REGISTRY = "topics.json"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
MAX_PARTITIONS = 100_000
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        self.code = code
        super().__init__(message)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    logs: list[PartitionLog] = field(default_factory=list)
    # The Metadata handler's encoded entries for this topic, per version, with the partition
    # state they describe; kept here so that they go when the topic does.
    encoded_metadata: dict[int, tuple] = field(default_factory=dict, compare=False, repr=False)

    @property
    def internal(self) -> bool:
        """The broker's own topics (group offsets, transaction state), as Kafka names them."""
        return self.name in INTERNAL_TOPICS


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL_NAME.match(name):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'")


class TopicManager:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.data_dir = config.data_dir
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}

    # -- startup and shutdown --------------------------------------------------------
    def load(self) -> bool:
        """Open every topic's logs; returns whether the last shutdown was clean."""
        os.makedirs(self.data_dir, exist_ok=True)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN)
        clean = os.path.exists(marker) or not os.path.exists(os.path.join(self.data_dir, REGISTRY))
        registry = self._read_registry()
        recovery = read_checkpoint(os.path.join(self.data_dir, RECOVERY_POINTS))
        starts = read_checkpoint(os.path.join(self.data_dir, LOG_START_OFFSETS))
        for name, entry in registry.items():
            topic = Topic(name, uuid.UUID(entry["id"]), entry.get("configs", {}))
            log_config = self.config.log_config(topic.configs)
            for p in range(entry["partitions"]):
                topic.logs.append(PartitionLog(
                    self._partition_dir(name, p), name, p, log_config,
                    recovery_point=None if clean else recovery.get((name, p), 0),
                    log_start_offset=starts.get((name, p), 0)))
            self._register(topic)
        if os.path.exists(marker):
            os.unlink(marker)  # from now on, a crash leaves no marker
        self.write_checkpoints()
        return clean

    def close(self) -> None:
        """Flush and close every log, then mark the shutdown clean."""
        for topic in self.topics.values():
            for log in topic.logs:
                log.close()
        self.write_checkpoints()
        write_atomically(os.path.join(self.data_dir, CLEAN_SHUTDOWN), b"")

    def write_checkpoints(self) -> None:
        logs = [log for topic in self.topics.values() for log in topic.logs]
        for filename, attr in ((RECOVERY_POINTS, "recovery_point"),
                               (LOG_START_OFFSETS, "log_start_offset"),
                               (HIGH_WATERMARKS, "high_watermark")):
            write_checkpoint(os.path.join(self.data_dir, filename),
                             {(log.topic, log.partition): getattr(log, attr) for log in logs})

    # -- lookups ---------------------------------------------------------------------
    def log(self, topic: str, partition: int) -> PartitionLog:
        entry = self.topics.get(topic)
        if entry is None or not 0 <= partition < len(entry.logs):
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"this broker has no partition {topic}-{partition}")
        return entry.logs[partition]

    def all_logs(self):
        for topic in self.topics.values():
            yield from topic.logs

    # -- changes ---------------------------------------------------------------------
    def create(self, name: str, partitions: int, configs: dict[str, str | None],
               validate_only: bool = False) -> Topic | None:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions < 1 or partitions > MAX_PARTITIONS:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"number of partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}")
        collision = name.replace(".", "_")
        if any(t.replace(".", "_") == collision for t in self.topics):
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"topic {name!r} collides with an existing topic ('.' and '_' are alike)")
        try:
            overrides = parse_topic_configs(configs)
        except ConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if validate_only:
            return None
        topic = Topic(name, uuid.uuid4(), overrides)
        topic.logs = self._open_new_partitions(name, range(partitions),
                                               self.config.log_config(overrides))
        self._register(topic)
        self._write_registry()
        return topic

    def delete(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        del self.topics[name]
        del self.by_id[topic.topic_id]
        self._write_registry()
        for log in topic.logs:
            log.delete()
        self.write_checkpoints()

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.logs)
        if count <= current:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"topic {name!r} has {current} partitions; the new count must be larger, not {count}")
        if count > MAX_PARTITIONS:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"at most {MAX_PARTITIONS} partitions")
        if validate_only:
            return
        for p in range(current, count):
            shutil.rmtree(self._partition_dir(name, p), ignore_errors=True)  # a deleted topic's leftovers
        topic.logs += self._open_new_partitions(name, range(current, count),
                                                self.config.log_config(topic.configs))
        self._write_registry()

    def _open_new_partitions(self, name: str, partitions: range, log_config) -> list[PartitionLog]:
        """The new partitions' logs, or none: a failure half way (such as running out of
        file descriptors with thousands of partitions) removes those already made, which
        would otherwise hold their files open forever, and is KAFKA_STORAGE_ERROR."""
        logs = []
        try:
            for p in partitions:
                logs.append(PartitionLog(self._partition_dir(name, p), name, p, log_config,
                                         recovery_point=0))
        except OSError as exc:
            for log in logs:
                log.delete()
            failed = partitions.start + len(logs)
            shutil.rmtree(self._partition_dir(name, failed), ignore_errors=True)
            raise TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create partition {failed} "
                             f"of topic {name!r}: {exc.strerror or exc}") from None
        return logs

    # -- persistence -----------------------------------------------------------------
    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    def _partition_dir(self, name: str, partition: int) -> str:
        return os.path.join(self.data_dir, f"{name}-{partition}")

    def _read_registry(self) -> dict:
        path = os.path.join(self.data_dir, REGISTRY)
        try:
            with open(path, "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise RuntimeError(f"{path} is corrupt ({exc}); refusing to start") from None

    def _write_registry(self) -> None:
        registry = {t.name: {"id": str(t.topic_id), "partitions": len(t.logs), "configs": t.configs}
                    for t in self.topics.values()}
        write_atomically(os.path.join(self.data_dir, REGISTRY),
                         json.dumps(registry, indent=1, sort_keys=True).encode())
