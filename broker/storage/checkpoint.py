"""Per-data-directory offset checkpoints in Kafka's text format, written atomically.

A file holds a version line (0), a count line, then `topic partition offset` lines.
Used for recovery points, log start offsets and high watermarks. `sync_directory` is
the one fsync of a directory, after its names change (here and in the segmented log).
"""

from __future__ import annotations

import os


def write_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """The offsets in `path`; an absent or malformed file reads as empty."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0] != "0":
        return {}
    offsets = {}
    for line in lines[2:2 + int(lines[1]) if lines[1].isdigit() else 0]:
        parts = line.split(" ")
        if len(parts) == 3 and parts[1].isdigit():
            try:
                offsets[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                continue
    return offsets


def write_atomically(path: str, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.
    A failed write (a full disk) removes the partial temporary file and raises OSError."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, path)
    sync_directory(os.path.dirname(path) or ".")


def sync_directory(path: str) -> None:
    """fsync a directory, so that the names created or renamed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
