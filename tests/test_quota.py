"""broker.quota.Quota on the tests' manual clock: Kafka's sampled rate (11 windows of
1 s, at least one window counted), its headroom and throttle time, and the rate it holds
over every 10 s window of a long run when fetches go by its headroom: reads of at most
the headroom (a batch at least), or of a whole partition limit whenever the bound is not
passed, as Kafka's replication throttles read; and Kafka's Rate, which client quotas
measure with, on Kafka's own example. broker.quota.TokenBucket, controller_mutation_rate's,
as Kafka's: full at first, below 0 after a burst, refilled at its bound.
"""

from __future__ import annotations

import asyncio

from broker.quota import Quota
from tests.manual_clock import ManualClock

MB = 1 << 20


def run(steps) -> None:
    asyncio.run(steps())


def test_an_idle_quota_allows_one_window_then_measures_over_its_windows():
    clock = ManualClock()
    quota = Quota(clock, lambda: 1000.0)

    async def steps():
        assert (quota.rate(), quota.headroom(), quota.throttle_time()) == (0.0, 1000.0, 0.0)
        quota.record(1000)
        assert (quota.rate(), quota.headroom()) == (1000.0, 0.0)
        quota.record(500)  # past the bound until the window has spanned 1.5 s
        assert (quota.headroom(), quota.throttle_time()) == (-500.0, 1.5)
        await clock.advance(1.0)
        assert (quota.headroom(), quota.throttle_time()) == (-500.0, 0.5)
        await clock.advance(0.5)
        assert (quota.headroom(), quota.throttle_time()) == (0.0, 0.0)
        await clock.advance(3.5)  # 5 s since the first window began
        assert quota.rate() == 300.0
        quota.record(200)  # a second window
        await clock.advance(6.0)  # the first window is 11 s old: forgotten
        assert (quota.rate(), quota.headroom()) == (200 / 6.0, 1000.0 * 6.0 - 200)
        await clock.advance(5.0)
        assert (quota.rate(), quota.headroom()) == (0.0, 1000.0)

    run(steps)


def test_kafkas_rate_counts_all_windows_but_one_and_throttles_as_kafka():
    """Client quotas (full_windows): Kafka's own example (ClientQuotaManagerTest's
    testQuotaViolation): 400 B a second for 10 s against 500 B/s, then 2300 B half a
    second later: 6300 B over 10.5 s, throttled (600 - 500) / 500 × 10.5 s = 2.1 s; the
    burst holds the rate over the bound until its window is forgotten. A new quota
    allows 10 windows' worth at once."""
    clock = ManualClock()
    quota = Quota(clock, lambda: 500.0, full_windows=True)

    async def steps():
        assert quota.headroom() == 5000.0
        for _ in range(10):
            quota.record(400)
            assert quota.throttle_time() == 0.0
            await clock.advance(1.0)
        await clock.advance(0.5)
        quota.record(2300)
        assert abs(quota.throttle_time() - 2.1) < 1e-9 and abs(quota.rate() - 600.0) < 1e-9
        await clock.advance(2.1)
        for _ in range(10):
            quota.record(400)
            await clock.advance(1.0)
        assert quota.throttle_time() == 0.0

    run(steps)


def test_the_bound_is_read_at_each_check():
    clock = ManualClock()
    bound = [100.0]
    quota = Quota(clock, lambda: bound[0])
    quota.record(150)
    assert quota.headroom() < 0
    bound[0] = 200.0
    assert quota.headroom() == 50.0


def moved_per_window(rate: float, fetch, interval: float, seconds: int = 60) -> list[float]:
    """Bytes a fetcher moves in each 10 s window of `seconds`, fetching every `interval`
    what `fetch(headroom)` says while the quota is not passed, as the throttles do."""
    clock = ManualClock()
    quota = Quota(clock, lambda: rate)
    windows = [0.0] * (seconds // 10)

    async def steps():
        for tick in range(int(seconds / interval)):
            headroom = quota.headroom()
            if headroom >= 0:
                moved = fetch(headroom)
                quota.record(moved)
                windows[int(tick * interval) // 10] += moved
            await clock.advance(interval)

    run(steps)
    return windows


def test_reads_capped_at_the_headroom_hold_the_rate_in_every_10_s_window():
    """Reads of at most the headroom, a 64 KB batch at least, 1 MB at most."""
    rate = 500_000.0
    windows = moved_per_window(rate, lambda headroom: max(min(headroom, MB), 64 * 1024), interval=0.25)
    assert all(abs(moved - rate * 10) <= rate * 10 * 0.1 for moved in windows), windows


def test_whole_fetches_while_below_the_bound_hold_the_rate_in_every_10_s_window():
    """Fetches of a whole 1 MB partition limit whenever the quota is not passed."""
    rate = 10_000_000.0
    windows = moved_per_window(rate, lambda headroom: MB, interval=0.05)
    assert all(abs(moved - rate * 10) <= rate * 10 * 0.1 for moved in windows), windows


def test_a_token_bucket_starts_full_may_go_below_zero_and_refills_at_its_bound():
    """Kafka's TokenBucket (controller_mutation_rate): 2 windows of 1 s at 1 a second hold
    2; recording 5 leaves -3, 3 s from 0; it refills at the bound up to 2 again."""
    from broker.quota import TokenBucket

    clock = ManualClock()
    bucket = TokenBucket(clock, lambda: 1.0, 2, 1.0)
    assert bucket.idle() and bucket.throttle_time() == 0.0
    bucket.record(2)
    assert bucket.throttle_time() == 0.0 and not bucket.idle()
    bucket.record(3)
    assert bucket.throttle_time() == 3.0
    clock.stall(2.5)
    assert bucket.throttle_time() == 0.5
    clock.stall(10.0)
    assert bucket.idle() and bucket.throttle_time() == 0.0
