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
    from broker.topics import TopicManager
    return TopicManager(config, DelayedOperations(clock), clock)
