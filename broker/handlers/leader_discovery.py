"""KIP-951's leader discovery: a partition that a Produce (v10+) or a Fetch (v16+) finds
led elsewhere is answered with its current leader and leader epoch, and the response
carries that leader's endpoint on the client's listener, so that the client sends its
next request there without asking Metadata first, as Kafka's KafkaApis answers:
Produce for NOT_LEADER_OR_FOLLOWER, Fetch also for FENCED_LEADER_EPOCH.

The leader is the one this broker's replica of the partition follows, else the one its
metadata view names (Kafka's order); a leader whose endpoint this broker does not know
(offline, or not on that listener) is named without one, and an unknown leader is -1.
"""

from __future__ import annotations

from typing import Iterable


def name_leaders(broker, listener: str | None, Resp, answers: Iterable[tuple[str, int, object]]) -> list:
    """Set `current_leader` (a `Resp.LeaderIdAndEpoch`) on each (topic, partition, answer)
    given; the `Resp.NodeEndpoint`s of the leaders named, for the response."""
    endpoints = {}
    for topic, index, answer in answers:
        leader_id, leader_epoch = _current_leader(broker, topic, index)
        answer.current_leader = Resp.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
        endpoint = broker.metadata.broker(leader_id, listener) if leader_id >= 0 else None
        if endpoint is not None:
            endpoints[leader_id] = Resp.NodeEndpoint(node_id=endpoint.node_id, host=endpoint.host,
                                                     port=endpoint.port, rack=endpoint.rack)
    return [endpoints[node_id] for node_id in sorted(endpoints)]


def _current_leader(broker, topic: str, index: int) -> tuple[int, int]:
    found = broker.topics.topics.get(topic)
    partition = found.partitions.get(index) if found is not None else None
    if partition is not None and partition.leader_id >= 0:
        return partition.leader_id, partition.leader_epoch
    state = broker.metadata.partition_state(topic, index)
    return (state.leader_id, state.leader_epoch) if state is not None else (-1, -1)
