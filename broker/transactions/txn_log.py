"""The `__transaction_state` topic: every transactional id's state, durably.

Records use Kafka's layout so tools that read the topic can follow it: key
TransactionLogKey (key version 0: transactional id), value TransactionLogValue v1
(producer id and epoch, timeout, status, the transaction's partitions, last update
and start timestamps; tagged: the previous and next producer ids and the client's
transaction version, which transactions v2 need after a failover: a transaction whose
epoch overflowed moves to the next producer id when it completes); v0 values, written
before, are read too. A null value (tombstone) forgets an expired transactional id.
The status byte is Kafka's: Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7. The partition list
is null for Empty and empty once a transaction completed, as Kafka writes them.
A transactional id lives in partition `abs(javaHash(id)) % partitions`, as in Kafka
(`broker.coordinator_runtime`, which reads and writes the topic's batches).

The topic is compacted by the log cleaner (cleanup.policy=compact, as Kafka creates
it): only each id's latest record remains, and a tombstone goes after
delete.retention.ms. Replay keeps the last record of each key, which is all
compaction leaves, so it yields the same state before and after a cleaning.
"""

from __future__ import annotations

from wire.messages import TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE
from wire.primitives import DecodeError

__all__ = ["TOPIC", "EMPTY", "ONGOING", "PREPARE_COMMIT", "PREPARE_ABORT", "COMPLETE_COMMIT",
           "COMPLETE_ABORT", "DEAD", "PREPARE_EPOCH_FENCE", "STATE_NAMES", "STATES_BY_NAME",
           "txn_record", "tombstone", "decode_record"]

TOPIC = "__transaction_state"
_KEY_VERSION = 0
_VALUE_VERSION = 1

(EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD,
 PREPARE_EPOCH_FENCE) = range(8)
STATE_NAMES = {EMPTY: "Empty", ONGOING: "Ongoing", PREPARE_COMMIT: "PrepareCommit",
               PREPARE_ABORT: "PrepareAbort", COMPLETE_COMMIT: "CompleteCommit",
               COMPLETE_ABORT: "CompleteAbort", DEAD: "Dead",
               PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}


def txn_record(transactional_id: str, producer_id: int, producer_epoch: int, timeout_ms: int,
               state: int, partitions, last_update_ms: int, start_ms: int, previous_producer_id: int,
               next_producer_id: int, client_transaction_version: int) -> tuple[bytes, bytes]:
    """The (key, value) of one transactional id's state; `partitions` are (topic, partition)."""
    key = TRANSACTION_LOG_KEY.encode_versioned(
        _KEY_VERSION, TRANSACTION_LOG_KEY(transactional_id=transactional_id))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    listed = None if state == EMPTY else [
        TRANSACTION_LOG_VALUE.PartitionsSchema(topic=topic, partition_ids=ids)
        for topic, ids in by_topic.items()]
    value = TRANSACTION_LOG_VALUE(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_timeout_ms=timeout_ms,
        transaction_status=state, transaction_partitions=listed,
        transaction_last_update_timestamp_ms=last_update_ms,
        transaction_start_timestamp_ms=start_ms, previous_producer_id=previous_producer_id,
        next_producer_id=next_producer_id, client_transaction_version=client_transaction_version)
    return key, TRANSACTION_LOG_VALUE.encode_versioned(_VALUE_VERSION, value)


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    key = TRANSACTION_LOG_KEY.encode_versioned(
        _KEY_VERSION, TRANSACTION_LOG_KEY(transactional_id=transactional_id))
    return key, None


def decode_record(key: bytes, value: bytes | None):
    """(transactional id, TransactionLogValue or None for a tombstone); None for a key
    that is not a transaction-log key."""
    try:
        version = int.from_bytes(key[:2], "big", signed=True)
        if version != _KEY_VERSION:
            return None
        _, k = TRANSACTION_LOG_KEY.decode_versioned(key)
        if value is None:
            return k.transactional_id, None
        _, v = TRANSACTION_LOG_VALUE.decode_versioned(value)
        return k.transactional_id, v
    except DecodeError:
        return None
