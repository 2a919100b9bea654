"""Named fail points: places where a test makes the broker die (SIGKILL) to show that
what was written up to there is enough to recover.

Points are enabled only by the environment variable SLUICE_FAILPOINTS (names separated
by commas), read once at import; without it none is, and `fail_point` is one lookup
in an empty set. A name there that is no point here stops the broker at start-up
(`check_enabled_points`) rather than being ignored.
"""

from __future__ import annotations

import logging
import os
import signal

from broker.config import ConfigError

log = logging.getLogger("sluice.failpoints")

ENVIRONMENT_VARIABLE = "SLUICE_FAILPOINTS"

POINTS = {
    "txn-after-prepare-commit":
        "the transaction coordinator logged PrepareCommit and neither answered EndTxn nor wrote "
        "a marker yet",
    "txn-after-prepare-before-markers":
        "the transaction coordinator logged PrepareCommit or PrepareAbort and answered the request "
        "that ended the transaction (EndTxn, or InitProducerId aborting it), and wrote no marker yet",
    "txn-mid-commit-markers":
        "the transaction coordinator wrote the first of a commit's several markers",
    "replica-deleted-before-registry":
        "a cluster broker renamed the directory of one replica it deletes (its files being "
        "unlinked in the background), and did not rewrite topics.json yet",
    "reassignment-before-completion":
        "the controller found every target replica of a partition reassignment in the ISR and "
        "wrote nothing of its completion yet",
    "replica-stop-before-delete":
        "a cluster broker got StopReplica deleting one of its replicas (its topic deleted, or the "
        "replica moved away by a reassignment once the leadership moved into the target) and "
        "stopped nothing of it yet",
}

_ENABLED = frozenset(name.strip() for name in os.environ.get(ENVIRONMENT_VARIABLE, "").split(",")
                     if name.strip())


def check_enabled_points() -> None:
    """Raise ConfigError if SLUICE_FAILPOINTS names a point that does not exist."""
    unknown = sorted(_ENABLED - POINTS.keys())
    if unknown:
        raise ConfigError(f"{ENVIRONMENT_VARIABLE} names no such fail point: {', '.join(unknown)} "
                          f"(the fail points are {', '.join(sorted(POINTS))})")


def fail_point(name: str) -> None:
    """SIGKILL this process if the point `name` is enabled."""
    if name in _ENABLED:
        log.warning("fail point %s reached (%s): killing the broker", name, ENVIRONMENT_VARIABLE)
        os.kill(os.getpid(), signal.SIGKILL)
