"""Topics of one broker: names, topic ids, partition counts, config overrides, and each
partition's `Partition` (replica state) over its log; nothing else opens a log.

The registry is `topics.json` in the data directory, rewritten atomically on every
change; each partition's log lives in `<topic>-<partition>/`, as in Kafka. Recovery
points, log start offsets and high watermarks go to Kafka-style checkpoint files.

Deleting a topic renames each partition directory `<topic>-<partition>.<topic id>-delete`,
as Kafka names it (a rename needs no space: the disk may be full), and writes the
registry; a thread of its own (`DirectoryRemover`) empties those directories, freeing
their space, and removes each once the registry no longer lists what it held, as Kafka
deletes logs in the background: unlinking a gigabyte takes some 0.3 s, which the event
loop would stand still for. Until then (a crash, a stop, or still no space for the
registry) such a directory says the topic is deleted: a start finishes the deletion,
before the broker serves, so it never comes back. Deleting one
replica of a topic whose other partitions stay (a cluster broker's) goes the same way,
its directory renamed `<topic>-<partition>.<topic id>.replica-delete`: that says only
this replica is deleted, and a start drops it alone from the registry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import resource
import shutil
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode

from broker.client_quotas import UNBOUNDED, ControllerMutationQuota
from broker.clock import Clock
from broker.config import BrokerConfig, ConfigError, parse_topic_configs
from broker.errors import BrokerError
from broker.failpoints import fail_point
from broker.replica.delayed import DelayedOperations
from broker.replica.partition import Partition
from broker.storage.checkpoint import read_checkpoint, write_atomically, write_checkpoint
from broker.storage.log import PartitionLog
from broker.storage.segment import READ_CACHE_FILES

log = logging.getLogger("sluice.topics")

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
REGISTRY = "topics.json"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
MAX_PARTITIONS = 100_000
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
# What the internal topics' owners rely on (they compact, nothing expires their records).
INTERNAL_REQUIRED_CONFIGS = {"cleanup.policy": "compact"}
DELETED_SUFFIX = "-delete"
REPLICA_DELETED_SUFFIX = ".replica" + DELETED_SUFFIX  # one replica deleted, its topic kept

# Descriptors kept for all but the active segments: client connections, index, checkpoint
# and snapshot files opened for a moment, the interpreter's own (the read cache of sealed
# segments, READ_CACHE_FILES, comes on top).
FD_RESERVE = 256


def partition_budget() -> tuple[int, int]:
    """(how many partitions this process can keep open, its RLIMIT_NOFILE): each
    partition's active segment holds one descriptor."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_PARTITIONS, soft
    return max(0, soft - FD_RESERVE - READ_CACHE_FILES), soft


class DirectoryRemover:
    """Empties and removes the directories of deleted logs in a thread of its own, one
    at a time in the order asked, so that a directory is emptied before it is removed."""

    def __init__(self):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-remover")
        self._last: Future | None = None

    def empty(self, directory: str) -> None:
        """Unlink the directory's files, freeing their space; the directory stays."""
        self._last = self._executor.submit(_unlink_files, directory)

    def remove(self, directory: str) -> None:
        """Remove the directory with whatever is still in it."""
        self._last = self._executor.submit(shutil.rmtree, directory, ignore_errors=True)

    def wait(self) -> None:
        """Return once everything asked so far is done."""
        if self._last is not None:
            self._last.result()

    def close(self) -> None:
        """Wait for the directory under way; those not begun are left to the next start
        (their names say they are deleted)."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def _unlink_files(directory: str) -> None:
    try:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
    except OSError as exc:  # the next start removes what is left
        log.warning("cannot empty the deleted log directory %s: %s", directory, exc)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    # The partitions this broker holds a replica of, by index: every one on the single
    # node, those the controller assigned it in a cluster.
    partitions: dict[int, Partition] = field(default_factory=dict)
    # The Metadata handler's encoded entries for this topic, per version, with the partition
    # state they describe; kept here so that they go when the topic does.
    encoded_metadata: dict[int, tuple] = field(default_factory=dict, compare=False, repr=False)

    @property
    def internal(self) -> bool:
        """The broker's own topics (group offsets, transaction state), as Kafka names them."""
        return self.name in INTERNAL_TOPICS


def _local_partitions(entry: dict) -> list[int]:
    """The partition indexes a registry entry holds: a count (every partition, as the
    single node writes it) or the list of indexes (a cluster broker's replicas)."""
    partitions = entry["partitions"]
    return list(range(partitions)) if isinstance(partitions, int) else partitions


def _registry_partitions(topic: Topic) -> int | list[int]:
    indexes = sorted(topic.partitions)
    return len(indexes) if indexes == list(range(len(indexes))) else indexes


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL_NAME.match(name):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'")



def checked_overrides(config, name: str, configs: dict[str, str | None]) -> dict[str, str]:
    """The overrides `configs` make for topic `name` (INVALID_CONFIG for a bad one). An
    internal topic keeps its required settings: one left out is put back, one changed is
    refused."""
    try:
        overrides = config.topic_overrides(configs)
    except ConfigError as exc:
        raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if name in INTERNAL_TOPICS:
        for key, required in INTERNAL_REQUIRED_CONFIGS.items():
            if overrides.setdefault(key, required) != required:
                raise BrokerError(ErrorCode.INVALID_CONFIG,
                                  f"{key}: internal topic {name!r} must keep {required!r}")
    return overrides

class TopicManager:
    def __init__(self, config: BrokerConfig, delayed: DelayedOperations, clock: Clock,
                 admit_to_isr=None, known_in_cluster=None):
        """`admit_to_isr`: given to every partition (see `Partition`).
        `known_in_cluster(topic, partition)`: whether the cluster has that partition (a
        lookup of one this broker holds no replica of is then NOT_LEADER_OR_FOLLOWER, as
        Kafka answers it, rather than UNKNOWN_TOPIC_OR_PARTITION)."""
        self.config = config
        self._admit_to_isr = admit_to_isr
        self._known_in_cluster = known_in_cluster
        self._delayed = delayed
        self._clock = clock
        self.data_dir = config.data_dir
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        # Renamed directories of deleted logs, removed once the registry no longer lists them.
        self._deleted_dirs: list[str] = []
        self._remover = DirectoryRemover()
        # The checkpoint files' contents taken, and the number of the last written.
        self._checkpoints_taken = self._checkpoints_written = 0
        self._checkpoints_lock = threading.Lock()

    # -- startup and shutdown --------------------------------------------------------
    def load(self) -> bool:
        """Open every topic's logs; returns whether the last shutdown was clean."""
        os.makedirs(self.data_dir, exist_ok=True)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN)
        clean = os.path.exists(marker) or not os.path.exists(os.path.join(self.data_dir, REGISTRY))
        registry = self._read_registry()
        self._finish_deletions(registry)
        recovery = read_checkpoint(os.path.join(self.data_dir, RECOVERY_POINTS))
        starts = read_checkpoint(os.path.join(self.data_dir, LOG_START_OFFSETS))
        high_watermarks = read_checkpoint(os.path.join(self.data_dir, HIGH_WATERMARKS))
        for name, entry in registry.items():
            topic = Topic(name, uuid.UUID(entry["id"]), entry.get("configs", {}))
            log_config = self.config.log_config(topic.configs)
            for p in _local_partitions(entry):
                topic.partitions[p] = self._partition(PartitionLog(
                    self._partition_dir(name, p), name, p, log_config,
                    recovery_point=None if clean else recovery.get((name, p), 0),
                    log_start_offset=starts.get((name, p), 0),
                    high_watermark=high_watermarks.get((name, p), 0), clock=self._clock))
            self._register(topic)
        if os.path.exists(marker):
            os.unlink(marker)  # from now on, a crash leaves no marker
        try:
            self.write_checkpoints()
        except OSError as exc:  # a full disk: the checkpoint job tries again
            log.warning("cannot write checkpoints at start-up: %s", exc)
        self._remover.wait()  # the deletions a crash or a stop interrupted, finished before serving
        return clean

    def _finish_deletions(self, registry: dict) -> None:
        """Drop from `registry` the topics whose deletion was interrupted (a partition
        directory renamed for it carries their topic id) and remove what is left of their
        logs; drop the replicas whose deletion was interrupted from their topics' entries."""
        deleted = [name for name in os.listdir(self.data_dir) if name.endswith(DELETED_SUFFIX)
                   and os.path.isdir(os.path.join(self.data_dir, name))]
        deleted_ids, deleted_replicas = set(), set()
        for name in deleted:
            if name.endswith(REPLICA_DELETED_SUFFIX):
                deleted_replicas.add(name[:-len(REPLICA_DELETED_SUFFIX)])  # <topic>-<partition>.<topic id>
            else:
                deleted_ids.add(name[:-len(DELETED_SUFFIX)].rpartition(".")[2])
        for name, entry in list(registry.items()):
            topic_id = uuid.UUID(entry["id"]).hex
            if topic_id in deleted_ids:
                del registry[name]
                for p in _local_partitions(entry):
                    shutil.rmtree(self._partition_dir(name, p), ignore_errors=True)
                log.info("finished deleting topic %s", name)
                continue
            gone = [p for p in _local_partitions(entry) if f"{name}-{p}.{topic_id}" in deleted_replicas]
            if gone:
                entry["partitions"] = [p for p in _local_partitions(entry) if p not in gone]
                log.info("finished deleting the replica(s) %s of topic %s", gone, name)
        self._deleted_dirs = [os.path.join(self.data_dir, name) for name in deleted]

    def close(self) -> None:
        """Flush and close every log, then mark the shutdown clean. When a write fails
        (a full disk) the shutdown is not clean: the next start recovers the logs."""
        try:
            for partition in self.all_partitions():
                partition.log.close()
            self.write_checkpoints()
            write_atomically(os.path.join(self.data_dir, CLEAN_SHUTDOWN), b"")
        except OSError as exc:
            log.warning("shutdown is not clean, the next start recovers the logs: %s", exc)
        finally:
            self._remover.close()

    def write_checkpoints(self) -> None:
        """Write the checkpoint files (and the registry a full disk refused) now."""
        self._write_checkpoint_files(*self._checkpoint_contents())

    async def write_checkpoints_in_thread(self) -> None:
        """`write_checkpoints`, the files written (each fsynced) by a worker thread, as
        Kafka's scheduler writes them: an fsync waits for whatever else the disk is
        doing (the gigabyte a moved replica just wrote), and the event loop stood still
        meanwhile."""
        await asyncio.to_thread(self._write_checkpoint_files, *self._checkpoint_contents())

    def _checkpoint_contents(self) -> tuple[int, dict[str, dict]]:
        """What each checkpoint file is to say now, numbered: a larger number is newer."""
        if self._deleted_dirs:
            self._write_registry()  # the one a full disk refused when a topic was deleted
        logs = [partition.log for partition in self.all_partitions()]
        for partition_log in logs:
            partition_log.settle_rolled_syncs()
        self._checkpoints_taken += 1
        return self._checkpoints_taken, {
            filename: {(log.topic, log.partition): getattr(log, attr) for log in logs}
            for filename, attr in ((RECOVERY_POINTS, "recovery_point"), (LOG_START_OFFSETS, "log_start_offset"),
                                   (HIGH_WATERMARKS, "high_watermark"))}

    def _write_checkpoint_files(self, number: int, contents: dict[str, dict]) -> None:
        """Write the checkpoint files, unless newer contents were written meanwhile (by
        the event loop, while a thread waited to write these)."""
        with self._checkpoints_lock:
            if number < self._checkpoints_written:
                return
            for filename, offsets in contents.items():
                write_checkpoint(os.path.join(self.data_dir, filename), offsets)
            self._checkpoints_written = number

    # -- lookups ---------------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> Partition:
        entry = self.topics.get(topic)
        if entry is None or partition not in entry.partitions:
            if self._known_in_cluster is not None and self._known_in_cluster(topic, partition):
                raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  f"broker {self.config.node_id} holds no replica of {topic}-{partition}")
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"this broker has no partition {topic}-{partition}")
        return entry.partitions[partition]

    def all_partitions(self):
        for topic in self.topics.values():
            yield from topic.partitions.values()

    def _partition(self, log: PartitionLog) -> Partition:
        """The log's partition: led by this broker alone on the single node; in a cluster
        without a role until the controller gives it one."""
        partition = Partition(log, self.config.node_id, self._delayed, self._clock,
                              self.config.replica_lag_time_max_ms, self._admit_to_isr)
        if not self.config.cluster_mode:
            partition.lead_alone()
        return partition

    # -- a cluster broker's replicas -------------------------------------------------
    def replica(self, name: str, topic_id: uuid.UUID, index: int) -> Partition | None:
        """This broker's replica of the partition of the topic with `topic_id`, if any."""
        topic = self.topics.get(name)
        if topic is None or topic.topic_id != topic_id:
            return None
        return topic.partitions.get(index)

    def open_replica(self, name: str, topic_id: uuid.UUID, index: int, configs: dict[str, str]) -> Partition:
        """Create this broker's replica of a partition the controller assigned it. A local
        topic of that name with another id was deleted in the cluster: it goes first."""
        topic = self.topics.get(name)
        if topic is not None and topic.topic_id != topic_id:
            log.info("topic %s (id %s) was deleted in the cluster; removing its local logs",
                     name, topic.topic_id)
            self.delete(name)
            topic = None
        if topic is None:
            try:
                overrides = parse_topic_configs(configs)
            except ConfigError as exc:  # written by another broker's version: keep the defaults
                log.warning("topic %s: ignoring its configs from ZooKeeper: %s", name, exc)
                overrides = {}
            topic = Topic(name, topic_id, overrides)
            self._register(topic)
        self._check_budget(name, 1)
        shutil.rmtree(self._partition_dir(name, index), ignore_errors=True)  # a stray of a deleted topic
        try:
            topic.partitions[index] = self._partition(PartitionLog(
                self._partition_dir(name, index), name, index, self.config.log_config(topic.configs),
                recovery_point=None, clock=self._clock, new=True))
            self._write_registry()
        except OSError as exc:
            self._remove_new_logs(topic, index, index + 1)
            if not topic.partitions:
                del self.topics[name], self.by_id[topic_id]
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"cannot create the replica {name}-{index}: {exc}") from None
        return topic.partitions[index]

    def delete_replica(self, name: str, index: int) -> None:
        """Remove this broker's replica of a partition (its topic deleted, or the replica
        moved away); the topic goes with its last local partition."""
        topic = self.topics.get(name)
        if topic is None or index not in topic.partitions:
            return
        if len(topic.partitions) == 1:
            self.delete(name)
            return
        partition = topic.partitions.pop(index)
        renamed = f"{partition.log.directory}.{topic.topic_id.hex}{REPLICA_DELETED_SUFFIX}"
        try:
            partition.log.delete(renamed)
            self._remover.empty(renamed)
            self._deleted_dirs.append(renamed)
            fail_point("replica-deleted-before-registry")
            self._write_registry()
        except OSError as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"cannot delete the replica {name}-{index}: {exc}") from None

    # -- changes ---------------------------------------------------------------------
    def create(self, name: str, partitions: int, configs: dict[str, str | None],
               validate_only: bool = False, mutations: ControllerMutationQuota = UNBOUNDED) -> Topic:
        """The new topic; with `validate_only`, the topic it would be (no logs, the zero
        id, registered nowhere), its configs for the CreateTopics answer. The partitions
        are recorded in `mutations` once the checks passed."""
        validate_topic_name(name)
        if name in self.topics:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions < 1 or partitions > MAX_PARTITIONS:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"number of partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}")
        collision = name.replace(".", "_")
        if any(t.replace(".", "_") == collision for t in self.topics):
            raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"topic {name!r} collides with an existing topic ('.' and '_' are alike)")
        try:
            overrides = self.config.topic_overrides(configs)
        except ConfigError as exc:
            raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        self._check_budget(name, partitions)
        if validate_only:
            return Topic(name, uuid.UUID(int=0), overrides)
        mutations.record(partitions)
        topic = Topic(name, uuid.uuid4(), overrides)
        log_config = self.config.log_config(overrides)
        self._open_new_logs(topic, log_config, partitions)
        self._register(topic)
        try:
            self._write_registry()
        except OSError as exc:  # a full disk: the topic was never created
            del self.topics[name], self.by_id[topic.topic_id]
            self._remove_new_logs(topic, 0)
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create topic {name!r}: {exc}") from None
        return topic

    def delete(self, name: str, mutations: ControllerMutationQuota = UNBOUNDED) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        mutations.record(len(topic.partitions))
        del self.topics[name]
        del self.by_id[topic.topic_id]
        renamed = [f"{partition.log.directory}.{topic.topic_id.hex}{DELETED_SUFFIX}"
                   for partition in topic.partitions.values()]
        self._deleted_dirs += renamed
        try:
            for partition, renamed_to in zip(topic.partitions.values(), renamed):
                partition.log.delete(renamed_to)
                self._remover.empty(renamed_to)
        except OSError as exc:
            if not any(os.path.exists(directory) for directory in renamed):
                self._register(topic)  # nothing was renamed: the topic stays
            # else a renamed directory says it is deleted: the next start finishes the job
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot delete topic {name}: {exc}") from None
        try:
            self._write_registry()
            self.write_checkpoints()
        except OSError as exc:  # the checkpoint job tries again
            log.warning("deleted topic %s; the registry and checkpoints are written once the "
                        "disk has space (%s)", name, exc)

    def add_partitions(self, name: str, count: int, validate_only: bool = False,
                       mutations: ControllerMutationQuota = UNBOUNDED) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count <= current:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"topic {name!r} has {current} partitions; the new count must be larger, not {count}")
        if count > MAX_PARTITIONS:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"at most {MAX_PARTITIONS} partitions")
        self._check_budget(name, count - current)
        if validate_only:
            return
        mutations.record(count - current)
        for p in range(current, count):
            shutil.rmtree(self._partition_dir(name, p), ignore_errors=True)  # leftovers of a deleted topic
        self._open_new_logs(topic, self.config.log_config(topic.configs), count)
        try:
            self._write_registry()
        except OSError as exc:  # a full disk: the partitions were never added
            self._remove_new_logs(topic, current)
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"cannot add partitions to {name!r}: {exc}") from None

    def check_configs(self, name: str, configs: dict[str, str | None]) -> dict[str, str]:
        """The overrides `configs` make for the topic (`checked_overrides`)."""
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return checked_overrides(self.config, name, configs)

    def set_configs(self, name: str, configs: dict[str, str | None]) -> None:
        """Replace a topic's overrides with `configs` (checked as `check_configs` checks
        them) and swap every log's config at once, so that retention, rolling, flushing
        and the size limit follow from the next use."""
        overrides = self.check_configs(name, configs)
        topic = self.topics[name]
        previous, topic.configs = topic.configs, overrides
        try:
            self._write_registry()
        except OSError as exc:  # a full disk: nothing changed
            topic.configs = previous
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"cannot change the configs of {name!r}: {exc}") from None
        self._apply_log_config(topic)

    def apply_broker_defaults(self) -> None:
        """Re-derive every log's config after the broker's defaults changed."""
        for topic in self.topics.values():
            self._apply_log_config(topic)

    def _apply_log_config(self, topic: Topic) -> None:
        log_config = self.config.log_config(topic.configs)
        for partition in topic.partitions.values():
            partition.log.config = log_config

    def _check_budget(self, name: str, adding: int) -> None:
        """Refuse partitions beyond what the process can keep open, before any directory
        exists. The internal topics' partitions count before they are created."""
        budget, limit = partition_budget()
        internal = {"__consumer_offsets": self.config.offsets_topic_num_partitions,
                    "__transaction_state": self.config.transaction_state_log_num_partitions}
        reserved = sum(n for topic, n in internal.items() if topic not in self.topics and topic != name)
        total = sum(len(t.partitions) for t in self.topics.values()) + reserved + adding
        if total > budget:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"{adding} more partition(s) would make {total} (internal topics' "
                              f"included), over the {budget} this broker can keep open: "
                              f"RLIMIT_NOFILE {limit} less {FD_RESERVE + READ_CACHE_FILES} "
                              f"descriptors for connections and other files")

    def _open_new_logs(self, topic: Topic, log_config, count: int) -> None:
        """Grow `topic.partitions` to `count` with new, empty logs, holding no descriptor; on
        an OS error the new partitions' directories are removed again and the error is answered."""
        current = len(topic.partitions)
        try:
            for p in range(current, count):
                topic.partitions[p] = self._partition(PartitionLog(
                    self._partition_dir(topic.name, p), topic.name, p, log_config,
                    recovery_point=None, clock=self._clock, new=True))
        except OSError as exc:
            self._remove_new_logs(topic, current, count)
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"cannot create partitions of {topic.name!r}: {exc}") from None

    def _remove_new_logs(self, topic: Topic, first: int, end: int | None = None) -> None:
        """Forget partitions `first`.. of `topic` (up to `end`) and remove their directories."""
        end = len(topic.partitions) if end is None else end
        for p in range(first, end):
            topic.partitions.pop(p, None)
        for p in range(first, end):
            shutil.rmtree(self._partition_dir(topic.name, p), ignore_errors=True)

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
        registry = {t.name: {"id": str(t.topic_id), "partitions": _registry_partitions(t),
                             "configs": t.configs} for t in self.topics.values()}
        write_atomically(os.path.join(self.data_dir, REGISTRY),
                         json.dumps(registry, indent=1, sort_keys=True).encode())
        for directory in self._deleted_dirs:
            self._remover.remove(directory)
        self._deleted_dirs.clear()
