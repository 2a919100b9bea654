"""A broker's ZooKeeper session (kazoo) and the reads and writes of Kafka's layout
(broker.zookeeper.layout) that the controller and brokers rely on.

Writes are conditional as in Kafka: on a znode's version (`StaleVersion` when another
writer got there first), on absence (creates answer False when the znode exists), and for
the controller on the version of `/controller_epoch`, checked in the same ZooKeeper
multi-op as the write, so that a deposed controller's write fails (`ControllerMoved`)
instead of overwriting its successor's. Every call blocks; while the session is
disconnected, kazoo's ConnectionLoss and SessionExpiredError come through unchanged.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Mapping, NamedTuple

from kazoo.protocol.states import KazooState, WatchedEvent

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError,
                              RuntimeInconsistency)

from broker.zookeeper.layout import (ACL_CHANGE_NAME, BROKER_IDS, BROKER_TOPICS, CLUSTER_ID, CONFIG_CHANGE_PREFIX,
                                      CONFIG, CONFIG_CHANGES, CONFIG_CLIENTS, CONFIG_USERS, CONTROLLER, CONTROLLER_EPOCH, DELETE_TOPICS,
                                      INITIAL_CONTROLLER_EPOCH, ISR_CHANGE_NOTIFICATION,
                                      ISR_CHANGE_PREFIX, PERSISTENT_PATHS, PRODUCER_ID_BLOCK,
                                      REASSIGN_PARTITIONS, BrokerRegistration, ClusterId,
                                      ConfigChange, ControllerEpoch, ControllerRegistration,
                                      EntityConfig, IsrChange, LeaderAndIsr, PartitionReassignment,
                                      ProducerIdBlock, TopicAssignment,
                                      broker_config_path, broker_path, delete_topic_path, partition_state_path,
                                      topic_config_path, topic_path)

# kazoo's default reconnection backs off towards an hour between attempts; a broker must
# be back within a second of ZooKeeper.
_RECONNECT = dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
_CLAIM_ATTEMPTS = 100  # producer id blocks: other brokers' claims that one claim outlasts
_REWRITE_ATTEMPTS = 10  # a controller's read-modify-write of a znode others write too


class StaleVersion(Exception):
    """A conditional write found the znode changed (or gone) since the version it read."""


class ControllerMoved(Exception):
    """/controller_epoch moved on: the controller that wrote is no longer the controller."""


class BrokerIdInUse(Exception):
    """Another live session holds /brokers/ids/<id>."""


class Versioned(NamedTuple):
    """A znode's decoded data and the version a conditional write of it names."""

    value: object
    zk_version: int


class LiveBroker(NamedTuple):
    """A registered broker and its epoch: the czxid of its /brokers/ids/<id>, new with
    every registration, so that a bounced broker is told from one that stayed."""

    registration: BrokerRegistration
    epoch: int


# A one-shot ZooKeeper watch: called once, on kazoo's thread, when the znode (or its
# children) next changes.
Watch = Callable[[WatchedEvent], None]


class Election(NamedTuple):
    """A won controller election: the new epoch, and the version of /controller_epoch that
    this controller's writes are conditional on."""

    epoch: int
    epoch_zk_version: int


class ZkStore:
    def __init__(self, connect: str, session_timeout_ms: int = 18000):
        """`connect`: `zookeeper.connect`, host:port[,host:port...][/chroot]."""
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000,
                                  connection_retry=_RECONNECT)

    def start(self, timeout: float = 30.0) -> "ZkStore":
        """Connects, creating the chroot and the persistent paths a Kafka broker creates at
        start (each only if absent)."""
        hosts, _, chroot = self.connect.partition("/")
        if chroot:
            root = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000)
            root.start(timeout)
            try:
                root.ensure_path("/" + chroot)
            finally:
                root.stop()
                root.close()
        self.client.start(timeout)
        for path in PERSISTENT_PATHS:
            self.client.ensure_path(path)
        return self

    def close(self) -> None:
        """Ends the session: ZooKeeper deletes its ephemeral znodes at once."""
        self.client.stop()
        self.client.close()

    def _ours(self, path: str) -> bool:
        """Whether `path` is an ephemeral znode of this session (a create that raised
        ConnectionLoss may have happened all the same)."""
        stat = self.client.exists(path)
        return stat is not None and stat.ephemeralOwner == self.client.client_id[0]

    def _get(self, path: str, kind) -> Versioned | None:
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return None
        return Versioned(kind.from_json(path, data), stat.version)

    def _commit(self, writes: Callable[[TransactionRequest], object],
                controller_epoch_version: int | None) -> list:
        """Commits the writes `writes` adds to a transaction, after a check of
        /controller_epoch's version when one is given; the writes' results. A write that
        ZooKeeper refuses raises its kazoo error (BadVersionError, NodeExistsError, ...)."""
        transaction = self.client.transaction()
        if controller_epoch_version is not None:
            transaction.check(CONTROLLER_EPOCH, controller_epoch_version)
        writes(transaction)
        results = transaction.commit()
        for index, result in enumerate(results):
            # The failed operation carries its error; the others only say they were undone.
            if isinstance(result, Exception) and not isinstance(
                    result, (RolledBackError, RuntimeInconsistency)):
                if controller_epoch_version is not None and index == 0:
                    raise ControllerMoved(f"{CONTROLLER_EPOCH} is no longer at version "
                                          f"{controller_epoch_version}")
                raise result
        return results[1:] if controller_epoch_version is not None else results

    def _set(self, path: str, data: bytes, zk_version: int,
             controller_epoch_version: int | None) -> int:
        """Sets `path` if it is still at `zk_version`; its new version."""
        try:
            [stat] = self._commit(lambda t: t.set_data(path, data, zk_version),
                                  controller_epoch_version)
        except (BadVersionError, NoNodeError):
            raise StaleVersion(f"{path} is no longer at version {zk_version}") from None
        return stat.version

    # The cluster

    def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster's id: the one /cluster/id holds, or `proposed` once written there."""
        try:
            self.client.create(CLUSTER_ID, ClusterId(proposed).to_json(), makepath=True)
            return proposed
        except NodeExistsError:
            return self._get(CLUSTER_ID, ClusterId).value.id

    def register_broker(self, broker_id: int, registration: BrokerRegistration) -> int:
        """Creates the ephemeral /brokers/ids/<id>, which lives as long as this session;
        returns the broker epoch, the znode's creation zxid (czxid), as Kafka's."""
        path = broker_path(broker_id)
        try:
            self.client.create(path, registration.to_json(), ephemeral=True)
        except NodeExistsError:
            if not self._ours(path):
                raise BrokerIdInUse(f"broker id {broker_id} is registered by another session "
                                    f"({path})") from None
        return self.client.exists(path).czxid

    def wait_until_unregistered(self, broker_id: int, timeout: float) -> None:
        """Returns once /brokers/ids/<id> is gone (a watch on it wakes the wait), as the
        registration of a dead broker's session goes when ZooKeeper expires the session,
        or after `timeout` seconds."""
        path = broker_path(broker_id)
        deadline = time.monotonic() + timeout
        while True:
            changed = threading.Event()
            remaining = deadline - time.monotonic()
            if self.client.exists(path, watch=lambda event: changed.set()) is None or remaining <= 0:
                return
            changed.wait(remaining)

    def broker_ids(self) -> list[int]:
        return sorted(int(name) for name in self.client.get_children(BROKER_IDS))

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        found = self._get(broker_path(broker_id), BrokerRegistration)
        return found and found.value

    # Topics and partitions

    def topics(self) -> list[str]:
        return sorted(self.client.get_children(BROKER_TOPICS))

    def create_topic(self, topic: str, assignment: TopicAssignment) -> bool:
        """Writes /brokers/topics/<topic>; False if the topic exists."""
        try:
            self._commit(lambda t: t.create(topic_path(topic), assignment.to_json()), None)
        except NodeExistsError:
            return False
        return True

    def topic_assignment(self, topic: str) -> Versioned | None:
        return self._get(topic_path(topic), TopicAssignment)

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment, zk_version: int,
                             *, controller_epoch_version: int | None = None) -> int:
        return self._set(topic_path(topic), assignment.to_json(), zk_version,
                         controller_epoch_version)

    def create_partition_state(self, topic: str, partition: int, state: LeaderAndIsr, *,
                               controller_epoch_version: int) -> bool:
        """The controller's first state of a new partition, with the partition's parent
        znodes; False if it has one already. NoNodeError if the topic is gone."""
        partitions = f"{topic_path(topic)}/partitions"
        parents = [path for path in (partitions, f"{partitions}/{partition}")
                   if self.client.exists(path) is None]

        def writes(transaction):
            for parent in parents:
                transaction.create(parent)
            transaction.create(partition_state_path(topic, partition), state.to_json())

        try:
            self._commit(writes, controller_epoch_version)
        except NodeExistsError:
            if self.client.exists(partition_state_path(topic, partition)) is None:
                raise
            return False
        return True

    def partition_state(self, topic: str, partition: int) -> Versioned | None:
        return self._get(partition_state_path(topic, partition), LeaderAndIsr)

    def set_partition_state(self, topic: str, partition: int, state: LeaderAndIsr,
                            zk_version: int, *, controller_epoch_version: int | None) -> int:
        """Conditional on the state's version, and for the controller (not for a leader
        changing its ISR) on the controller epoch's; the state's new version."""
        return self._set(partition_state_path(topic, partition), state.to_json(), zk_version,
                         controller_epoch_version)

    # The controller

    def controller_id(self) -> int | None:
        found = self._get(CONTROLLER, ControllerRegistration)
        return found and found.value.broker_id

    def controller_epoch(self) -> Versioned | None:
        found = self._get(CONTROLLER_EPOCH, ControllerEpoch)
        return found and Versioned(found.value.epoch, found.zk_version)

    def elect_controller(self, controller: ControllerRegistration) -> Election | None:
        """Kafka's election: one multi-op creates the ephemeral /controller and moves
        /controller_epoch on by one if no other broker moved it since it was read. None:
        another broker is the controller."""
        current = self.controller_epoch()
        if current is None:
            try:
                self.client.create(CONTROLLER_EPOCH,
                                   ControllerEpoch(INITIAL_CONTROLLER_EPOCH).to_json())
            except NodeExistsError:
                pass
            current = self.controller_epoch()
        epoch = current.value + 1

        def writes(transaction):
            transaction.create(CONTROLLER, controller.to_json(), ephemeral=True)
            transaction.set_data(CONTROLLER_EPOCH, ControllerEpoch(epoch).to_json(),
                                 current.zk_version)

        try:
            _, stat = self._commit(writes, None)
        except (NodeExistsError, BadVersionError):
            if self._ours(CONTROLLER):  # this session won already (a retried election)
                return Election(*self.controller_epoch())
            return None
        return Election(epoch, stat.version)

    # What any broker writes: topic administration, ISR changes, producer id blocks

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides in /config/topics/<topic> (none when the znode is absent)."""
        found = self._get(topic_config_path(topic), EntityConfig)
        return dict(found.value.config) if found else {}

    def _topic_config_write(self, topic: str, configs: dict[str, str]):
        """The write of /config/topics/<topic> for a transaction: a create, or a set on the
        version read now (a concurrent change then fails the transaction)."""
        path = topic_config_path(topic)
        stat = self.client.exists(path)
        data = EntityConfig(configs).to_json()
        if stat is None:
            return lambda transaction: transaction.create(path, data)
        return lambda transaction: transaction.set_data(path, data, stat.version)

    def create_topic_with_configs(self, topic: str, assignment: TopicAssignment,
                                  configs: dict[str, str]) -> bool:
        """AdminZkClient's topic creation in one multi-op: /config/topics/<topic> (created,
        or replaced when a deleted topic left it) and /brokers/topics/<topic>; False if the
        topic exists."""
        write_config = self._topic_config_write(topic, configs)

        def writes(transaction):
            write_config(transaction)
            transaction.create(topic_path(topic), assignment.to_json())

        try:
            self._commit(writes, None)
        except NodeExistsError:
            if self.client.exists(topic_path(topic)) is not None:
                return False
            raise
        return True

    def set_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        """Replace /config/topics/<topic> and note it under /config/changes, in one multi-op."""
        write_config = self._topic_config_write(topic, configs)

        def writes(transaction):
            write_config(transaction)
            transaction.create(CONFIG_CHANGE_PREFIX, ConfigChange(f"topics/{topic}").to_json(),
                               sequence=True)

        try:
            self._commit(writes, None)
        except (BadVersionError, NodeExistsError):
            raise StaleVersion(f"{topic_config_path(topic)} changed while it was being written") from None

    def broker_config(self, entity: str) -> dict[str, str]:
        """/config/brokers/<entity> (a broker id or <default>): none when absent."""
        found = self._get(broker_config_path(entity), EntityConfig)
        return dict(found.value.config) if found else {}

    def set_broker_config(self, entity: str, configs: dict[str, str]) -> None:
        """Replace /config/brokers/<entity> (kept, empty, once its last key goes, as Kafka's
        AdminZkClient keeps it) and note the change under /config/changes, in one multi-op."""
        path = broker_config_path(entity)
        stat = self.client.exists(path)
        data = EntityConfig(configs).to_json()

        def writes(transaction):
            if stat is None:
                transaction.create(path, data)
            else:
                transaction.set_data(path, data, stat.version)
            transaction.create(CONFIG_CHANGE_PREFIX, ConfigChange(f"brokers/{entity}").to_json(), sequence=True)

        try:
            self._commit(writes, None)
        except (BadVersionError, NodeExistsError):
            raise StaleVersion(f"{path} changed while it was being written") from None

    def entity_configs(self) -> dict[str, dict[str, str]]:
        """The config of every user, (user, client id) and client id: entity path
        (layout.config_entity_path) -> its config; znodes without one left out."""
        found = {}
        users = [f"users/{name}" for name in self.children(CONFIG_USERS)]
        for entity_path in (*users, *(f"{user}/clients/{name}" for user in users
                                       for name in self.children(f"{CONFIG}/{user}/clients")),
                            *(f"clients/{name}" for name in self.children(CONFIG_CLIENTS))):
            config = self.entity_config(entity_path)
            if config:
                found[entity_path] = config
        return found

    def entity_config(self, entity_path: str) -> dict[str, str]:
        """/config/<entity_path>'s config: none when the znode is absent."""
        found = self._get(f"{CONFIG}/{entity_path}", EntityConfig)
        return dict(found.value.config) if found else {}

    def change_entity_config(self, entity_path: str, changes: Mapping[str, str | None]) -> None:
        """Set the keys `changes` names in /config/<entity_path> (a None removes one),
        keeping its other keys (a user's SCRAM credentials and quotas share a znode), and
        note the change under /config/changes, in one multi-op. As Kafka's AdminZkClient, a
        user's or client id's znode left with no config and no children is deleted, with
        the `clients` and user znodes above it that it leaves empty; parents are made
        without data. StaleVersion when another writer changed the znode meanwhile."""
        path = f"{CONFIG}/{entity_path}"
        found = self._get(path, EntityConfig)
        config = dict(found.value.config) if found else {}
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        if found is None and config:
            self.client.ensure_path(path.rpartition("/")[0])
        deleted = self._emptied(path, found.zk_version) if found is not None and not config else []

        def writes(transaction):
            if found is None:
                if config:
                    transaction.create(path, EntityConfig(config).to_json())
            elif deleted:
                for emptied, zk_version in deleted:
                    transaction.delete(emptied, zk_version)
            else:
                transaction.set_data(path, EntityConfig(config).to_json(), found.zk_version)
            transaction.create(CONFIG_CHANGE_PREFIX, ConfigChange(entity_path).to_json(), sequence=True)

        try:
            self._commit(writes, None)
        except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
            raise StaleVersion(f"{path} changed while it was being written") from None

    def _emptied(self, path: str, zk_version: int) -> list[tuple[str, int]]:
        """The znodes (and versions) to delete with `path`, whose config goes: none when it
        has children; for a (user, client id), also its `clients` znode when it was the
        only one there, and the user's when that has no config and no other child."""
        if self.children(path):
            return []
        deleted = [(path, zk_version)]
        clients, _, client = path.rpartition("/")
        user, _, kind = clients.rpartition("/")
        if kind == "clients" and user.startswith(CONFIG_USERS + "/") and self.children(clients) == [client]:
            deleted.append((clients, -1))
            found = self._get(user, EntityConfig)
            if found is not None and not found.value.config and self.children(user) == ["clients"]:
                deleted.append((user, found.zk_version))
        return deleted

    def config_changes(self, after: int) -> list[tuple[int, ConfigChange, int]]:
        """(sequence number, change, creation time in ms) of the /config/changes
        notifications numbered above `after`, in order."""
        found = []
        for name in self.client.get_children(CONFIG_CHANGES):
            if not name.startswith(CONFIG_CHANGE_PREFIX.rpartition("/")[2]):
                continue
            sequence = int(name[-10:])
            if sequence <= after:
                continue
            try:
                data, stat = self.client.get(f"{CONFIG_CHANGES}/{name}")
            except NoNodeError:  # purged meanwhile
                continue
            found.append((sequence, ConfigChange.from_json(f"{CONFIG_CHANGES}/{name}", data), stat.ctime))
        return sorted(found, key=lambda change: change[0])

    def delete_config_change(self, sequence: int) -> None:
        try:
            self.client.delete(f"{CONFIG_CHANGE_PREFIX}{sequence:010d}")
        except NoNodeError:
            pass

    # ACLs (broker.security.acl_store encodes them)

    def children(self, path: str) -> list[str]:
        """The names of a znode's children; none when the znode does not exist."""
        try:
            return sorted(self.client.get_children(path))
        except NoNodeError:
            return []

    def data(self, path: str) -> tuple[bytes, int] | None:
        """A znode's data and version; None when it does not exist."""
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return None
        return data, stat.version

    def write_acls(self, path: str, data: bytes | None, zk_version: int | None, changes: str,
                   change: bytes) -> None:
        """Creates an ACL znode (`zk_version` None), replaces it or (`data` None) deletes it,
        if still at `zk_version`, and notes the change under `changes` (a sequential
        acl_changes_ znode) in the same multi-op; StaleVersion when another writer came first."""
        if zk_version is None:
            self.client.ensure_path(path.rpartition("/")[0])

        def writes(transaction):
            if zk_version is None:
                transaction.create(path, data)
            elif data is None:
                transaction.delete(path, zk_version)
            else:
                transaction.set_data(path, data, zk_version)
            transaction.create(f"{changes}/{ACL_CHANGE_NAME}", change, sequence=True)

        try:
            self._commit(writes, None)
        except (BadVersionError, NoNodeError, NodeExistsError):
            raise StaleVersion(f"{path} changed while it was being written") from None

    def acl_changes(self, changes: str, after: int) -> list[tuple[int, bytes, int]]:
        """(sequence number, data, creation time in ms) of the acl_changes_ notifications
        under `changes` numbered above `after`, in order."""
        found = []
        for name in self.children(changes):
            if not name.startswith(ACL_CHANGE_NAME) or not name[-10:].isdigit() or int(name[-10:]) <= after:
                continue
            try:
                data, stat = self.client.get(f"{changes}/{name}")
            except NoNodeError:  # purged meanwhile
                continue
            found.append((int(name[-10:]), data, stat.ctime))
        return sorted(found, key=lambda change: change[0])

    def delete_acl_change(self, changes: str, sequence: int) -> None:
        try:
            self.client.delete(f"{changes}/{ACL_CHANGE_NAME}{sequence:010d}")
        except NoNodeError:
            pass

    def request_topic_deletion(self, topic: str) -> None:
        """/admin/delete_topics/<topic>, which the controller acts on (once is enough)."""
        try:
            self.client.create(delete_topic_path(topic))
        except NodeExistsError:
            pass

    def change_isr(self, topic: str, partition: int, state: LeaderAndIsr, zk_version: int) -> int:
        """A leader's ISR change: the state written on the version the leader knows (a
        controller's decision in between makes it StaleVersion), then a sequential
        /isr_change_notification znode for the controller; the state's new version."""
        version = self.set_partition_state(topic, partition, state, zk_version,
                                           controller_epoch_version=None)
        self.client.create(ISR_CHANGE_PREFIX, IsrChange(((topic, partition),)).to_json(),
                           sequence=True)
        return version

    def claim_producer_id_block(self, broker_id: int, block_size: int) -> ProducerIdBlock:
        """The next block of producer ids after the last one claimed by any broker, claimed
        by a conditional write of /latest_producer_id_block (retried when another broker
        claimed one in between), as Kafka's ZooKeeper-era brokers claim them."""
        for _ in range(_CLAIM_ATTEMPTS):
            data, stat = self.client.get(PRODUCER_ID_BLOCK)
            start = 0
            if data:
                start = ProducerIdBlock.from_json(PRODUCER_ID_BLOCK, data).block_end + 1
            block = ProducerIdBlock(broker_id, start, start + block_size - 1)
            try:
                self.client.set(PRODUCER_ID_BLOCK, block.to_json(), version=stat.version)
            except BadVersionError:
                continue
            return block
        raise StaleVersion(f"{PRODUCER_ID_BLOCK} changed under {_CLAIM_ATTEMPTS} claims in a row")

    # The controller's reads (each can leave a one-shot watch), its deletions, and the
    # session's state

    def watch_controller(self, watch: Watch) -> int | None:
        """The controller's broker id (None: no controller), watching /controller's
        creation, change and deletion."""
        try:
            data, _ = self.client.get(CONTROLLER, watch=watch)
        except NoNodeError:
            if self.client.exists(CONTROLLER, watch=watch) is not None:
                return self.watch_controller(watch)  # created in between
            return None
        return ControllerRegistration.from_json(CONTROLLER, data).broker_id

    def resign_controller(self) -> None:
        """Deletes /controller if this session holds it, so that another broker can win."""
        try:
            stat = self.client.exists(CONTROLLER)
            if stat is not None and stat.ephemeralOwner == self.client.client_id[0]:
                self.client.delete(CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def broker_epoch(self, broker_id: int) -> int | None:
        """The czxid of /brokers/ids/<id>; None when the broker is not registered."""
        stat = self.client.exists(broker_path(broker_id))
        return stat and stat.czxid

    def live_brokers(self, watch: Watch | None = None) -> dict[int, LiveBroker]:
        """Every registered broker with its epoch, watching the set of ids."""
        brokers = {}
        for name in self.client.get_children(BROKER_IDS, watch=watch):
            path = f"{BROKER_IDS}/{name}"
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                continue  # gone since listed: the watch tells
            brokers[int(name)] = LiveBroker(BrokerRegistration.from_json(path, data), stat.czxid)
        return brokers

    def watch_topics(self, watch: Watch) -> list[str]:
        return sorted(self.client.get_children(BROKER_TOPICS, watch=watch))

    def watch_topic_assignment(self, topic: str, watch: Watch) -> Versioned | None:
        """The assignment, watching its changes (new partitions) and deletion."""
        try:
            data, stat = self.client.get(topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return Versioned(TopicAssignment.from_json(topic_path(topic), data), stat.version)

    def watch_delete_topic_requests(self, watch: Watch) -> list[str]:
        return sorted(self.client.get_children(DELETE_TOPICS, watch=watch))

    def remove_delete_topic_request(self, topic: str) -> None:
        try:
            self.client.delete(delete_topic_path(topic))
        except NoNodeError:
            pass

    def delete_topic(self, topic: str, *, controller_epoch_version: int) -> None:
        """Deletes /brokers/topics/<topic> with everything under it, /config/topics/<topic>
        and /admin/delete_topics/<topic>, in one multi-op conditional on the controller
        epoch. Znodes created under the topic meanwhile make it fail (NotEmptyError)."""
        paths = []

        def below(path: str) -> None:
            try:
                children = self.client.get_children(path)
            except NoNodeError:
                return
            for child in children:
                below(f"{path}/{child}")
            paths.append(path)

        below(topic_path(topic))
        for path in (topic_config_path(topic), delete_topic_path(topic)):
            if self.client.exists(path) is not None:
                paths.append(path)

        def writes(transaction):
            for path in paths:
                transaction.delete(path)

        try:
            self._commit(writes, controller_epoch_version)
        except NoNodeError:  # deleted by someone else meanwhile: delete what is left
            self.delete_topic(topic, controller_epoch_version=controller_epoch_version)

    def watch_isr_change_notifications(self, watch: Watch) -> list[str]:
        """The names of the pending notifications, oldest first."""
        return sorted(self.client.get_children(ISR_CHANGE_NOTIFICATION, watch=watch))

    def isr_change(self, name: str) -> IsrChange | None:
        found = self._get(f"{ISR_CHANGE_NOTIFICATION}/{name}", IsrChange)
        return found and found.value

    def delete_isr_change_notifications(self, names: list[str]) -> None:
        for name in names:
            try:
                self.client.delete(f"{ISR_CHANGE_NOTIFICATION}/{name}")
            except NoNodeError:
                pass

    def set_partition_replicas(self, topic: str, partition: int, replicas: tuple[int, ...],
                               adding: tuple[int, ...], removing: tuple[int, ...], *,
                               controller_epoch_version: int) -> TopicAssignment | None:
        """The controller's change of one partition's replicas in /brokers/topics/<topic>
        (its adding_replicas and removing_replicas listed only while not empty), written on
        the version read (a concurrent CreatePartitions makes it read again) and on the
        controller epoch's; the topic's new assignment, None when the topic is gone."""
        for _ in range(_REWRITE_ATTEMPTS):
            found = self.topic_assignment(topic)
            if found is None:
                return None
            assignment = found.value.with_partition(partition, replicas, adding, removing)
            try:
                self.set_topic_assignment(topic, assignment, found.zk_version,
                                          controller_epoch_version=controller_epoch_version)
            except StaleVersion:
                continue
            return assignment
        raise StaleVersion(f"{topic_path(topic)} changed under {_REWRITE_ATTEMPTS} writes in a row")

    def watch_partition_reassignment(self, watch: Watch) -> dict[tuple[str, int], tuple[int, ...]]:
        """The targets /admin/reassign_partitions holds (none when it is absent), watching
        its creation, change and deletion."""
        if self.client.exists(REASSIGN_PARTITIONS, watch=watch) is None:
            return {}
        found = self._get(REASSIGN_PARTITIONS, PartitionReassignment)
        return dict(found.value.partitions) if found else {}

    def remove_partition_reassignments(self, done: Callable[[tuple[str, int], tuple[int, ...]], bool],
                                       *, controller_epoch_version: int) -> None:
        """Drops the partitions for which `done(partition, target)` from
        /admin/reassign_partitions, deleting the znode with the last, conditional on its
        version and the controller epoch's, as Kafka's controller does."""
        for _ in range(_REWRITE_ATTEMPTS):
            found = self._get(REASSIGN_PARTITIONS, PartitionReassignment)
            if found is None:
                return
            kept = {tp: target for tp, target in found.value.partitions.items() if not done(tp, target)}
            if len(kept) == len(found.value.partitions):
                return

            def writes(transaction):
                if kept:
                    transaction.set_data(REASSIGN_PARTITIONS, PartitionReassignment(kept).to_json(),
                                         found.zk_version)
                else:
                    transaction.delete(REASSIGN_PARTITIONS, found.zk_version)

            try:
                self._commit(writes, controller_epoch_version)
            except (BadVersionError, NoNodeError):
                continue
            return
        raise StaleVersion(f"{REASSIGN_PARTITIONS} changed under {_REWRITE_ATTEMPTS} writes in a row")

    def add_session_listener(self, listener: Callable[[KazooState], None]) -> None:
        """`listener(state)` on kazoo's thread at each change of the session's state:
        SUSPENDED (disconnected), LOST (session ended: ephemerals and watches gone),
        CONNECTED."""
        self.client.add_listener(listener)

    def remove_session_listener(self, listener: Callable[[KazooState], None]) -> None:
        self.client.remove_listener(listener)
