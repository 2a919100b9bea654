"""The admin role of the client, as Kafka's Admin client: the cluster and its log
directories, topics and partitions, leader elections and reassignments, configs,
groups, transactions, ACLs, SCRAM users and client quotas.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from sluice_client.connection import BrokerConnection
from sluice_client.errors import ProtocolViolation, UnsupportedVersion
from sluice_client.model import (ANY_ACL, BROKER_RESOURCE, DEFAULT_CONFIG, PREFERRED_ELECTION,
                                 TRANSACTION_KEY, UNKNOWN_CONFIG, AclBinding, AclBindingFilter, AclDeletion,
                                 BrokerInfo, ClusterDescription, ConfigEntry, ConfigSynonym,
                                 ConsumerGroupDescription, ConsumerGroupMember, Coordinator, CreatedTopic, DeletedAcls, GroupDescription, GroupMember, ListedGroup,
                                 ListedTransaction, NewTopic, OngoingReassignment, QuotaEntity,
                                 ScramCredentialInfo, ScramDeletion, ScramMechanism, ScramUpsertion,
                                 TransactionDescription, UserScramCredentials)
from sluice_client.responses import entry_for
from wire.acl_types import Operation, PatternType, Permission, ResourceType
from wire.error_codes import ErrorCode
from wire.errors import KafkaError, check
from wire.messages import (ALTER_CLIENT_QUOTAS, ALTER_CONFIGS, ALTER_PARTITION_REASSIGNMENTS,
                           ALTER_USER_SCRAM_CREDENTIALS, CONSUMER_GROUP_DESCRIBE, CREATE_ACLS, CREATE_PARTITIONS, CREATE_TOPICS,
                           DELETE_ACLS, DELETE_GROUPS, DELETE_TOPICS, DESCRIBE_ACLS, DESCRIBE_CLIENT_QUOTAS,
                           DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS,
                           DESCRIBE_TRANSACTIONS, DESCRIBE_USER_SCRAM_CREDENTIALS, ELECT_LEADERS,
                           INCREMENTAL_ALTER_CONFIGS, LIST_GROUPS, LIST_PARTITION_REASSIGNMENTS,
                           LIST_TRANSACTIONS)
from wire.schema import Struct

if TYPE_CHECKING:
    from sluice_client.client import AsyncClient

__all__ = ["Admin"]

_RESOURCE_NAMES = {2: "topic", 4: "broker"}
_FIRST_TOPICS_DELETE = 6
_FIRST_STATES_LIST_GROUPS = 4
_FIRST_SOURCES_DESCRIBE_CONFIGS = 1
_FIRST_TYPED_ELECT_LEADERS = 1  # v0 elects preferred leaders only
_SCRAM_SALT_BYTES = 32  # random bytes of each new SCRAM salt


class Admin:
    """Cluster administration over a client's connections and metadata (`client.admin`)."""

    def __init__(self, client: AsyncClient):
        self.client = client

    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller and brokers, from DescribeCluster (any broker)."""
        async def attempt() -> ClusterDescription:
            connection = await self.client.any_connection()
            response = await connection.request(
                DESCRIBE_CLUSTER, connection.version(DESCRIBE_CLUSTER),
                DESCRIBE_CLUSTER.request(include_cluster_authorized_operations=False))
            check(response.error_code, "describe cluster", response.error_message)
            return ClusterDescription(response.cluster_id, response.controller_id, {
                b.broker_id: BrokerInfo(b.broker_id, b.host, b.port, b.rack)
                for b in response.brokers})

        return await self.client.retrying(attempt)

    async def describe_log_dirs(self, node_id: int,
                                partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """The size in bytes of each replica broker `node_id` holds, of `partitions` or
        (None) of every partition, summed over its log directories (DescribeLogDirs, as
        kafka-log-dirs.sh asks; a future replica of an intra-broker move and a directory
        answering an error are left out, as are partitions it holds no replica of). One
        attempt: a broker that cannot be reached raises ClientError."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(set(partitions)):
                by_topic.setdefault(topic, []).append(partition)
            topics = [DESCRIBE_LOG_DIRS.request.DescribableLogDirTopic(topic=topic, partitions=indexes)
                      for topic, indexes in by_topic.items()]
        connection = await self.client.node_connection(node_id)
        response = await connection.request(DESCRIBE_LOG_DIRS, connection.version(DESCRIBE_LOG_DIRS),
                                            DESCRIBE_LOG_DIRS.request(topics=topics))
        check(response.error_code, f"describe the log dirs of broker {node_id}")
        sizes: dict[tuple[str, int], int] = collections.Counter()
        for directory in response.results:
            if directory.error_code:
                continue
            for topic in directory.topics:
                for partition in topic.partitions:
                    if not partition.is_future_key:
                        sizes[(topic.name, partition.partition_index)] += partition.partition_size
        return dict(sizes)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """The state of `transactional_id` at its coordinator; TRANSACTIONAL_ID_NOT_FOUND
        raises for an id the coordinator does not know (never used, or expired)."""
        context = f"DescribeTransactions for {transactional_id!r}"

        async def send(connection: BrokerConnection) -> TransactionDescription:
            response = await connection.request(
                DESCRIBE_TRANSACTIONS, connection.version(DESCRIBE_TRANSACTIONS),
                DESCRIBE_TRANSACTIONS.request(transactional_ids=[transactional_id]))
            answer = entry_for(response.transaction_states, "transactional_id", transactional_id, context)
            check(answer.error_code, context)
            return TransactionDescription(
                transactional_id, answer.transaction_state, answer.producer_id, answer.producer_epoch,
                answer.transaction_timeout_ms, answer.transaction_start_time_ms,
                tuple((t.topic, p) for t in answer.topics for p in t.partitions))

        return await self.client.with_coordinator(transactional_id, send, TRANSACTION_KEY)

    async def list_transactions(self, states: Iterable[str] | None = None) -> list[ListedTransaction]:
        """The transactional ids of every broker (each lists those it coordinates), by
        id; only those in `states` ("Ongoing", "CompleteCommit", ...) when given."""
        wanted = [] if states is None else list(states)
        listed = await self.client.from_every_broker(lambda node_id: self._list_transactions_at(node_id, wanted))
        return sorted(listed, key=lambda t: (t.transactional_id, t.coordinator_id))

    async def _list_transactions_at(self, node_id: int, states: list[str]) -> list[ListedTransaction]:
        connection = await self.client.node_connection(node_id)
        response = await connection.request(
            LIST_TRANSACTIONS, connection.version(LIST_TRANSACTIONS),
            LIST_TRANSACTIONS.request(state_filters=states, producer_id_filters=[]))
        check(response.error_code, f"list transactions of broker {node_id}")
        return [ListedTransaction(t.transactional_id, t.producer_id, t.transaction_state, node_id)
                for t in response.transaction_states]

    async def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """Each group as its coordinator describes it: state, protocol and members with
        their subscription and assignment bytes (see `GroupMember.consumer_assignment`).

        A group the coordinator does not know comes back in state "Dead" (Kafka's answer
        before DescribeGroups v6); other group errors raise KafkaError.
        """
        names = list(dict.fromkeys(groups))
        answers = await asyncio.gather(*(self._describe_group(name) for name in names))
        return dict(zip(names, answers))

    async def _describe_group(self, group: str) -> GroupDescription:
        context = f"describe group {group!r}"

        async def send(connection: BrokerConnection) -> GroupDescription:
            response = await connection.request(
                DESCRIBE_GROUPS, connection.version(DESCRIBE_GROUPS),
                DESCRIBE_GROUPS.request(groups=[group], include_authorized_operations=False))
            answer = entry_for(response.groups, "group_id", group, context)
            check(answer.error_code, context)
            coordinator = self.client.known_coordinator(group) or Coordinator(-1, connection.host,
                                                                       connection.port)
            members = tuple(GroupMember(m.member_id, m.group_instance_id, m.client_id,
                                        m.client_host, bytes(m.member_metadata or b""),
                                        bytes(m.member_assignment or b""))
                            for m in answer.members)
            return GroupDescription(answer.group_id, answer.group_state, answer.protocol_type,
                                    answer.protocol_data, members, coordinator,
                                    answer.authorized_operations)

        return await self.client.with_coordinator(group, send)

    async def describe_consumer_groups(self, groups: Iterable[str]) -> dict[str, ConsumerGroupDescription | None]:
        """Each group as ConsumerGroupDescribe tells it (a consumer group of KIP-848's
        protocol), None for one that is not such a group (GROUP_ID_NOT_FOUND: none, or a
        classic one); other group errors raise KafkaError, a broker without the API
        UnsupportedVersion."""
        names = list(dict.fromkeys(groups))
        answers = await asyncio.gather(*(self._describe_consumer_group(name) for name in names))
        return dict(zip(names, answers))

    async def _describe_consumer_group(self, group: str) -> ConsumerGroupDescription | None:
        context = f"describe consumer group {group!r}"

        def partitions(assignment) -> dict[str, tuple[int, ...]]:
            return {t.topic_name: tuple(sorted(t.partitions)) for t in assignment.topic_partitions}

        async def send(connection: BrokerConnection) -> ConsumerGroupDescription | None:
            response = await connection.request(
                CONSUMER_GROUP_DESCRIBE, connection.version(CONSUMER_GROUP_DESCRIBE),
                CONSUMER_GROUP_DESCRIBE.request(group_ids=[group], include_authorized_operations=False))
            answer = entry_for(response.groups, "group_id", group, context)
            if answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return None
            check(answer.error_code, context)
            coordinator = self.client.known_coordinator(group) or Coordinator(-1, connection.host,
                                                                               connection.port)
            members = tuple(ConsumerGroupMember(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch,
                tuple(m.subscribed_topic_names), m.subscribed_topic_regex, partitions(m.assignment),
                partitions(m.target_assignment)) for m in answer.members)
            return ConsumerGroupDescription(answer.group_id, answer.group_state, answer.group_epoch,
                                            answer.assignment_epoch, answer.assignor_name, members, coordinator)

        return await self.client.with_coordinator(group, send)

    async def list_groups(self, states: Iterable[str] | None = None) -> list[ListedGroup]:
        """The groups of every broker (each lists the groups it coordinates), by group id;
        only those in `states` ("Stable", "Empty", ...) when given (ListGroups v4+)."""
        wanted = None if states is None else list(states)
        listed = await self.client.from_every_broker(lambda node_id: self._list_groups_at(node_id, wanted))
        return sorted(listed, key=lambda group: (group.group_id, group.coordinator_id))

    async def _list_groups_at(self, node_id: int, states: list[str] | None) -> list[ListedGroup]:
        connection = await self.client.node_connection(node_id)
        version = connection.version(LIST_GROUPS)
        if states and version < _FIRST_STATES_LIST_GROUPS:
            raise UnsupportedVersion(f"list groups by state needs ListGroups "
                                     f"v{_FIRST_STATES_LIST_GROUPS}, {connection.address} "
                                     f"speaks v{version}")
        response = await connection.request(LIST_GROUPS, version, LIST_GROUPS.request(
            states_filter=states or [], types_filter=[]))
        check(response.error_code, f"list groups of broker {node_id}")
        return [ListedGroup(g.group_id, g.protocol_type, g.group_state, g.group_type, node_id)
                for g in response.groups]

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete groups (their committed offsets included) through their coordinators;
        each group's error (None on success) is returned, such as NON_EMPTY_GROUP while
        it has members or GROUP_ID_NOT_FOUND. Retriable errors are retried, then raised."""
        names = list(dict.fromkeys(groups))
        answers = await asyncio.gather(*(self._delete_group(name) for name in names))
        return dict(zip(names, answers))

    async def _delete_group(self, group: str) -> KafkaError | None:
        context = f"delete group {group!r}"

        async def send(connection: BrokerConnection) -> KafkaError | None:
            response = await connection.request(
                DELETE_GROUPS, connection.version(DELETE_GROUPS),
                DELETE_GROUPS.request(groups_names=[group]))
            answer = entry_for(response.results, "group_id", group, context)
            if not answer.error_code:
                return None
            error = KafkaError(answer.error_code, context)
            if error.retriable:
                raise error
            return error

        return await self.client.with_coordinator(group, send)

    async def create_topics(self, topics: Mapping[str, NewTopic], *, validate_only: bool = False,
                            timeout_ms: int = 30000) -> dict[str, CreatedTopic]:
        """Create topics through the controller; each topic's outcome is returned, with
        its error (such as TOPIC_ALREADY_EXISTS) rather than raised."""
        results: dict[str, CreatedTopic] = {}
        remaining = dict(topics)

        async def attempt() -> dict[str, CreatedTopic]:
            connection = await self.client.controller_connection()
            body = CREATE_TOPICS.request(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
                CREATE_TOPICS.request.CreatableTopic(
                    name=name, num_partitions=spec.partitions,
                    replication_factor=spec.replication_factor,
                    configs=[CREATE_TOPICS.request.CreatableTopicConfig(name=key, value=value)
                             for key, value in spec.configs.items()])
                for name, spec in remaining.items()])
            response = await connection.request(CREATE_TOPICS, connection.version(CREATE_TOPICS), body,
                                                timeout=self.client.request_timeout + timeout_ms / 1000)
            for answer in response.topics:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    continue
                error = KafkaError(answer.error_code, f"create topic {answer.name!r}",
                                   answer.error_message) if answer.error_code else None
                results[answer.name] = CreatedTopic(answer.name, error, answer.topic_id,
                                                    answer.num_partitions, answer.replication_factor)
                remaining.pop(answer.name, None)
            if remaining:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"create topics {sorted(remaining)}")
            return results

        return await self.client.retrying(attempt, self.client.forget_controller)

    async def delete_topics(self, names: Iterable[str], *,
                            timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Delete topics through the controller; each topic's error (None on success)."""
        results: dict[str, KafkaError | None] = {}
        remaining = list(names)

        async def attempt() -> dict[str, KafkaError | None]:
            connection = await self.client.controller_connection()
            version = connection.version(DELETE_TOPICS)
            if version >= _FIRST_TOPICS_DELETE:
                body = DELETE_TOPICS.request(timeout_ms=timeout_ms, topics=[
                    DELETE_TOPICS.request.DeleteTopicState(name=name) for name in remaining])
            else:
                body = DELETE_TOPICS.request(timeout_ms=timeout_ms, topic_names=list(remaining))
            response = await connection.request(DELETE_TOPICS, version, body,
                                                timeout=self.client.request_timeout + timeout_ms / 1000)
            for answer in response.responses:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    continue
                results[answer.name] = KafkaError(
                    answer.error_code, f"delete topic {answer.name!r}",
                    answer.error_message) if answer.error_code else None
                self.client.forget_topic(answer.name)
                if answer.name in remaining:
                    remaining.remove(answer.name)
            if remaining:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"delete topics {sorted(remaining)}")
            return results

        return await self.client.retrying(attempt, self.client.forget_controller)

    async def create_partitions(self, counts: Mapping[str, int], *,
                                assignments: Mapping[str, Sequence[Sequence[int]]] | None = None,
                                validate_only: bool = False,
                                timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Grow each topic to `counts[topic]` partitions through the controller;
        `assignments[topic]` may list the replica broker ids of each new partition.
        Each topic's error (None on success) is returned, not raised."""
        results: dict[str, KafkaError | None] = {}
        remaining = dict(counts)
        assignments = assignments or {}

        async def attempt() -> dict[str, KafkaError | None]:
            connection = await self.client.controller_connection()
            Request = CREATE_PARTITIONS.request
            body = Request(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
                Request.CreatePartitionsTopic(
                    name=name, count=count,
                    assignments=None if name not in assignments else [
                        Request.CreatePartitionsAssignment(broker_ids=list(ids))
                        for ids in assignments[name]])
                for name, count in remaining.items()])
            response = await connection.request(
                CREATE_PARTITIONS, connection.version(CREATE_PARTITIONS), body,
                timeout=self.client.request_timeout + timeout_ms / 1000)
            for answer in response.results:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    continue
                results[answer.name] = KafkaError(
                    answer.error_code, f"create partitions of topic {answer.name!r}",
                    answer.error_message) if answer.error_code else None
                self.client.forget_topic(answer.name)
                remaining.pop(answer.name, None)
            if remaining:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"create partitions {sorted(remaining)}")
            return results

        return await self.client.retrying(attempt, self.client.forget_controller)

    async def elect_leaders(self, election_type: int,
                            partitions: Iterable[tuple[str, int]] | None = None, *,
                            timeout_ms: int = 60000,
                            ) -> dict[tuple[str, int], KafkaError | None]:
        """Preferred (PREFERRED_ELECTION) or unclean (UNCLEAN_ELECTION) leader elections
        through the controller, for `partitions` or (None) every partition of the cluster.
        Each partition's error (None: elected; ELECTION_NOT_NEEDED: its leader is already
        the one the election would pick) is returned, not raised; an error refusing the
        whole request is raised."""
        wanted = None if partitions is None else sorted(set(partitions))

        async def attempt() -> dict[tuple[str, int], KafkaError | None]:
            connection = await self.client.controller_connection()
            version = connection.version(ELECT_LEADERS)
            if election_type != PREFERRED_ELECTION and version < _FIRST_TYPED_ELECT_LEADERS:
                raise UnsupportedVersion(f"ElectLeaders v{version} of broker {connection.address} "
                                         f"elects preferred leaders only")
            Request = ELECT_LEADERS.request
            topics: dict[str, list[int]] = {}
            for topic, partition in wanted or ():
                topics.setdefault(topic, []).append(partition)
            body = Request(election_type=election_type, timeout_ms=timeout_ms,
                           topic_partitions=None if wanted is None else [
                               Request.TopicPartitions(topic=topic, partitions=indexes)
                               for topic, indexes in topics.items()])
            response = await connection.request(ELECT_LEADERS, version, body,
                                                timeout=self.client.request_timeout + timeout_ms / 1000)
            if version >= 1 and response.error_code:
                check(response.error_code, "elect leaders")
            results = {}
            for answer in response.replica_election_results:
                for result in answer.partition_result:
                    if result.error_code == ErrorCode.NOT_CONTROLLER:  # v0: no top-level error
                        raise KafkaError(ErrorCode.NOT_CONTROLLER, "elect leaders")
                    results[(answer.topic, result.partition_id)] = KafkaError(
                        result.error_code, f"elect the leader of {answer.topic}-{result.partition_id}",
                        result.error_message) if result.error_code else None
            missing = [tp for tp in wanted or () if tp not in results]
            if missing:
                raise ProtocolViolation(f"elect leaders: the response has no result for {missing}")
            for topic, _ in results:
                self.client.forget_topic(topic)
            return results

        return await self.client.retrying(attempt, self.client.forget_controller)

    async def alter_partition_reassignments(
            self, targets: Mapping[tuple[str, int], Sequence[int] | None], *, timeout_ms: int = 60000
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Reassign partitions through the controller: each partition's target replicas,
        or None to cancel its reassignment in progress. Each partition's error is
        returned, not raised; an error refusing the whole request is raised."""
        async def attempt() -> dict[tuple[str, int], KafkaError | None]:
            connection = await self.client.controller_connection()
            Request = ALTER_PARTITION_REASSIGNMENTS.request
            topics: dict[str, list] = {}
            for (topic, partition), replicas in sorted(targets.items()):
                topics.setdefault(topic, []).append(Request.ReassignablePartition(
                    partition_index=partition, replicas=None if replicas is None else list(replicas)))
            body = Request(timeout_ms=timeout_ms, topics=[
                Request.ReassignableTopic(name=topic, partitions=partitions)
                for topic, partitions in topics.items()])
            response = await connection.request(
                ALTER_PARTITION_REASSIGNMENTS, connection.version(ALTER_PARTITION_REASSIGNMENTS),
                body, timeout=self.client.request_timeout + timeout_ms / 1000)
            check(response.error_code, "alter partition reassignments", response.error_message)
            results = {}
            for answer in response.responses:
                for result in answer.partitions:
                    tp = (answer.name, result.partition_index)
                    results[tp] = KafkaError(result.error_code, f"reassign {tp[0]}-{tp[1]}",
                                             result.error_message) if result.error_code else None
            missing = [tp for tp in targets if tp not in results]
            if missing:
                raise ProtocolViolation(f"alter partition reassignments: no result for {missing}")
            for topic, _ in results:
                self.client.forget_topic(topic)
            return results

        return await self.client.retrying(attempt, self.client.forget_controller)

    async def list_partition_reassignments(
            self, partitions: Iterable[tuple[str, int]] | None = None, *, timeout_ms: int = 60000
    ) -> dict[tuple[str, int], OngoingReassignment]:
        """The reassignments in progress, of `partitions` or (None) of the whole cluster."""
        wanted = None if partitions is None else sorted(set(partitions))

        async def attempt() -> dict[tuple[str, int], OngoingReassignment]:
            connection = await self.client.controller_connection()
            Request = LIST_PARTITION_REASSIGNMENTS.request
            topics: dict[str, list[int]] = {}
            for topic, partition in wanted or ():
                topics.setdefault(topic, []).append(partition)
            body = Request(timeout_ms=timeout_ms, topics=None if wanted is None else [
                Request.ListPartitionReassignmentsTopics(name=topic, partition_indexes=indexes)
                for topic, indexes in topics.items()])
            response = await connection.request(
                LIST_PARTITION_REASSIGNMENTS, connection.version(LIST_PARTITION_REASSIGNMENTS),
                body, timeout=self.client.request_timeout + timeout_ms / 1000)
            check(response.error_code, "list partition reassignments", response.error_message)
            return {(topic.name, p.partition_index): OngoingReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
                for topic in response.topics for p in topic.partitions}

        return await self.client.retrying(attempt, self.client.forget_controller)

    # -- configs -------------------------------------------------------------------------
    async def describe_configs(self, resources: Iterable[tuple[int, str]], *,
                               keys: Iterable[str] | None = None, include_synonyms: bool = False,
                               ) -> dict[tuple[int, str], dict[str, ConfigEntry]]:
        """The configs of each `(resource type, name)`: TOPIC_RESOURCE with a topic name,
        BROKER_RESOURCE with a broker id (asked of that broker). All keys unless `keys`.

        `ConfigEntry.source` tells overrides (DYNAMIC_TOPIC_CONFIG, ...) from defaults.
        A resource's error (such as UNKNOWN_TOPIC_OR_PARTITION) raises KafkaError.
        """
        wanted = list(dict.fromkeys((int(kind), str(name)) for kind, name in resources))
        key_list = None if keys is None else list(keys)

        async def attempt() -> dict[tuple[int, str], dict[str, ConfigEntry]]:
            by_node: dict[int | None, list[tuple[int, str]]] = collections.defaultdict(list)
            for kind, name in wanted:  # broker resources go to that broker, others anywhere
                by_node[int(name) if kind == BROKER_RESOURCE and name.isdigit() else None].append(
                    (kind, name))
            answers = await asyncio.gather(*(
                self._describe_configs_at(node_id, items, key_list, include_synonyms)
                for node_id, items in by_node.items()))
            return {resource: entries for answer in answers for resource, entries in answer.items()}

        return await self.client.retrying(attempt)

    async def _describe_configs_at(self, node_id: int | None, resources: list[tuple[int, str]],
                                   keys: list[str] | None, include_synonyms: bool,
                                   ) -> dict[tuple[int, str], dict[str, ConfigEntry]]:
        if node_id is None:
            connection = await self.client.any_connection()
        else:
            connection = await self.client.node_connection(node_id)
        version = connection.version(DESCRIBE_CONFIGS)
        Request = DESCRIBE_CONFIGS.request
        body = Request(include_synonyms=include_synonyms, include_documentation=False, resources=[
            Request.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                            configuration_keys=keys)
            for kind, name in resources])
        response = await connection.request(DESCRIBE_CONFIGS, version, body)
        described = {}
        for kind, name in resources:
            context = f"describe configs of {_resource(kind, name)}"
            answer = _answer_for(response.results, kind, name, context)
            check(answer.error_code, context, answer.error_message)
            entries = {}
            for config in answer.configs:
                if version >= _FIRST_SOURCES_DESCRIBE_CONFIGS:
                    source, is_default = config.config_source, config.config_source == DEFAULT_CONFIG
                else:
                    source = DEFAULT_CONFIG if config.is_default else UNKNOWN_CONFIG
                    is_default = config.is_default
                entries[config.name] = ConfigEntry(
                    config.name, config.value, source, is_default, config.read_only,
                    config.is_sensitive,
                    tuple(ConfigSynonym(y.name, y.value, y.source) for y in config.synonyms or ()))
            described[(kind, name)] = entries
        return described

    async def alter_configs(self, configs: Mapping[tuple[int, str], Mapping[str, str]], *,
                            validate_only: bool = False) -> dict[tuple[int, str], KafkaError | None]:
        """Replace each `(resource type, name)`'s configs with `configs[resource]`: keys
        left out go back to their defaults. Each resource's error (None on success)."""
        Request = ALTER_CONFIGS.request
        return await self._alter_configs(ALTER_CONFIGS, {
            resource: [Request.AlterableConfig(name=key, value=value) for key, value in entries.items()]
            for resource, entries in configs.items()}, validate_only)

    async def incremental_alter_configs(
            self, changes: Mapping[tuple[int, str], Iterable[tuple[str, int, str | None]]], *,
            validate_only: bool = False) -> dict[tuple[int, str], KafkaError | None]:
        """Apply `(key, operation, value)` changes to each `(resource type, name)`; the
        operations are SET_CONFIG, DELETE_CONFIG, APPEND_CONFIG and SUBTRACT_CONFIG.
        Each resource's error (None on success)."""
        Request = INCREMENTAL_ALTER_CONFIGS.request
        return await self._alter_configs(INCREMENTAL_ALTER_CONFIGS, {
            resource: [Request.AlterableConfig(name=key, config_operation=op, value=value)
                       for key, op, value in entries]
            for resource, entries in changes.items()}, validate_only)

    async def _alter_configs(self, api, configs: dict[tuple[int, str], list], validate_only: bool,
                             ) -> dict[tuple[int, str], KafkaError | None]:
        """Broker resources go to that broker, the others (and the cluster default) anywhere."""
        by_node: dict[int | None, list[tuple[int, str]]] = collections.defaultdict(list)
        for kind, name in configs:
            by_node[int(name) if kind == BROKER_RESOURCE and name.isdigit() else None].append((kind, name))

        async def send(node_id: int | None, resources: list[tuple[int, str]]):
            connection = await (self.client.any_connection() if node_id is None else self.client.node_connection(node_id))
            body = api.request(validate_only=validate_only, resources=[
                api.request.AlterConfigsResource(resource_type=kind, resource_name=name,
                                                 configs=configs[(kind, name)])
                for kind, name in resources])
            response = await connection.request(api, connection.version(api), body)
            results = {}
            for kind, name in resources:
                context = f"alter configs of {_resource(kind, name)}"
                answer = _answer_for(response.responses, kind, name, context)
                results[(kind, name)] = KafkaError(answer.error_code, context, answer.error_message) \
                    if answer.error_code else None
            return results

        async def attempt() -> dict[tuple[int, str], KafkaError | None]:
            answers = await asyncio.gather(*(send(node_id, items) for node_id, items in by_node.items()))
            return {resource: error for answer in answers for resource, error in answer.items()}

        return await self.client.retrying(attempt)

    # -- ACLs and SCRAM credentials -------------------------------------------------------
    async def describe_acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """The ACLs matching `acl_filter` (DescribeAcls, asked of any broker). A broker
        without an authorizer answers SECURITY_DISABLED, raised as KafkaError. A filter
        with an UNKNOWN value is a ValueError."""
        _check_filter(acl_filter)

        async def attempt() -> list[AclBinding]:
            connection = await self.client.any_connection()
            response = await connection.request(
                DESCRIBE_ACLS, connection.version(DESCRIBE_ACLS),
                DESCRIBE_ACLS.request(**_acl_filter_fields(acl_filter)))
            check(response.error_code, "describe ACLs", response.error_message)
            return [AclBinding(ResourceType.of(r.resource_type), r.resource_name,
                               PatternType.of(r.pattern_type), a.principal, a.host,
                               Operation.of(a.operation), Permission.of(a.permission_type))
                    for r in response.resources for a in r.acls]

        return await self.client.retrying(attempt)

    async def create_acls(self, bindings: Iterable[AclBinding]) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs (CreateAcls, any broker: Kafka's brokers forward it to the
        controller). Each binding's error (None: it exists now) is returned, not raised.
        A binding with an indefinite value (ANY, MATCH, UNKNOWN) is a ValueError: Kafka
        fails the whole request for it."""
        wanted = list(dict.fromkeys(bindings))
        for binding in wanted:
            _check_binding(binding)
        if not wanted:
            return {}
        Request = CREATE_ACLS.request
        body = Request(creations=[Request.AclCreation(
            resource_type=b.resource_type, resource_name=b.resource_name,
            resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
            operation=b.operation, permission_type=b.permission) for b in wanted])

        async def attempt() -> dict[AclBinding, KafkaError | None]:
            connection = await self.client.any_connection()
            response = await connection.request(CREATE_ACLS, connection.version(CREATE_ACLS), body)
            if len(response.results) != len(wanted):
                raise ProtocolViolation(f"create ACLs: {len(response.results)} results for "
                                        f"{len(wanted)} ACLs")
            return {binding: KafkaError(answer.error_code, f"create ACL {_acl_text(binding)}",
                                        answer.error_message) if answer.error_code else None
                    for binding, answer in zip(wanted, response.results)}

        return await self.client.retrying(attempt)

    async def delete_acls(self, filters: Iterable[AclBindingFilter],
                          ) -> dict[AclBindingFilter, DeletedAcls]:
        """Delete every ACL matching each filter (DeleteAcls, any broker). Each filter's
        outcome is returned, not raised: the ACLs it deleted, or its error (such as
        SECURITY_DISABLED from a broker without an authorizer). A filter with an UNKNOWN
        value is a ValueError."""
        wanted = list(dict.fromkeys(filters))
        for acl_filter in wanted:
            _check_filter(acl_filter)
        if not wanted:
            return {}
        Request = DELETE_ACLS.request
        body = Request(filters=[Request.DeleteAclsFilter(**_acl_filter_fields(f)) for f in wanted])

        async def attempt() -> dict[AclBindingFilter, DeletedAcls]:
            connection = await self.client.any_connection()
            response = await connection.request(DELETE_ACLS, connection.version(DELETE_ACLS), body)
            if len(response.filter_results) != len(wanted):
                raise ProtocolViolation(f"delete ACLs: {len(response.filter_results)} results for "
                                        f"{len(wanted)} filters")
            results = {}
            for acl_filter, answer in zip(wanted, response.filter_results):
                matches = []
                for m in answer.matching_acls:
                    binding = AclBinding(ResourceType.of(m.resource_type), m.resource_name,
                                         PatternType.of(m.pattern_type), m.principal, m.host,
                                         Operation.of(m.operation), Permission.of(m.permission_type))
                    matches.append(AclDeletion(binding, KafkaError(
                        m.error_code, f"delete ACL {_acl_text(binding)}", m.error_message)
                        if m.error_code else None))
                results[acl_filter] = DeletedAcls(KafkaError(
                    answer.error_code, "delete ACLs", answer.error_message)
                    if answer.error_code else None, tuple(matches))
            return results

        return await self.client.retrying(attempt)

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None,
                                              ) -> dict[str, UserScramCredentials]:
        """The SCRAM mechanisms and iteration counts of `users` (None or none: every user
        that has any), from any broker. A named user without credentials comes back with
        RESOURCE_NOT_FOUND as its error; an error refusing the whole request is raised."""
        names = list(dict.fromkeys(users or ()))
        Request = DESCRIBE_USER_SCRAM_CREDENTIALS.request
        body = Request(users=[Request.UserName(name=name) for name in names] or None)

        async def attempt() -> dict[str, UserScramCredentials]:
            connection = await self.client.any_connection()
            response = await connection.request(
                DESCRIBE_USER_SCRAM_CREDENTIALS, connection.version(DESCRIBE_USER_SCRAM_CREDENTIALS),
                body)
            check(response.error_code, "describe SCRAM credentials", response.error_message)
            results = {answer.user: UserScramCredentials(
                answer.user,
                KafkaError(answer.error_code, f"describe SCRAM credentials of user {answer.user!r}",
                           answer.error_message) if answer.error_code else None,
                tuple(ScramCredentialInfo(ScramMechanism.of(c.mechanism), c.iterations)
                      for c in answer.credential_infos))
                for answer in response.results}
            missing = [name for name in names if name not in results]
            if missing:
                raise ProtocolViolation(f"describe SCRAM credentials: no result for users {missing}")
            return results

        return await self.client.retrying(attempt)

    async def alter_user_scram_credentials(self, upsertions: Iterable[ScramUpsertion] = (),
                                           deletions: Iterable[ScramDeletion] = (),
                                           ) -> dict[str, KafkaError | None]:
        """Set and remove SCRAM credentials (AlterUserScramCredentials, through the
        controller as Kafka's admin client sends it). For each upsertion the client draws
        a random salt and sends it with the salted password (SCRAM's Hi()); the password
        itself never leaves. Kafka takes one change per user in a request, so a user's
        further changes go in the requests after it, deletions first. Each user's first
        error (None when all its changes were made) is returned, not raised; a password the
        client cannot salt (empty, or iterations below 1) is a ValueError."""
        Request = ALTER_USER_SCRAM_CREDENTIALS.request
        changes = [(d.user, Request.ScramCredentialDeletion(name=d.user, mechanism=d.mechanism))
                   for d in deletions]
        for u in upsertions:
            if not u.password:
                raise ValueError(f"the {u.mechanism.mechanism_name} password of user {u.user!r} is empty")
            if u.iterations < 1:
                raise ValueError(f"{u.iterations} iterations for user {u.user!r}: at least 1 is needed")
            salt = secrets.token_bytes(_SCRAM_SALT_BYTES)
            changes.append((u.user, Request.ScramCredentialUpsertion(
                name=u.user, mechanism=u.mechanism, iterations=u.iterations, salt=salt,
                salted_password=u.mechanism.salted_password(u.password, salt, u.iterations))))
        rounds: list[dict[str, Struct]] = []
        for user, change in changes:
            free = next((r for r in rounds if user not in r), None)
            if free is None:
                free = {}
                rounds.append(free)
            free[user] = change
        results: dict[str, KafkaError | None] = {}
        for changed in rounds:
            for user, error in (await self._alter_scram_round(changed)).items():
                if results.get(user) is None:
                    results[user] = error
        return results

    async def _alter_scram_round(self, changes: dict[str, Struct]) -> dict[str, KafkaError | None]:
        """One AlterUserScramCredentials request, at most one change per user."""
        Request = ALTER_USER_SCRAM_CREDENTIALS.request
        body = Request(
            deletions=[c for c in changes.values() if isinstance(c, Request.ScramCredentialDeletion)],
            upsertions=[c for c in changes.values() if isinstance(c, Request.ScramCredentialUpsertion)])

        async def attempt() -> dict[str, KafkaError | None]:
            connection = await self.client.controller_connection()
            response = await connection.request(
                ALTER_USER_SCRAM_CREDENTIALS, connection.version(ALTER_USER_SCRAM_CREDENTIALS), body)
            results = {}
            for answer in response.results:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER, "alter SCRAM credentials")
                results[answer.user] = KafkaError(
                    answer.error_code, f"alter SCRAM credentials of user {answer.user!r}",
                    answer.error_message) if answer.error_code else None
            missing = [user for user in changes if user not in results]
            if missing:
                raise ProtocolViolation(f"alter SCRAM credentials: no result for users {missing}")
            return results

        return await self.client.retrying(attempt, self.client.forget_controller)

    # -- client quotas -----------------------------------------------------------------
    async def describe_client_quotas(self, components: Iterable[tuple[str, int, str | None]] = (), *,
                                     strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas of the entities matching every filter component (entity type, match
        type of wire.quota_types, name for an exact match else None); with `strict`, of
        entities with no other entity type. A QuotaEntity is its sorted (entity type, name
        or None for the default) pairs. An error refusing the filter is raised."""
        Request = DESCRIBE_CLIENT_QUOTAS.request
        body = Request(components=[Request.ComponentData(entity_type=t, match_type=m, match=n)
                                   for t, m, n in components], strict=strict)

        async def attempt() -> dict[QuotaEntity, dict[str, float]]:
            connection = await self.client.any_connection()
            response = await connection.request(
                DESCRIBE_CLIENT_QUOTAS, connection.version(DESCRIBE_CLIENT_QUOTAS), body)
            check(response.error_code, "describe client quotas", response.error_message)
            return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                    {v.key: v.value for v in entry.values} for entry in response.entries or ()}

        return await self.client.retrying(attempt)

    async def alter_client_quotas(self, alterations: Mapping[QuotaEntity, Mapping[str, float | None]], *,
                                  validate_only: bool = False) -> dict[QuotaEntity, KafkaError | None]:
        """Set each entity's quotas (key -> value) and remove those given None, one
        AlterClientQuotas to any broker; each entity's error (None: done) is returned, not
        raised."""
        Request = ALTER_CLIENT_QUOTAS.request
        entities = {tuple(sorted(entity)): ops for entity, ops in alterations.items()}
        body = Request(validate_only=validate_only, entries=[Request.EntryData(
            entity=[Request.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[Request.OpData(key=key, value=0.0 if value is None else float(value), remove=value is None)
                 for key, value in ops.items()]) for entity, ops in entities.items()])

        async def attempt() -> dict[QuotaEntity, KafkaError | None]:
            connection = await self.client.any_connection()
            response = await connection.request(
                ALTER_CLIENT_QUOTAS, connection.version(ALTER_CLIENT_QUOTAS), body)
            results = {}
            for answer in response.entries:
                entity = tuple(sorted((e.entity_type, e.entity_name) for e in answer.entity))
                results[entity] = KafkaError(answer.error_code, f"alter client quotas of {entity}",
                                             answer.error_message) if answer.error_code else None
            missing = [entity for entity in entities if entity not in results]
            if missing:
                raise ProtocolViolation(f"alter client quotas: no result for {missing}")
            return results

        return await self.client.retrying(attempt)


def _resource(kind: int, name: str) -> str:
    return f"{_RESOURCE_NAMES.get(kind, f'resource type {kind}')} {name!r}"

def _answer_for(answers, kind: int, name: str, context: str):
    """The entry of one config resource in a response; a response without it breaks the protocol."""
    answer = next((r for r in answers if r.resource_type == kind and r.resource_name == name), None)
    if answer is None:
        raise ProtocolViolation(f"{context}: the response has no entry for it")
    return answer

def _acl_filter_fields(acl_filter: AclBindingFilter) -> dict:
    """A filter as the fields of DescribeAcls' request and of DeleteAcls' filters."""
    return dict(resource_type_filter=acl_filter.resource_type,
                resource_name_filter=acl_filter.resource_name,
                pattern_type_filter=acl_filter.pattern_type, principal_filter=acl_filter.principal,
                host_filter=acl_filter.host, operation=acl_filter.operation,
                permission_type=acl_filter.permission)

def _check_binding(binding: AclBinding) -> None:
    """An ACL to create names one resource type, LITERAL or PREFIXED, one operation and
    ALLOW or DENY: not ANY, MATCH or UNKNOWN."""
    for kind, value in ((ResourceType, binding.resource_type), (PatternType, binding.pattern_type),
                        (Operation, binding.operation), (Permission, binding.permission)):
        member = kind.of(value)
        if member in (kind(0), kind(1)) or member is PatternType.MATCH:
            raise ValueError(f"ACL {_acl_text(binding)}: {member.kafka_name} is not a definite "
                             f"{kind.__name__}")

def _check_filter(acl_filter: AclBindingFilter) -> None:
    """UNKNOWN matches nothing, and Kafka refuses the request (it closes the connection)."""
    for kind, value in ((ResourceType, acl_filter.resource_type),
                        (PatternType, acl_filter.pattern_type),
                        (Operation, acl_filter.operation), (Permission, acl_filter.permission)):
        if kind.of(value) == 0:
            raise ValueError(f"{acl_filter}: an UNKNOWN {kind.__name__} matches nothing")

def _acl_text(binding: AclBinding) -> str:
    """"Allow User:alice from * to Read Topic 'events' (Literal)": an ACL in errors."""
    return (f"{binding.permission.kafka_name} {binding.principal} from {binding.host} to "
            f"{binding.operation.kafka_name} {binding.resource_type.kafka_name} "
            f"{binding.resource_name!r} ({binding.pattern_type.kafka_name})")
