"""The requests only the controller answers (broker.cluster.controller); any other broker
answers NOT_CONTROLLER, and clients then look the controller up in Metadata. The single
node is its partitions' only replica: every election there is ELECTION_NOT_NEEDED.

- ElectLeaders v0–2 (flexible from v2; `kafka-leader-election.sh`,
  AdminClient.electLeaders): election_type 0 preferred (v0 knows only that), 1 unclean;
  topic_partitions null means every partition. Results are per partition: NONE,
  ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
  UNKNOWN_TOPIC_OR_PARTITION. A request the controller refuses as a whole carries its
  error at the top level (v1+) and on every partition named, as Kafka answers.
- ControlledShutdown v0–3 (flexible from v3): a broker about to stop asks the controller
  to move its leadership away; the answer lists the partitions it still leads. A broker
  epoch other than the registration's is STALE_BROKER_EPOCH (v0–1 send none: -1).
- Authorization (broker.security.acls), as Kafka's KafkaApis: ElectLeaders needs ALTER on
  the cluster (CLUSTER_AUTHORIZATION_FAILED at the top level and on every partition
  named), ControlledShutdown CLUSTER_ACTION on it (its error code).
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import CONTROLLED_SHUTDOWN, ELECT_LEADERS

from broker.errors import BrokerError
from broker.security.acls import DENIED, permitted

_Elect = ELECT_LEADERS.response
_Shutdown = CONTROLLED_SHUTDOWN.response


def active_controller(broker):
    """The broker's controller if it is the active one; NOT_CONTROLLER otherwise."""
    controller = broker.controller
    if controller is None or not controller.is_active:
        raise BrokerError(ErrorCode.NOT_CONTROLLER, f"broker {broker.node_id} is not the controller")
    return controller


def handle(broker, header, request, session):
    version = header.request_api_version
    election_type = request.election_type if version >= 1 else 0
    partitions = None
    if request.topic_partitions is not None:
        partitions = [(topic.topic, partition) for topic in request.topic_partitions
                      for partition in topic.partitions]
    if not permitted(broker, session, Operation.ALTER, ResourceType.CLUSTER):
        code, message = DENIED[ResourceType.CLUSTER]
        return _election_response(version, code, {tp: (code, message) for tp in partitions or ()})
    if broker.cluster is None:
        return _single_node_election(broker, version, partitions)
    return _elect(broker, version, election_type, partitions)


def _single_node_election(broker, version: int, partitions):
    topics = broker.topics
    if partitions is None:
        partitions = [p.key for p in topics.all_partitions()]
    results = {}
    for topic, index in partitions:
        try:
            topics.partition(topic, index)
            results[(topic, index)] = (ErrorCode.ELECTION_NOT_NEEDED,
                                       "the single node leads every partition it has")
        except BrokerError as exc:
            results[(topic, index)] = (exc.code, str(exc))
    return _election_response(version, ErrorCode.NONE, results)


async def _elect(broker, version: int, election_type: int, partitions):
    try:
        results = await active_controller(broker).elect_leaders(election_type, partitions)
    except BrokerError as exc:
        failed = {tp: (exc.code, str(exc)) for tp in partitions or ()}
        return _election_response(version, exc.code, failed)
    return _election_response(version, ErrorCode.NONE, results)


def _election_response(version: int, error: ErrorCode, results: dict):
    topics: dict[str, list] = {}
    for (topic, partition), (code, message) in results.items():
        topics.setdefault(topic, []).append(_Elect.PartitionResult(
            partition_id=partition, error_code=code, error_message=message))
    return _Elect(throttle_time_ms=0, error_code=error if version >= 1 else 0,
                  replica_election_results=[
                      _Elect.ReplicaElectionResult(topic=topic, partition_result=partitions)
                      for topic, partitions in topics.items()])


async def controlled_shutdown(broker, header, request, session):
    if not permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return _Shutdown(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        remaining = await active_controller(broker).controlled_shutdown(
            request.broker_id, request.broker_epoch)
    except BrokerError as exc:
        return _Shutdown(error_code=exc.code)
    return _Shutdown(remaining_partitions=[
        _Shutdown.RemainingPartition(topic_name=topic, partition_index=partition)
        for topic, partition in remaining])
