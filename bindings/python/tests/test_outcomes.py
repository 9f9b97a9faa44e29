"""Expiry, loss, prolonging and the watchdog: what a holder learns when its TTL runs out."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from conftest import spec_for, wait_until

from lockffi import Code, Liveness, Lock, LockExpired, LockInfo, LockLost, LockUsageError

CONTENDER = Path(__file__).with_name("contender.py")
SHORT_TTL = "300ms"
# Why a test does not run on flock, whose lock the kernel holds for its holder.
NEVER_TAKEN = "a flock lock is never taken from its holder: the kernel holds it until released"
NO_WATCHDOG = "flock has no watchdog (see test_autorenew_keeps_the_lock_from_another_process)"


def held(scheme: str, tmp_path: Path, ttl: str = SHORT_TTL, not_on_flock: str | None = None) -> Lock:
    """The test's lock, acquired; the test is skipped on flock when it says why."""
    if not_on_flock is not None and scheme == "flock":
        pytest.skip(not_on_flock)
    lock = Lock(spec_for(scheme, tmp_path, ttl=ttl))
    lock.acquire()
    return lock


def wait_expired(lock: Lock, scheme: str) -> None:
    """Waits until the held lock's TTL has run out; breakable schemes then call it stale."""
    expires = lock.inspect().expires
    assert expires is not None
    # The library judges expiry on the boot clock; the margin covers its
    # rounding against the wall clock.
    wait_until(lambda: datetime.now(timezone.utc) > expires + timedelta(milliseconds=50), "past the TTL")
    # flock is held by the kernel: an expired flock lock is never broken.
    assert lock.inspect().stale == (scheme != "flock")


def test_release_after_the_ttl_says_expired_when_nobody_took_it(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path)
    wait_expired(lock, scheme)
    with pytest.raises(LockExpired) as expired:
        lock.release()
    assert expired.value.code == Code.LOCK_EXPIRED
    assert not lock.inspect().held
    assert Lock(spec_for(scheme, tmp_path)).try_acquire() is not None


def test_release_after_another_took_it_says_lost(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path, not_on_flock=NEVER_TAKEN)
    other = Lock(spec_for(scheme, tmp_path))
    other.acquire(timeout=10)  # breaks the lock once its TTL has run out
    with pytest.raises(LockLost) as lost:
        lock.release()
    assert lost.value.code == Code.LOCK_LOST
    assert other.inspect().held_by_this_handle
    other.release()


def test_took_over_names_the_holder_whose_expired_lock_was_broken(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path, not_on_flock=NEVER_TAKEN)
    other = Lock(spec_for(scheme, tmp_path))
    with pytest.raises(LockUsageError) as not_held:
        other.took_over()
    assert not_held.value.code == Code.LOCK_ERR_NOT_HELD
    wait_expired(lock, scheme)
    assert other.try_acquire() is not None
    previous = other.took_over()
    assert previous is not None and previous.stale
    assert (previous.pid, previous.liveness) == (os.getpid(), Liveness.ALIVE)
    with pytest.raises(LockLost):
        lock.release()
    other.release()
    assert lock.try_acquire() is not None and lock.took_over() is None  # after a release: nobody's
    lock.release()


def test_prolong_moves_the_expiry_and_reclaims_an_expired_lock(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path)
    lock.prolong(60)
    expires = lock.inspect().expires
    assert expires is not None and expires > datetime.now(timezone.utc) + timedelta(seconds=50)
    lock.prolong()  # back to the spec's ttl
    wait_expired(lock, scheme)
    with pytest.raises(LockExpired):
        lock.prolong(60)
    again = lock.inspect()
    assert again.held_by_this_handle and not again.stale
    lock.release()


def test_prolong_after_another_took_it_says_lost(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path, not_on_flock=NEVER_TAKEN)
    other = Lock(spec_for(scheme, tmp_path))
    other.acquire(timeout=10)  # breaks the lock once its TTL has run out
    with pytest.raises(LockLost):
        lock.prolong()
    with pytest.raises(LockUsageError) as not_held:
        lock.release()
    assert not_held.value.code == Code.LOCK_ERR_NOT_HELD


def test_autorenew_keeps_the_lock_from_another_process(scheme: str, tmp_path: Path) -> None:
    # Renewed every third of the TTL: a renewal may come 300 ms late on a
    # loaded machine before the other process could break the lock.
    lock = Lock(spec_for(scheme, tmp_path, ttl="500ms"))
    lock.acquire()
    if scheme == "flock":
        # Nobody can take a flock lock from its holder, so there is nothing to renew.
        with pytest.raises(LockUsageError) as unsupported:
            lock.autorenew()
        assert unsupported.value.code == Code.LOCK_ERR_UNSUPPORTED
        lock.release()
        return
    lock.autorenew(on_lost=lambda: pytest.fail("the watchdog lost a lock nobody could take"))
    # Three TTLs: without renewal the other process would break the lock.
    taker = subprocess.run(
        [sys.executable, str(CONTENDER), "take", spec_for(scheme, tmp_path), "1.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert taker.returncode == 0, taker.stderr
    assert taker.stdout.startswith("timeout "), taker.stdout
    lock.release()  # raises LockExpired had a renewal been missed


def test_stop_autorenew_keeps_the_lock_held(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path, "30s", not_on_flock=NO_WATCHDOG)
    lock.autorenew()
    lock.stop_autorenew()
    assert lock.inspect().held_by_this_handle
    lock.release()


def test_the_watchdog_calls_on_lost_from_its_thread(scheme: str, tmp_path: Path) -> None:
    lock = held(scheme, tmp_path, not_on_flock=NO_WATCHDOG)
    called = threading.Event()
    seen: list[tuple[int, LockInfo]] = []

    def on_lost() -> None:
        # The callback may use its own lock.
        seen.append((threading.get_ident(), lock.inspect()))
        called.set()

    lock.autorenew(on_lost=on_lost)
    operator = Lock(spec_for(scheme, tmp_path))
    assert operator.break_lock()
    # A renewal may run between the break and this acquire (and find the
    # lock gone), or after it (and find the operator holding it).
    operator.acquire(timeout=10)
    assert called.wait(timeout=30), "on_lost was not called"
    [(thread, info)] = seen
    assert thread != threading.get_ident()
    assert not info.held_by_this_handle
    with pytest.raises(LockLost):
        lock.release()
    assert operator.inspect().held_by_this_handle
    operator.release()


def test_a_process_that_exits_renewing_releases_quietly(scheme: str, tmp_path: Path) -> None:
    if scheme == "flock":
        pytest.skip(NO_WATCHDOG)
    spec = spec_for(scheme, tmp_path, ttl="30s")
    holder = "import sys\nfrom lockffi import Lock\nlock = Lock(sys.argv[1])\nlock.acquire()\nlock.autorenew()\n"
    exited = subprocess.run([sys.executable, "-c", holder, spec], capture_output=True, text=True, timeout=60)
    assert (exited.returncode, exited.stderr) == (0, "")
    assert Lock(spec).try_acquire() is not None
