"""A log's `Partition` as the single broker opens it: leader, ISR = {0}, the real clock."""

from broker.clock import SYSTEM_CLOCK
from broker.replica.delayed import DelayedOperations
from broker.replica.partition import Partition

LAG_TIME_MAX_MS = 30_000


def leading(log, clock=SYSTEM_CLOCK) -> Partition:
    partition = Partition(log, 0, DelayedOperations(clock), clock, LAG_TIME_MAX_MS)
    partition.lead_alone()
    return partition


def topic_manager(config, clock=SYSTEM_CLOCK):
    """The broker's TopicManager for `config`, outside a broker."""
    from broker.replica.topics import TopicManager
    return TopicManager(config, DelayedOperations(clock), clock)


def group_coordinator(config, topics, clock=SYSTEM_CLOCK, port: int = 0):
    """The broker's GroupCoordinator over `topics`, outside a broker: what it takes of one
    (its config, topics, clock, stall watch and a single node's metadata), as a namespace."""
    from types import SimpleNamespace

    from broker.clock import StallWatch
    from broker.cluster.metadata import LocalMetadata
    from broker.groups.coordinator import GroupCoordinator
    return GroupCoordinator(SimpleNamespace(
        config=config, topics=topics, clock=clock, stalls=StallWatch(clock),
        metadata=LocalMetadata(0, lambda: ("127.0.0.1", port), topics)))
