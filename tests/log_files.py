"""What a partition's directory holds, read while the broker (and its log cleaner) runs."""

import os


def log_bytes(data_dir: str, topic: str, partition: int) -> tuple[int, int]:
    """(bytes in the `.log` files of a partition's directory in `data_dir`, how many there
    are). A file the cleaner swaps away between the listing and its stat is passed over:
    the cleaned segment that replaces it is counted once its final name is in place."""
    directory = os.path.join(data_dir, f"{topic}-{partition}")
    total = count = 0
    for name in os.listdir(directory):
        if not name.endswith(".log"):
            continue
        try:
            total += os.path.getsize(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        count += 1
    return total, count
