"""Produce v0–12.

- acks must be -1 (all in-sync replicas), 0 or 1, else INVALID_REQUIRED_ACKS.
- The internal topics (__consumer_offsets, __transaction_state) are the broker's:
  clients get INVALID_TOPIC_EXCEPTION.
  acks=0 gets no response; if such a produce fails, the connection is closed, as
  Kafka does, so the producer notices.
- Only record batches v2 (magic 2) are stored. Legacy message sets (formats v0 and v1)
  are accepted in Produce v0–v2 and converted to one batch first, as Kafka 3.x's
  LogValidator converts them (`_converted_message_set`); from v3 they are INVALID_RECORD,
  as in Kafka. A partition's records must be exactly one batch
  (INVALID_RECORD otherwise), validated from its header alone:
  whole (not truncated), CRC-32C, size within `max.message.bytes` (MESSAGE_TOO_LARGE),
  record count consistent with lastOffsetDelta, not a control batch (INVALID_RECORD),
  timestamps not negative (INVALID_TIMESTAMP). On CreateTime topics the batch's base
  and max timestamps (its header's) must lie within message.timestamp.before.max.ms
  before and message.timestamp.after.max.ms after the broker's clock (INVALID_TIMESTAMP).
  Records are not decoded, unless the
  topic's `compression.type` names a codec other than the batch's: then the batch is
  recompressed to it (records and producer fields kept; CORRUPT_MESSAGE if its records
  do not parse or inflate too far) and checked against `max.message.bytes` again.
- acks=0 and acks=1 are answered once the leader appended. acks=-1 (all) needs
  min.insync.replicas in-sync replicas before the append (NOT_ENOUGH_REPLICAS: a single
  broker has one) and is answered once the high watermark passes every appended batch
  (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank meanwhile), or when `timeout_ms`
  passes first, with REQUEST_TIMED_OUT for the partitions still short. Should this
  broker stop leading a partition meanwhile, the wait ends at once with
  NOT_LEADER_OR_FOLLOWER for it.
- A partition this broker does not lead gets NOT_LEADER_OR_FOLLOWER; from v10 with its
  current leader and that leader's endpoint (KIP-951, broker.handlers.leader_discovery).
- Idempotent batches (producer id >= 0) are checked by the partition's producer state;
  a duplicate of one of the last five batches is answered with its original offset.
  A batch with a producer id but no sequence is INVALID_RECORD.
- Transactions: transactional batches need the request's transactional id
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED without one, as Kafka answers) and a producer
  id; a request with a transactional id must hold only transactional batches
  (INVALID_RECORD). On the single node the transaction coordinator (local) must know
  the partition as part of the producer's ongoing transaction: INVALID_TXN_STATE when
  it is not (TRANSACTION_ABORTABLE from v11), INVALID_PRODUCER_EPOCH for a fenced
  epoch, INVALID_PRODUCER_ID_MAPPING for another producer id, NOT_ENOUGH_REPLICAS
  (retriable) while the transaction completes.
  In a cluster the leader is usually not the coordinator, and up to Produce v11 it
  does what Kafka's leaders do without KIP-890's verification: it appends the transactional batch
  without asking (no round trip to the coordinator on a produce's path). Fencing then
  rests on the partition's producer state: once the coordinator wrote a marker with a
  bumped epoch (InitProducerId of a new producer, a timed-out transaction), the old
  epoch's batches are INVALID_PRODUCER_EPOCH there. What is lost against KIP-890: a
  zombie's batch arriving at a partition its transaction never wrote before is
  appended, leaving a transaction there open until the producer's next marker or an
  admin's WriteTxnMarkers (kafka-transactions.sh abort); clients do not send such
  batches (they send to a partition only after AddPartitionsToTxn succeeded, and
  abort only after their produces are answered).
- Transactions v2 (Produce v12+, KIP-890 part 2): the producer sends no
  AddPartitionsToTxn; before appending its transactional batches the leader adds their
  partitions to the transaction through the coordinator, on this broker or another
  (`broker.transactions.add_partitions_manager`), in both modes, and a partition the
  coordinator refuses gets its answer as Kafka's leaders pass it on
  (`broker.transactions.coordinator.leader_error`: INVALID_PRODUCER_EPOCH for a fenced
  epoch, NOT_ENOUGH_REPLICAS, retriable, while the previous transaction completes or
  the coordinator moves). The batch is appended only once its partition is in the
  transaction, so a zombie's or a late batch cannot open a transaction at a partition.
- Compacted topics (cleanup.policy with compact): every record needs a key, as Kafka's
  LogValidator checks (the batch is decoded for it): a batch with keyless records is
  INVALID_RECORD at every version, each of them in record_errors (v8+) with Kafka's
  "Compacted topic cannot accept message without key in topic partition <topic>-<partition>",
  which is the error message too.
- v2+ returns log_append_time_ms (-1 for CreateTime topics); v5+ log_start_offset;
  v8+ record_errors and error_message.
- Client quotas (broker.client_quotas): the request's record bytes count against the
  principal's and client id's producer_byte_rate, acknowledged or not (as Kafka records
  every produce); past it the response carries throttle_time_ms and the connection is
  muted that long (an acks=0 produce, answered by nothing, is muted the same).
- Authorization (broker.security.acls), as Kafka's KafkaApis: WRITE on each topic, else
  TOPIC_AUTHORIZATION_FAILED for its partitions; a request with a transactional id also
  WRITE on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition.
  Idempotent producers need nothing more here: InitProducerId checks IDEMPOTENT_WRITE.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from wire.error_codes import ErrorCode
from wire.messages import PRODUCE
from wire.message_sets import InvalidMessageSet, decode_message_set, split_message_set
from wire.primitives import DecodeError, EncodeError
from wire.records import (MAGIC, build_batch_columns, decode_batch, has_valid_crc, iter_batches, parse_header,
                          recompress_batch)

from broker.client_quotas import throttle_ms
from broker.errors import BrokerError
from broker.transactions.coordinator import leader_error
from broker.handlers.leader_discovery import name_leaders
from broker.security.acls import DENIED, permitted, refused
from broker.handler_results import CloseConnection, ResponseLater, Throttled
from broker.storage.log import MAX_DECOMPRESSED_BATCH
from broker.replica.topics import INTERNAL_TOPICS

_Resp = PRODUCE.response
_MAGIC_AT = 16
# compression.type -> codec id; "producer" (keep the batch's codec) is absent.
_TOPIC_CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_LAST_MESSAGE_SET_VERSION = 2  # Produce v3+ carries record batches only
MAX_VERSION = 12  # v13 names topics by id
TRANSACTIONS_V2_VERSION = 12  # the leader adds a transactional batch's partition to its transaction


def _is_message_set(records) -> bool:
    """Whether a partition's records start with a legacy message (magic 0 or 1): the
    magic byte lies at the same place in a message set's entry and in a batch."""
    return records is not None and len(records) > _MAGIC_AT and records[_MAGIC_AT] < MAGIC


def _converted_message_set(records, version: int, config) -> memoryview:
    """A legacy message set as one record batch, as Kafka 3.x's LogValidator converts it:
    keys and values kept, no headers, the message's timestamp (-1, "none", with magic 0)
    as CreateTime, offsets left to the log, the topic's codec (or with compression.type
    `producer` the message set's). Each message must fit max.message.bytes
    (MESSAGE_TOO_LARGE). INVALID_TIMESTAMP for a message marked LogAppendTime (unless, as
    Kafka lets it pass, the topic is CreateTime and the message has a timestamp), a
    negative timestamp other than -1, or timestamps too far apart for one batch's deltas."""
    if version > _LAST_MESSAGE_SET_VERSION:
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"Produce v{version} requests may hold only record batches (magic 2)")
    try:
        entries = split_message_set(records)
    except DecodeError as exc:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    for entry in entries:
        if len(entry) > config.max_message_bytes:
            raise BrokerError(ErrorCode.MESSAGE_TOO_LARGE, f"message of {len(entry)} bytes exceeds "
                                                           f"max.message.bytes {config.max_message_bytes}")
    try:
        message_set = decode_message_set(entries, MAX_DECOMPRESSED_BATCH)
    except InvalidMessageSet as exc:
        raise BrokerError(ErrorCode.INVALID_RECORD, str(exc)) from None
    except DecodeError as exc:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    timestamps = message_set.timestamps
    create_time = config.message_timestamp_type == "CreateTime"
    for index in message_set.log_append_time:
        if not (create_time and timestamps[index] != -1):
            raise BrokerError(ErrorCode.INVALID_TIMESTAMP, "producers may not mark messages LogAppendTime")
    if min(timestamps) < -1:
        raise BrokerError(ErrorCode.INVALID_TIMESTAMP, f"negative message timestamp {min(timestamps)}")
    codec = _TOPIC_CODECS.get(config.compression_type, message_set.compression)
    try:
        batch = build_batch_columns(message_set.keys, message_set.values, None, timestamps,
                                    compression=codec)
    except EncodeError as exc:  # the timestamps: keys and values are bytes or None
        raise BrokerError(ErrorCode.INVALID_TIMESTAMP,
                          f"message timestamps do not fit one batch: {exc}") from None
    return memoryview(bytearray(batch))


def validated_batch(records, max_message_bytes: int):
    """(header, view) of the one batch in a partition's produce records, or BrokerError."""
    if records is None or len(records) == 0:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, "no record batch")
    try:
        iterator = iter_batches(records)
        batches = list(iterator)
    except DecodeError as exc:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if iterator.remaining:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, f"{iterator.remaining} bytes of a truncated batch")
    if len(batches) != 1:
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"a partition's produce must hold exactly one record batch, not {len(batches)}")
    header, view = batches[0]
    if header.size > max_message_bytes:
        raise BrokerError(ErrorCode.MESSAGE_TOO_LARGE,
                          f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}")
    if not has_valid_crc(view):
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
    if header.is_control:
        raise BrokerError(ErrorCode.INVALID_RECORD, "clients may not produce control batches")
    if header.record_count != header.last_offset_delta + 1 or header.record_count == 0:
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"batch holds {header.record_count} records but its last offset delta "
                          f"is {header.last_offset_delta}")
    if header.base_timestamp < -1 or header.max_timestamp < -1:
        raise BrokerError(ErrorCode.INVALID_TIMESTAMP, "negative record timestamp")
    return header, view


def _check_timestamps(header, config, now: int) -> None:
    """Kafka's bounds on CreateTime timestamps, from the header's base and max timestamps;
    -1 (no timestamp) passes."""
    if config.message_timestamp_type != "CreateTime":
        return
    for timestamp in (header.base_timestamp, header.max_timestamp):
        if timestamp == -1:
            continue
        if timestamp < now - config.message_timestamp_before_max_ms:
            raise BrokerError(ErrorCode.INVALID_TIMESTAMP,
                              f"timestamp {timestamp} is more than message.timestamp.before.max.ms "
                              f"({config.message_timestamp_before_max_ms}) before the broker's time {now}")
        if timestamp > now + config.message_timestamp_after_max_ms:
            raise BrokerError(ErrorCode.INVALID_TIMESTAMP,
                              f"timestamp {timestamp} is more than message.timestamp.after.max.ms "
                              f"({config.message_timestamp_after_max_ms}) after the broker's time {now}")


def _in_topic_codec(header, batch, compression_type: str, max_message_bytes: int):
    """(header, batch) in the codec the topic's compression.type names, recompressed if
    the batch is in another, as Kafka's LogValidator does; otherwise the batch itself."""
    codec = _TOPIC_CODECS.get(compression_type)
    if codec is None or codec == header.compression:
        return header, batch
    try:
        batch = memoryview(bytearray(recompress_batch(batch, codec, MAX_DECOMPRESSED_BATCH)))
    except DecodeError as exc:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, f"cannot recompress to {compression_type}: {exc}") from None
    header = parse_header(batch)
    if header.size > max_message_bytes:
        raise BrokerError(ErrorCode.MESSAGE_TOO_LARGE,
                          f"batch of {header.size} bytes recompressed to {compression_type} exceeds "
                          f"max.message.bytes {max_message_bytes}")
    return header, batch


def _check_keys(batch, topic: str, partition: int, result) -> None:
    """A compacted topic's records must have keys: the keyless ones go to `result`'s
    record_errors (their indexes in the batch) and the batch is refused."""
    try:
        records = decode_batch(batch, MAX_DECOMPRESSED_BATCH)
    except DecodeError as exc:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, f"records cannot be read: {exc}") from None
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}"
    keyless = [index for index, record in enumerate(records) if record.key is None]
    if keyless:
        result.record_errors = [_Resp.BatchIndexAndErrorMessage(batch_index=index,
                                                                batch_index_error_message=message)
                                for index in keyless]
        raise BrokerError(ErrorCode.INVALID_RECORD, message)


def _check_transactional(broker, version: int, transactional_id: str | None, header,
                         topic: str, partition: int) -> None:
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"batch of producer {header.producer_id} has no sequence number")
    if not header.is_transactional:
        if transactional_id is not None:
            raise BrokerError(ErrorCode.INVALID_RECORD,
                              "a transactional produce request may hold only transactional batches")
        return
    if transactional_id is None:
        raise BrokerError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                          "transactional batches need the request's transactional id")
    if header.producer_id < 0:
        raise BrokerError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
    if broker.config.cluster_mode:
        return  # Kafka's leaders without KIP-890 verification: see the module's docstring
    code = broker.transactions.check_write(transactional_id, header.producer_id,
                                           header.producer_epoch, (topic, partition))
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < 11:
        code = ErrorCode.INVALID_TXN_STATE
    if code is not None:
        raise BrokerError(code, f"transactional write to {topic}-{partition} refused ({code.name}): "
                             f"transactional id {transactional_id!r}, producer {header.producer_id}, "
                             f"epoch {header.producer_epoch}")


def _writable(view):
    """Batches are patched in place; a read-only buffer is copied first."""
    return view if not view.readonly else memoryview(bytearray(view))


def handle(broker, header, request, session):
    """The response, or (acks=all while the high watermark is short of a batch) the
    response later: the batches are appended, only their acknowledgement waits. A
    transactions v2 produce first waits for its partitions to join the transaction."""
    if header.request_api_version >= TRANSACTIONS_V2_VERSION and request.transactional_id is not None:
        producer, partitions = _transactional_partitions(broker, request, session)
        if partitions:
            return _added_then_appended(broker, header, request, session, producer, partitions)
    return _append(broker, header, request, session)


def _authorization(broker, request, session):
    """(the refusal of every partition or None, the topics the client may not write)."""
    refusal, denied = None, frozenset()
    if broker.authorizer is not None:
        transactional_id = request.transactional_id
        if transactional_id is not None and not permitted(broker, session, Operation.WRITE,
                                                          ResourceType.TRANSACTIONAL_ID, transactional_id):
            refusal = DENIED[ResourceType.TRANSACTIONAL_ID]
        denied = refused(broker, session, Operation.WRITE, ResourceType.TOPIC, (t.name for t in request.topic_data))
    return refusal, denied


def _transactional_partitions(broker, request, session) -> tuple[tuple[int, int] | None, set[tuple[str, int]]]:
    """(producer id, epoch) of the request's transactional batches and the partitions
    this broker leads that they go to, the client may write: what the leader adds to the
    transaction before appending (whatever else is wrong with a partition is answered by
    the append)."""
    refusal, denied = _authorization(broker, request, session)
    if refusal is not None:
        return None, set()
    producer, partitions = None, set()
    for topic_data in request.topic_data:
        if topic_data.name in INTERNAL_TOPICS or topic_data.name in denied:
            continue
        for data in topic_data.partition_data:
            records = data.records
            if records is None or _is_message_set(records):
                continue
            try:
                header = parse_header(records)
                broker.topics.partition(topic_data.name, data.index).check_leader()
            except (DecodeError, BrokerError):
                continue
            if header.is_transactional and header.producer_id >= 0:
                producer = producer or (header.producer_id, header.producer_epoch)
                partitions.add((topic_data.name, data.index))
    return producer, partitions


async def _added_then_appended(broker, header, request, session, producer: tuple[int, int],
                               partitions: set[tuple[str, int]]):
    codes = await broker.transactions.partition_adder.add(request.transactional_id, *producer, partitions)
    refused = {tp: leader_error(code) for tp, code in codes.items() if code != ErrorCode.NONE}
    result = _append(broker, header, request, session, refused)
    if isinstance(result, ResponseLater):
        return await result.awaitable
    return result


def _append(broker, header, request, session, refused_by_coordinator=None):
    """Append the request's batches, but not to the partitions the transaction
    coordinator refused (code by (topic, partition)) to add to a transaction."""
    acks = request.acks
    responses = []
    failed = None
    waiting = []  # acks=all: (partition, offset the high watermark must reach, result)
    refusal, denied = _authorization(broker, request, session)
    for topic_data in request.topic_data:
        partitions = []
        for data in topic_data.partition_data:
            result = _Resp.PartitionProduceResponse(index=data.index, base_offset=-1,
                                                    log_append_time_ms=-1, log_start_offset=-1)
            try:
                if acks not in (-1, 0, 1):
                    raise BrokerError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
                if refusal is not None:
                    raise BrokerError(*refusal)
                if topic_data.name in denied:
                    raise BrokerError(*DENIED[ResourceType.TOPIC])
                if topic_data.name in INTERNAL_TOPICS:
                    raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                      f"topic {topic_data.name} is internal: only the broker writes it")
                if refused_by_coordinator and (topic_data.name, data.index) in refused_by_coordinator:
                    code = refused_by_coordinator[(topic_data.name, data.index)]
                    raise BrokerError(code, f"the transaction coordinator refused to add {topic_data.name}-"
                                            f"{data.index} to the transaction of {request.transactional_id!r}")
                partition = broker.topics.partition(topic_data.name, data.index)
                partition.check_leader()
                config = partition.config
                records = data.records
                if _is_message_set(records):
                    records = _converted_message_set(records, header.request_api_version, config)
                elif records is not None and isinstance(records, memoryview):
                    records = _writable(records)
                batch_header, batch = validated_batch(records, config.max_message_bytes)
                _check_timestamps(batch_header, config, broker.clock.wall_ms())
                _check_transactional(broker, header.request_api_version, request.transactional_id,
                                     batch_header, topic_data.name, data.index)
                batch_header, batch = _in_topic_codec(batch_header, batch, config.compression_type,
                                                      config.max_message_bytes)
                if config.compact:
                    _check_keys(batch, topic_data.name, data.index, result)
                appended = partition.append_as_leader(batch_header, batch, acks)
                broker.metrics.produced(topic_data.name, batch_header.record_count, len(batch))
                result.base_offset = appended.first_offset
                result.log_append_time_ms = appended.log_append_time
                result.log_start_offset = partition.log_start_offset
                if acks == -1:
                    waiting.append((partition, appended.last_offset + 1, result))
            except BrokerError as exc:
                result.error_code = exc.code
                result.error_message = str(exc)
                failed = failed or f"{topic_data.name}-{data.index}: {exc}"
            partitions.append(result)
        responses.append(_Resp.TopicProduceResponse(name=topic_data.name, partition_responses=partitions))
    throttle = broker.produce_quotas.record(session.principal.name, header.client_id or "", sum(
        len(data.records) for topic_data in request.topic_data for data in topic_data.partition_data
        if data.records is not None))
    if acks == 0:
        if failed:
            raise CloseConnection(f"acks=0 produce failed: {failed}")
        return Throttled.when(None, throttle)
    response = _Resp(responses=responses, throttle_time_ms=throttle_ms(throttle))
    waiting = _still_waiting(waiting)
    if not waiting:
        return Throttled.when(_with_leaders(broker, header.request_api_version, session.listener, response),
                              throttle)
    deadline = broker.clock.monotonic() + max(request.timeout_ms, 0) / 1000
    return ResponseLater(_wait_for_replicas(broker, waiting, deadline, request.timeout_ms, response,
                                            header.request_api_version, session.listener, throttle))


def _with_leaders(broker, version: int, listener: str | None, response):
    """The final response, its partitions answered NOT_LEADER_OR_FOLLOWER naming their
    current leaders from v10 (KIP-951)."""
    if version >= 10:
        moved = [(topic.name, p.index, p) for topic in response.responses for p in topic.partition_responses
                 if p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER]
        if moved:
            response.node_endpoints = name_leaders(broker, listener, _Resp, moved)
    return response


def _still_waiting(waiting: list) -> list:
    """Settle the acks=all partitions the high watermark has passed; the others remain."""
    remaining = []
    for partition, required, result in waiting:
        code = partition.acks_all_result(required)
        if code is None:
            remaining.append((partition, required, result))
        elif code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            result.error_code = code
            result.error_message = (f"this broker stopped leading {partition.topic}-{partition.index} "
                                    f"before the high watermark reached {required}")
        elif code != ErrorCode.NONE:
            result.error_code = code
            result.error_message = (f"the in-sync replicas of {partition.topic}-{partition.index} "
                                    f"fell below min.insync.replicas after the append")
    return remaining


async def _wait_for_replicas(broker, waiting: list, deadline: float, timeout_ms: int, response,
                             version: int, listener: str | None, throttle: float):
    while True:
        # Checked before each wait, the first included: the high watermark may have moved
        # between the append and this task's start, waking nobody.
        waiting = _still_waiting(waiting)
        remaining = deadline - broker.clock.monotonic()
        if not waiting or remaining <= 0:
            break
        await broker.delayed.wait([partition.key for partition, _, _ in waiting], remaining)
    for partition, required, result in waiting:
        result.error_code = ErrorCode.REQUEST_TIMED_OUT
        result.error_message = (f"the high watermark of {partition.topic}-{partition.index} did not "
                                f"reach {required} within timeout_ms {timeout_ms}")
    return Throttled.when(_with_leaders(broker, version, listener, response), throttle)
