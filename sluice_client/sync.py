"""A blocking face for `AsyncClient`: the asyncio client runs on a private event loop
in a daemon thread, and each method waits for its result at most `call_timeout`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from typing import Sequence

from sluice_client.client import AsyncClient
from sluice_client.model import ClusterMetadata

__all__ = ["Call", "Client"]


def _blocking(name: str):
    method = getattr(AsyncClient, name)

    @functools.wraps(method)
    def call(self: Client, *args, **kwargs):
        return self.start(name, *args, **kwargs).result()

    return call


class Call:
    """A call in flight (`Client.start`): `result()` waits for it as the blocking method
    would, at most the client's `call_timeout`, and returns or raises what it does."""

    def __init__(self, future: concurrent.futures.Future, name: str, timeout: float):
        self._future, self._name, self._timeout = future, name, timeout

    def result(self):
        done, _ = concurrent.futures.wait([self._future], self._timeout)
        if not done:
            self._future.cancel()
            raise TimeoutError(f"{self._name} did not finish within {self._timeout:g} s")
        return self._future.result()


class Client:
    """The synchronous client: `with Client("host:9092") as client: client.metadata()`.

    Keyword options are those of `AsyncClient`. The async client's own bounds (request
    timeouts, retry count and time) end every call; `call_timeout` is a last resort
    that cancels a call still running after it.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], *, call_timeout: float = 120.0,
                 **options):
        self.call_timeout = call_timeout
        self._client = AsyncClient(bootstrap_servers, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"{self._client.client_id}-loop")
        self._thread.start()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self, name: str, *args, **kwargs) -> Call:
        """Begin the `AsyncClient` method `name` without waiting for it, so that several
        requests can be in flight at once (e.g. produce requests to different
        partitions); `result()` of the returned call waits for it."""
        return self._start(getattr(self._client, name)(*args, **kwargs), name)

    def _start(self, coroutine, name: str) -> Call:
        if self._loop.is_closed():
            coroutine.close()
            raise RuntimeError("the client is closed")
        return Call(asyncio.run_coroutine_threadsafe(coroutine, self._loop), name, self.call_timeout)

    def close(self) -> None:
        """Close the connections, then stop the loop and its thread."""
        if self._loop.is_closed():
            return
        try:
            self._start(self._client.close(), "close").result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.call_timeout)
            self._loop.close()

    @property
    def cached_metadata(self) -> ClusterMetadata:
        """What the client currently knows of brokers and topics."""
        return self._client.cached_metadata

    negotiated_versions = _blocking("negotiated_versions")
    metadata = _blocking("metadata")
    produce = _blocking("produce")
    produce_batch = _blocking("produce_batch")
    fetch = _blocking("fetch")
    fetch_records = _blocking("fetch_records")
    list_offsets = _blocking("list_offsets")
    find_coordinator = _blocking("find_coordinator")
    commit_offsets = _blocking("commit_offsets")
    fetch_offsets = _blocking("fetch_offsets")
    create_topics = _blocking("create_topics")
    delete_topics = _blocking("delete_topics")
    create_partitions = _blocking("create_partitions")
    elect_leaders = _blocking("elect_leaders")
    alter_partition_reassignments = _blocking("alter_partition_reassignments")
    list_partition_reassignments = _blocking("list_partition_reassignments")
    describe_configs = _blocking("describe_configs")
    alter_configs = _blocking("alter_configs")
    incremental_alter_configs = _blocking("incremental_alter_configs")
    describe_cluster = _blocking("describe_cluster")
    describe_log_dirs = _blocking("describe_log_dirs")
    describe_groups = _blocking("describe_groups")
    list_groups = _blocking("list_groups")
    delete_groups = _blocking("delete_groups")
    init_transactions = _blocking("init_transactions")
    add_partitions_to_txn = _blocking("add_partitions_to_txn")
    end_txn = _blocking("end_txn")
    describe_transaction = _blocking("describe_transaction")
    list_transactions = _blocking("list_transactions")
    describe_acls = _blocking("describe_acls")
    create_acls = _blocking("create_acls")
    delete_acls = _blocking("delete_acls")
    describe_user_scram_credentials = _blocking("describe_user_scram_credentials")
    alter_user_scram_credentials = _blocking("alter_user_scram_credentials")
    describe_client_quotas = _blocking("describe_client_quotas")
    alter_client_quotas = _blocking("alter_client_quotas")
