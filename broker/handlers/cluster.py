"""DescribeCluster v0–2, DescribeLogDirs v1–5 and InitProducerId v0–5 (idempotent producers).

- DescribeCluster: the brokers and controller of the cluster metadata view; v1
  `endpoint_type` 1 (brokers) is served, 2 (controllers) gets UNSUPPORTED_ENDPOINT_TYPE.
  v2 `include_fenced_brokers` (kafka-cluster.sh list-endpoints): a broker is listed while
  registered and none is fenced (KRaft's state), so each answers `is_fenced` false.
- DescribeLogDirs (kafka-log-dirs.sh): the one log directory, its absolute path, with
  the size of each partition asked for (all when `topics` is null; partitions this
  broker does not have are left out, as Kafka does), offset lag 0 (no future replicas)
  and, v4+, the file system's total and usable bytes; v5+ `is_cordoned` false, as no
  directory is cordoned (KIP-1066's `cordoned.log.dirs` is not a Sluice key). Kafka 4
  dropped v0 (KIP-896).
- InitProducerId without a transactional id hands out a fresh producer id at epoch 0.
  v3+ may name the caller's current id and epoch (KIP-360): the epoch is bumped, or a
  new id is handed out when the epoch would overflow.
- With a transactional id the transaction coordinator answers (see
  `broker.transactions.coordinator`), once the new state is committed to
  `__transaction_state`; a broker that does not coordinate the id answers
  NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading it); naming only one of
  producer id and epoch is INVALID_REQUEST, and PRODUCER_FENCED is answered as
  INVALID_PRODUCER_EPOCH below v4.
  Errors carry producer id -1 and epoch -1.

Authorization (broker.security.acls), as Kafka's KafkaApis: DescribeCluster checks
nothing, its authorized operations (when asked) are 0 without DESCRIBE on the cluster;
DescribeLogDirs needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED, v3+'s
error code, and no directories); InitProducerId needs WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or without one IDEMPOTENT_WRITE on the cluster
or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import os

from wire.acl_types import CLUSTER_RESOURCE_NAME, Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, INIT_PRODUCER_ID
from broker.errors import BrokerError
from broker.security.acls import authorized_operations, permitted, permitted_on_some


_MAX_EPOCH = 32767


def describe_cluster(broker, header, request, session):
    Resp = DESCRIBE_CLUSTER.response
    if header.request_api_version >= 1 and request.endpoint_type not in (1,):
        return Resp(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    error_message=f"endpoint type {request.endpoint_type} is not served",
                    endpoint_type=request.endpoint_type, cluster_id=broker.metadata.cluster_id,
                    controller_id=-1, brokers=[], cluster_authorized_operations=-2147483648)
    metadata = broker.metadata
    operations = -2147483648
    if request.include_cluster_authorized_operations:
        operations = 0
        if permitted(broker, session, Operation.DESCRIBE, ResourceType.CLUSTER):
            operations = authorized_operations(broker, session, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)
    return Resp(error_code=0, error_message=None, endpoint_type=1, cluster_id=metadata.cluster_id,
                controller_id=metadata.controller_id,
                brokers=[Resp.DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack,
                                                    is_fenced=False)
                         for b in metadata.brokers(session.listener)],
                cluster_authorized_operations=operations)


def init_producer_id(broker, header, request, session):
    Resp = INIT_PRODUCER_ID.response
    if request.transactional_id is not None:
        if not permitted(broker, session, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return Resp(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
        pid, epoch = request.producer_id, request.producer_epoch
        if (pid < 0) != (epoch < 0):
            return Resp(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
        return _init_transactional(broker, header.request_api_version, request,
                                   (pid, epoch) if pid >= 0 else None)
    if not (permitted(broker, session, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or permitted_on_some(broker, session, Operation.WRITE, ResourceType.TOPIC)):
        return Resp(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    if request.producer_id >= 0 and 0 <= request.producer_epoch < _MAX_EPOCH - 1:
        return Resp(error_code=0, producer_id=request.producer_id,
                    producer_epoch=request.producer_epoch + 1)
    try:
        producer_id = broker.producer_ids.allocate()
    except BrokerError as exc:  # a cluster broker still claiming a block of ids
        return Resp(error_code=exc.code, producer_id=-1, producer_epoch=-1)
    return Resp(error_code=0, producer_id=producer_id, producer_epoch=0)


async def _init_transactional(broker, version: int, request, expected):
    Resp = INIT_PRODUCER_ID.response
    try:
        pid, epoch = await broker.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected)
    except BrokerError as exc:
        code = exc.code
        if code == ErrorCode.PRODUCER_FENCED and version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return Resp(error_code=code, producer_id=-1, producer_epoch=-1)
    return Resp(error_code=0, producer_id=pid, producer_epoch=epoch)


def describe_log_dirs(broker, header, request, session):
    Resp = DESCRIBE_LOG_DIRS.response
    if not permitted(broker, session, Operation.DESCRIBE, ResourceType.CLUSTER):
        return Resp(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    topics = broker.topics.topics
    if request.topics is None:
        wanted = {name: list(topic.partitions) for name, topic in topics.items()}
    else:
        wanted = {}
        for asked in request.topics:
            if asked.topic in topics:
                local = topics[asked.topic].partitions
                wanted.setdefault(asked.topic, []).extend(p for p in asked.partitions if p in local)
    directory = os.path.abspath(broker.topics.data_dir)
    result = Resp.DescribeLogDirsResult(log_dir=directory, is_cordoned=False, topics=[
        Resp.DescribeLogDirsTopic(name=name, partitions=[
            Resp.DescribeLogDirsPartition(partition_index=p, partition_size=topics[name].partitions[p].size_bytes,
                                          offset_lag=0, is_future_key=False)
            for p in sorted(set(partitions))])
        for name, partitions in sorted(wanted.items()) if partitions])
    try:
        disk = os.statvfs(directory)
        result.total_bytes, result.usable_bytes = disk.f_blocks * disk.f_frsize, disk.f_bavail * disk.f_frsize
    except OSError:
        pass  # -1: unknown
    return Resp(throttle_time_ms=0, results=[result])
