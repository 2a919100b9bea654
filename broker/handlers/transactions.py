"""AddPartitionsToTxn v0–5, AddOffsetsToTxn v0–4, EndTxn v0–5, TxnOffsetCommit v0–5,
WriteTxnMarkers v1–2, DescribeTransactions v0, ListTransactions v0–2, DescribeProducers v0.

The transaction rules themselves live in `broker.transactions.coordinator`; here:
- PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to AddPartitionsToTxn,
  AddOffsetsToTxn and EndTxn below v2 (InitProducerId below v4), which predate it.
- AddPartitionsToTxn v0–3 names one transaction, v4+ a batch (`transactions`), each
  answered on its own. A partition that does not exist fails the whole transaction's
  request: UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED for the others.
  Otherwise every partition gets the coordinator's answer. `verify_only` (v4+) adds
  nothing and answers per partition NONE (in the transaction) or TRANSACTION_ABORTABLE;
  v4+ without it is a partition leader's implicit add for a producer of transactions v2
  (`broker.transactions.add_partitions_manager`).
- AddOffsetsToTxn adds the group's `__consumer_offsets` partition to the transaction.
- EndTxn v5 is transactions v2: the coordinator bumps the epoch (see
  `broker.transactions.coordinator`), and the answer names the producer id and epoch the
  producer goes on with (-1 with an error).
- TxnOffsetCommit: unknown partitions get UNKNOWN_TOPIC_OR_PARTITION; the group checks
  the member, instance and generation when given (v3+: UNKNOWN_MEMBER_ID,
  FENCED_INSTANCE_ID, ILLEGAL_GENERATION); on the single node the group's offsets
  partition must be in the producer's transaction (INVALID_TXN_STATE below v4,
  TRANSACTION_ABORTABLE from v4; a stale epoch is INVALID_PRODUCER_EPOCH, an unknown
  producer INVALID_PRODUCER_ID_MAPPING, a completing transaction
  COORDINATOR_NOT_AVAILABLE so that the client retries). In a cluster the group
  coordinator does not ask the transaction coordinator (Kafka without KIP-890's
  verification; see `broker.handlers.produce`). The offsets stay pending until the
  transaction ends. v5 is transactions v2: no AddOffsetsToTxn came before it, so the
  group coordinator first adds the group's `__consumer_offsets` partition to the
  transaction through the transaction coordinator, as a partition leader does for a
  Produce v12 (`broker.transactions.add_partitions_manager`; its refusal answered as
  above).
- WriteTxnMarkers (what a transaction coordinator on another broker sends to the
  partition leaders, one request holding the markers of several transactions; also
  used by admin tools to abort hanging transactions) appends every marker as asked,
  then answers once each is committed (acks=all), with an error
  per partition (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
  INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older
  than the producer's last marker there, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  REQUEST_TIMED_OUT). A v2 marker of transactions v2 (`transaction_version` 2) must carry
  an epoch newer than the producer's open transaction there (INVALID_PRODUCER_EPOCH).
- Every coordinator request (and DescribeTransactions per id) is answered
  NOT_COORDINATOR by a broker that does not coordinate the transactional id, and
  COORDINATOR_LOAD_IN_PROGRESS while it loads it; ListTransactions lists the
  transactions of the partitions coordinated here.
- DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND for an unknown id. ListTransactions
  filters by state names (unknown ones are listed back), producer ids, v1+ by running
  longer than `duration_filter` ms and v2+ by a `transactional_id_pattern` the whole id
  matches (none when null or empty; Python's regular expressions where Kafka has RE2/J's,
  alike but for rare constructs); one that does not compile is INVALID_REGULAR_EXPRESSION.
- DescribeProducers (kafka-transactions.sh describe-producers): each partition's
  producers with state (epoch, last sequence and timestamp, the coordinator epoch of
  their last marker, the first offset of their open transaction or -1);
  UNKNOWN_TOPIC_OR_PARTITION for a partition this broker does not have.

Authorization (broker.security.acls), as Kafka's KafkaApis:
- AddPartitionsToTxn v0-3 (clients): WRITE on the transactional id (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and WRITE on each topic,
  never granted for the internal topics (TOPIC_AUTHORIZATION_FAILED, the transaction's
  other partitions OPERATION_NOT_ATTEMPTED); v4+ (brokers): CLUSTER_ACTION on the cluster,
  else CLUSTER_AUTHORIZATION_FAILED for the request.
- AddOffsetsToTxn: WRITE on the transactional id, then READ on the group
  (GROUP_AUTHORIZATION_FAILED). EndTxn: WRITE on the transactional id.
- TxnOffsetCommit: WRITE on the transactional id, READ on the group (each for every
  partition), READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
- WriteTxnMarkers: ALTER or CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED
  for every partition.
- DescribeTransactions: DESCRIBE per transactional id, and its partitions of topics one
  may not DESCRIBE left out; ListTransactions lists only the ids one may DESCRIBE.
- DescribeProducers: READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

import asyncio
import re

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, DESCRIBE_PRODUCERS,
                           DESCRIBE_TRANSACTIONS, END_TXN, LIST_TRANSACTIONS, TXN_OFFSET_COMMIT,
                           WRITE_TXN_MARKERS)

from broker.errors import BrokerError
from broker.groups import offsets_log
from broker.groups.offsets_log import CommittedOffset
from broker.security.acls import DENIED, permitted, refused, require
from broker.replica.topics import INTERNAL_TOPICS
from broker.transactions.coordinator import leader_error
from broker.transactions.markers import append_local_markers
from broker.transactions.txn_log import STATES_BY_NAME


TXN_OFFSET_COMMIT_MAX_VERSION = 5  # v6 names topics by id
# The first versions of transactions v2 (KIP-890 part 2).
END_TXN_V2_VERSION = 5
TXN_OFFSET_COMMIT_V2_VERSION = 5


def fenced_for(code: int, version: int, since: int) -> int:
    """PRODUCER_FENCED for versions >= `since`, INVALID_PRODUCER_EPOCH before."""
    if code == ErrorCode.PRODUCER_FENCED and version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _exists(broker, topic: str, partition: int) -> bool:
    """Whether the partition exists (in the metadata view: in a cluster the coordinator
    need not hold a replica of it)."""
    known = broker.metadata.topic(topic)
    return known is not None and partition in known.partitions


async def _add_one(broker, version, transactional_id, producer_id, epoch, verify_only, topics,
                   denied=frozenset()):
    """Error code per (topic, partition) for one transaction of an AddPartitionsToTxn;
    the topics `denied` are refused."""
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    failed = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
              for tp in partitions if tp[0] in denied or not _exists(broker, *tp)}
    if failed:
        return {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    coordinator = broker.transactions
    try:
        if verify_only:
            return coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
        await coordinator.add_partitions(transactional_id, producer_id, epoch, set(partitions),
                                         transactions_v2=version >= 4)
        code = ErrorCode.NONE
    except BrokerError as exc:
        code = fenced_for(exc.code, version, 2)
    return {tp: code for tp in partitions}


async def add_partitions_to_txn(broker, header, request, session):
    Resp = ADD_PARTITIONS_TO_TXN.response
    version = header.request_api_version
    if version < 4:
        transactional_id, topics = request.v3_and_below_transactional_id, request.v3_and_below_topics
        if permitted(broker, session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            denied = refused(broker, session, Operation.WRITE, ResourceType.TOPIC, (t.name for t in topics))
            codes = await _add_one(broker, version, transactional_id, request.v3_and_below_producer_id,
                                   request.v3_and_below_producer_epoch, False, topics,
                                   denied | INTERNAL_TOPICS.intersection(t.name for t in topics))
        else:
            codes = {(t.name, p): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t in topics for p in t.partitions}
        return Resp(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(Resp, codes))
    if not permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return Resp(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    results = []
    for txn in request.transactions:
        codes = await _add_one(broker, version, txn.transactional_id, txn.producer_id,
                               txn.producer_epoch, txn.verify_only, txn.topics)
        results.append(Resp.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                     topic_results=_topic_results(Resp, codes)))
    return Resp(throttle_time_ms=0, error_code=0, results_by_transaction=results)


def _topic_results(Resp, codes):
    by_topic: dict[str, list] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(Resp.AddPartitionsToTxnPartitionResult(
            partition_index=partition, partition_error_code=code))
    return [Resp.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=results)
            for topic, results in by_topic.items()]


async def add_offsets_to_txn(broker, header, request, session):
    code = ErrorCode.NONE
    try:
        require(broker, session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        require(broker, session, Operation.READ, ResourceType.GROUP, request.group_id)
        if not request.group_id:
            raise BrokerError(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
        partition = broker.groups.partition_for(request.group_id)
        await broker.transactions.add_partitions(request.transactional_id, request.producer_id,
                                                 request.producer_epoch, {(offsets_log.TOPIC, partition)})
    except BrokerError as exc:
        code = fenced_for(exc.code, header.request_api_version, 2)
    return ADD_OFFSETS_TO_TXN.response(throttle_time_ms=0, error_code=code)


async def end_txn(broker, header, request, session):
    version = header.request_api_version
    try:
        require(broker, session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        producer_id, epoch = await broker.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
            transactions_v2=version >= END_TXN_V2_VERSION)
    except BrokerError as exc:
        return END_TXN.response(throttle_time_ms=0, error_code=fenced_for(exc.code, version, 2),
                                producer_id=-1, producer_epoch=-1)
    return END_TXN.response(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=epoch)


def _offset_commit_error(code: int, version: int) -> int:
    """A transaction check's answer as Kafka's group coordinator converts it."""
    if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < 4:
        return ErrorCode.INVALID_TXN_STATE
    return code


async def txn_offset_commit(broker, header, request, session):
    Resp = TXN_OFFSET_COMMIT.response
    version = header.request_api_version
    now = broker.clock.wall_ms()
    codes: dict[tuple[str, int], int] = {}
    offsets = {}
    refusal = None  # the error of every partition
    if not permitted(broker, session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not permitted(broker, session, Operation.READ, ResourceType.GROUP, request.group_id):
        refusal = ErrorCode.GROUP_AUTHORIZATION_FAILED
    denied = refused(broker, session, Operation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if refusal is not None or topic.name in denied:
                codes[tp] = refusal or ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not _exists(broker, *tp):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = CommittedOffset(p.committed_offset, p.committed_leader_epoch,
                                          p.committed_metadata or "", now)
    if offsets and version >= TXN_OFFSET_COMMIT_V2_VERSION:
        partition = broker.groups.partition_for(request.group_id)
        added = await broker.transactions.partition_adder.add(
            request.transactional_id, request.producer_id, request.producer_epoch, {(offsets_log.TOPIC, partition)})
        code = added[(offsets_log.TOPIC, partition)]
        if code != ErrorCode.NONE:
            codes.update(dict.fromkeys(offsets, _offset_commit_error(leader_error(code), version)))
            offsets = {}
    if offsets:
        def verify():
            partition = broker.groups.partition_for(request.group_id)
            code = broker.transactions.check_write(request.transactional_id, request.producer_id,
                                                   request.producer_epoch, (offsets_log.TOPIC, partition))
            if code is not None:
                raise BrokerError(_offset_commit_error(code, version))

        try:
            codes.update(await broker.groups.offsets.txn_commit(
                request.group_id, request.producer_id, request.producer_epoch,
                request.generation_id_or_member_epoch, request.member_id, request.group_instance_id, offsets,
                verify=None if broker.config.cluster_mode else verify))
        except BrokerError as exc:
            codes.update({tp: exc.code for tp in offsets})
    return Resp(throttle_time_ms=0, topics=[Resp.TxnOffsetCommitResponseTopic(name=topic.name, partitions=[
        Resp.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                              error_code=codes[(topic.name, p.partition_index)])
        for p in topic.partitions]) for topic in request.topics])


async def write_txn_markers(broker, header, request, session):
    Resp = WRITE_TXN_MARKERS.response
    allowed = (permitted(broker, session, Operation.ALTER, ResourceType.CLUSTER)
               or permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER))
    if not allowed:
        answers = [{(topic.name, p): ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    for topic in marker.topics for p in topic.partition_indexes}
                   for marker in request.markers]
    else:  # every marker appended, in the request's order, before any is waited for
        answers = await asyncio.gather(*[append_local_markers(
            broker, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
            marker.transaction_result, [(topic.name, p) for topic in marker.topics
                                        for p in topic.partition_indexes],
            transaction_version=marker.transaction_version)
            for marker in request.markers])
    results = []
    for marker, codes in zip(request.markers, answers):
        results.append(Resp.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
            Resp.WritableTxnMarkerTopicResult(name=topic.name, partitions=[
                Resp.WritableTxnMarkerPartitionResult(partition_index=p, error_code=codes[(topic.name, p)])
                for p in topic.partition_indexes])
            for topic in marker.topics]))
    return Resp(markers=results)


def describe_transactions(broker, header, request, session):
    Resp = DESCRIBE_TRANSACTIONS.response
    states = []
    for transactional_id in request.transactional_ids:
        try:
            require(broker, session, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id)
            meta = broker.transactions.describe(transactional_id)
        except BrokerError as exc:
            states.append(Resp.TransactionState(
                error_code=exc.code, transactional_id=transactional_id, transaction_state="",
                transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        hidden = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in meta.partitions))
        for topic, partition in sorted(meta.partitions):
            if topic not in hidden:
                by_topic.setdefault(topic, []).append(partition)
        states.append(Resp.TransactionState(
            error_code=0, transactional_id=transactional_id, transaction_state=meta.state_name,
            transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[Resp.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return Resp(throttle_time_ms=0, transaction_states=states)


def list_transactions(broker, header, request, session):
    Resp = LIST_TRANSACTIONS.response
    pattern = None
    if header.request_api_version >= 2 and request.transactional_id_pattern:
        try:
            pattern = re.compile(request.transactional_id_pattern)
        except re.error:
            return Resp(error_code=ErrorCode.INVALID_REGULAR_EXPRESSION)
    unknown = [name for name in request.state_filters if name not in STATES_BY_NAME]
    states = {STATES_BY_NAME[name] for name in request.state_filters if name in STATES_BY_NAME}
    if request.state_filters and not states:
        listed = []  # only unknown states asked for: nothing matches
    else:
        duration = request.duration_filter if header.request_api_version >= 1 else -1
        listed = broker.transactions.list(states or None, set(request.producer_id_filters) or None,
                                          duration)
        hidden = refused(broker, session, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                         (m.transactional_id for m in listed))
        listed = [m for m in listed if m.transactional_id not in hidden
                  and (pattern is None or pattern.fullmatch(m.transactional_id))]
    return Resp(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                transaction_states=[Resp.TransactionState(
                    transactional_id=m.transactional_id, producer_id=m.producer_id,
                    transaction_state=m.state_name) for m in listed])


def describe_producers(broker, header, request, session):
    Resp = DESCRIBE_PRODUCERS.response
    denied = refused(broker, session, Operation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            out = Resp.PartitionResponse(partition_index=index, active_producers=[])
            try:
                if topic.name in denied:
                    raise BrokerError(*DENIED[ResourceType.TOPIC])
                partition = broker.topics.partition(topic.name, index)
            except BrokerError as exc:
                out.error_code, out.error_message = exc.code, str(exc)
            else:
                out.active_producers = [
                    Resp.ProducerState(producer_id=entry.producer_id, producer_epoch=entry.epoch,
                                       last_sequence=entry.last_sequence, last_timestamp=entry.last_timestamp,
                                       coordinator_epoch=entry.coordinator_epoch,
                                       current_txn_start_offset=entry.txn_first_offset)
                    for entry in partition.producers()]
            partitions.append(out)
        topics.append(Resp.TopicResponse(name=topic.name, partitions=partitions))
    return Resp(throttle_time_ms=0, topics=topics)
