"""DescribeCluster v0–1 and InitProducerId v0–5 (idempotent producers).

- DescribeCluster: this broker is the cluster and its controller; v1 `endpoint_type`
  1 (brokers) is served, 2 (controllers) gets UNSUPPORTED_ENDPOINT_TYPE.
- InitProducerId without a transactional id hands out a fresh producer id at epoch 0.
  v3+ may name the caller's current id and epoch (KIP-360): the epoch is bumped, or a
  new id is handed out when the epoch would overflow. A transactional id is refused
  until this broker coordinates transactions.
"""

from __future__ import annotations

from wire.error_codes import ErrorCode
from wire.messages import DESCRIBE_CLUSTER, INIT_PRODUCER_ID

_MAX_EPOCH = 32767


async def describe_cluster(broker, header, request, client_host):
    Resp = DESCRIBE_CLUSTER.response
    if header.request_api_version >= 1 and request.endpoint_type not in (1,):
        return Resp(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                    error_message=f"endpoint type {request.endpoint_type} is not served",
                    endpoint_type=request.endpoint_type, cluster_id=broker.cluster_id,
                    controller_id=-1, brokers=[], cluster_authorized_operations=-2147483648)
    host, port = broker.config.advertised
    return Resp(error_code=0, error_message=None, endpoint_type=1, cluster_id=broker.cluster_id,
                controller_id=broker.node_id,
                brokers=[Resp.DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port,
                                                    rack=None)],
                cluster_authorized_operations=-2147483648)


async def init_producer_id(broker, header, request, client_host):
    Resp = INIT_PRODUCER_ID.response
    if request.transactional_id is not None:
        return Resp(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    producer_id=-1, producer_epoch=-1)
    if request.producer_id >= 0 and 0 <= request.producer_epoch < _MAX_EPOCH - 1:
        return Resp(error_code=0, producer_id=request.producer_id,
                    producer_epoch=request.producer_epoch + 1)
    return Resp(error_code=0, producer_id=broker.producer_ids.allocate(), producer_epoch=0)
