"""Run chosen tests many times in a row while busy loops take every core (`make stress`).

A test that passes on a quiet machine and fails on a loaded one has a race, in the test or
in the product. This makes the load, and runs each test in a fresh pytest process (its
own fixtures, ports and ZooKeeper) up to --runs times, stopping that test at its first
failure, whose output it prints. The burners run only as long as the tests do, and at
most --max-seconds.

    python tools/stress.py [--runs N] [--burners K] [--max-seconds S] NODE_ID ...

Exits 1 when any test failed, and prints how many runs in a row each test passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

_BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def burners(count: int, seconds: float) -> list[subprocess.Popen]:
    """`count` processes that each spin one core for at most `seconds`."""
    return [subprocess.Popen([sys.executable, "-c", _BURN.format(seconds=seconds)])
            for _ in range(count)]


def run_once(node_id: str) -> tuple[bool, str, float]:
    """One pytest run of `node_id` in a process of its own: passed, its output, seconds."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-o", "addopts=", node_id], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return result.returncode == 0, result.stdout, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("node_ids", nargs="+", metavar="NODE_ID", help="pytest node ids")
    parser.add_argument("--runs", type=int, default=20, help="runs of each test (default 20)")
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 2,
                        help="busy processes beside the tests (default: one per core)")
    parser.add_argument("--max-seconds", type=float, default=3 * 3600,
                        help="stop starting runs after this long (default 3 h)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.burners < 0:
        parser.error("--runs must be at least 1 and --burners at least 0")
    deadline = time.monotonic() + args.max_seconds
    load = burners(args.burners, args.max_seconds)
    results = []
    try:
        for node_id in args.node_ids:
            passed, took = 0, []
            for run in range(1, args.runs + 1):
                if time.monotonic() > deadline:
                    break
                ok, output, seconds = run_once(node_id)
                took.append(seconds)
                if not ok:
                    print(output[-20000:])
                    print(f"FAILED {node_id} at run {run} (after {passed} passed in a row)", flush=True)
                    break
                passed += 1
            results.append((node_id, passed, max(took, default=0.0)))
            print(f"{node_id}: {passed} of {args.runs} passed in a row under {args.burners} burners"
                  f" (slowest run {max(took, default=0.0):.1f} s)", flush=True)
    finally:
        for process in load:
            process.kill()
            process.wait()
    print("\nsummary:")
    for node_id, passed, slowest in results:
        print(f"  {passed:3d}/{args.runs} in a row, slowest {slowest:5.1f} s  {node_id}")
    return 0 if all(passed == args.runs for _, passed, _ in results) \
        and len(results) == len(args.node_ids) else 1


if __name__ == "__main__":
    sys.exit(main())
