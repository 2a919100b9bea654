"""Dynamic broker configs: the topic defaults (`log.*`, `message.max.bytes`) and the
dynamic-only keys (the replication throttles' rates), changed at runtime through
AlterConfigs and IncrementalAlterConfigs.

Two levels, as in Kafka: the cluster default (resource name "") and this broker (its
id), the broker's winning. Only these keys are dynamic: the topic defaults are what
topics without their own override run with, so a change is swapped into the live logs;
the rates are read where they are enforced (broker.quota). Every other broker key
needs a restart.

Where they are kept: on the single node, `dynamic-broker-configs.json` in the data
directory, written atomically and read at start, on top of server.properties. In a
cluster, ZooKeeper, as Kafka keeps them: /config/brokers/<default> and
/config/brokers/<id>, each change noted under /config/changes for every broker to read
(broker.cluster.membership applies them, `set_level` here).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from broker.config import BROKER_KEYS, BrokerConfig, ConfigError, config_text
from broker.storage.checkpoint import write_atomically

log = logging.getLogger("sluice.configs")

FILENAME = "dynamic-broker-configs.json"
CLUSTER_DEFAULT = ""
# The broker keys that change at runtime (BROKER_KEYS' cluster-wide ones).
DYNAMIC_KEYS = {key.name: key for key in BROKER_KEYS.values() if key.dynamic}


class DynamicBrokerConfigs:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.static_log = config.log
        # The values of the dynamic keys that are not topic defaults, before any level.
        self.static_values = {key.attr: getattr(config, key.attr) for key in DYNAMIC_KEYS.values()
                              if key.topic_key is None}
        self.path = os.path.join(config.data_dir, FILENAME)
        # Level ("" or a broker id) -> broker key -> value; other brokers' levels are kept.
        self.levels: dict[str, dict[str, str]] = {}

    @property
    def this_broker(self) -> str:
        return str(self.config.node_id)

    def load(self) -> None:
        """Read the file and apply it to the broker's log defaults; an invalid file stops
        the start, as a corrupt topic registry does. A cluster broker reads ZooKeeper
        instead (a file left from the single node is not read: said once)."""
        if self.config.cluster_mode:
            if os.path.exists(self.path):
                log.warning("%s is not read in a cluster: dynamic broker configs are kept in ZooKeeper "
                            "(/config/brokers)", self.path)
            return
        try:
            with open(self.path, "rb") as f:
                levels = json.loads(f.read())
            for level, configs in levels.items():
                levels[level] = self.parse(configs)
        except FileNotFoundError:
            return
        except (ValueError, AttributeError) as exc:
            raise RuntimeError(f"{self.path} is invalid ({exc}); refusing to start") from None
        self.levels = levels
        self._apply()

    def parse(self, configs: dict[str, str | None]) -> dict[str, str]:
        """Validate one level's configs; returns them normalised. Raises ConfigError."""
        result = {}
        for key, value in configs.items():
            if key not in DYNAMIC_KEYS:
                raise ConfigError(f"{key} cannot be updated dynamically")
            if value is None:
                raise ConfigError(f"{key}: a value is required")
            result[key] = config_text(DYNAMIC_KEYS[key].parse(key, value))
        return result

    def set_level(self, level: str, configs: dict[str, str]) -> None:
        """Replace one level's (validated) configs and change the defaults; on the
        single node persisted first (on an OSError nothing changed), in a cluster once
        ZooKeeper has them."""
        levels = {**self.levels, level: configs}
        if not configs:
            del levels[level]
        if not self.config.cluster_mode:
            write_atomically(self.path, json.dumps(levels, indent=1, sort_keys=True).encode())
        self.levels = levels
        self._apply()

    def source(self, broker_key: str) -> str | None:
        """Which level sets `broker_key`: this broker's, the cluster default, or None."""
        for level in (self.this_broker, CLUSTER_DEFAULT):
            if broker_key in self.levels.get(level, {}):
                return level
        return None

    def _apply(self) -> None:
        effective = {**self.levels.get(CLUSTER_DEFAULT, {}), **self.levels.get(self.this_broker, {})}
        log_changes, own = {}, dict(self.static_values)
        for key, value in effective.items():
            spec = DYNAMIC_KEYS[key]
            (own if spec.topic_key is None else log_changes)[spec.attr] = spec.parse(key, value)
        self.config.log = dataclasses.replace(self.static_log, **log_changes)
        for attr, value in own.items():
            setattr(self.config, attr, value)
