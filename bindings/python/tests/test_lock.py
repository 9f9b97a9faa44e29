"""Taking, holding and releasing a lock through one or two handles of this process."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from conftest import data_file, lock_target, spec_for, wait_until

from lockffi import Code, Liveness, Lock, LockLost, LockTimeout, LockUsageError


def test_with_yields_growing_fences_and_releases(scheme: str, tmp_path: Path) -> None:
    lock = Lock(spec_for(scheme, tmp_path), timeout=5)
    other = Lock(spec_for(scheme, tmp_path))
    fences = []
    for _ in range(3):
        with lock as fence:
            assert lock.inspect().held_by_this_handle
            assert other.try_acquire() is None
            fences.append(fence)
        assert not lock.inspect().held
    fences.append(other.acquire(timeout=0))
    assert fences == sorted(set(fences)), f"fences not strictly increasing: {fences}"


def test_timeout_names_the_holder(scheme: str, tmp_path: Path) -> None:
    holder = Lock(spec_for(scheme, tmp_path))
    holder.acquire()
    waiter = Lock(spec_for(scheme, tmp_path), timeout=0.2)
    attempts: list[Callable[[], int]] = [
        lambda: waiter.acquire(timeout=0),
        lambda: waiter.acquire(timeout=0.2),
        waiter.__enter__,  # the timeout given to Lock
    ]
    for attempt in attempts:
        with pytest.raises(LockTimeout) as timeout:
            attempt()
        assert timeout.value.code == Code.LOCK_TIMEOUT
        assert timeout.value.name == "LOCK_TIMEOUT"
        assert f"pid {os.getpid()}" in timeout.value.message
        assert str(lock_target(scheme, tmp_path)) in timeout.value.message
    assert waiter.try_acquire() is None
    holder.release()
    assert waiter.try_acquire() is not None


def test_a_waiting_acquire_lets_other_threads_run(tmp_path: Path) -> None:
    # toplock queues a waiter where inspect sees it: this thread watches the
    # queue grow while the other waits inside the library's acquire.
    spec = spec_for("toplock", tmp_path)
    holder = Lock(spec)
    holder.acquire()
    waiter = Lock(spec)
    waiting = threading.Thread(target=waiter.acquire, kwargs={"timeout": 60})
    waiting.start()
    wait_until(lambda: holder.inspect().queue_length == 2, "queued behind the holder")
    holder.release()
    waiting.join(timeout=60)
    assert waiter.inspect().held_by_this_handle
    waiter.release()


def test_inspect_reports_holder_fences_expiry_and_cooldown(scheme: str, tmp_path: Path) -> None:
    lock = Lock(spec_for(scheme, tmp_path, ttl="30s"))
    other = Lock(spec_for(scheme, tmp_path))
    free = lock.inspect()
    assert (free.held, free.held_by_this_handle, free.stale) == (False, False, False)
    assert (free.pid, free.host, free.fence, free.expires, free.since, free.cooldown_until) == (
        None,
        None,
        0,
        None,
        None,
        None,
    )
    assert free.liveness == Liveness.UNKNOWN

    before = datetime.now(timezone.utc)
    fence = lock.acquire(timeout=5)
    after = datetime.now(timezone.utc)
    held = lock.inspect()
    assert held.held and held.held_by_this_handle and not held.stale
    assert held.liveness == Liveness.ALIVE
    assert held.pid == os.getpid()
    assert held.host == socket.gethostname()[:64]
    assert held.fence == held.last_fence == fence
    assert held.since is not None and before - timedelta(seconds=1) <= held.since <= after + timedelta(seconds=1)
    assert held.expires is not None
    assert before + timedelta(seconds=29) <= held.expires <= after + timedelta(seconds=31)
    assert held.cooldown_until is None
    # toplock counts the holder's request in its queue; the others keep none.
    assert held.queue_length == 1, "the holder, and nobody waiting"
    seen_by_other = other.inspect()
    assert seen_by_other.held and not seen_by_other.held_by_this_handle
    assert (seen_by_other.pid, seen_by_other.fence) == (os.getpid(), fence)

    lock.release(cooldown=30)
    cooling = other.inspect()
    assert not cooling.held
    assert cooling.last_fence == fence
    assert cooling.cooldown_until is not None and cooling.cooldown_until >= after + timedelta(seconds=29)
    assert other.try_acquire() is None
    with pytest.raises(LockTimeout, match="cool"):
        other.acquire(timeout=0)


def test_path_is_the_lock_itself(scheme: str, tmp_path: Path) -> None:
    # lockfile's target is the file it protects; the lock is beside it.
    expected = f"{data_file(tmp_path)}.lock" if scheme == "lockfile" else str(lock_target(scheme, tmp_path))
    assert Lock(spec_for(scheme, tmp_path)).path == expected
    long_directory = tmp_path / ("d" * 200) / ("e" * 200)
    long_directory.mkdir(parents=True)
    assert Lock(spec_for(scheme, long_directory)).path.startswith(str(long_directory))


def test_commit_replaces_the_data_file_only_while_held(scheme: str, tmp_path: Path) -> None:
    data, temp = data_file(tmp_path), tmp_path / "data.txt.new"
    data.write_text("old\n")
    lock = Lock(spec_for(scheme, tmp_path))
    with lock:
        temp.write_text("new\n")
        lock.commit(temp, data)
    assert data.read_text() == "new\n"
    temp.write_text("newer\n")
    with pytest.raises(LockUsageError) as not_held:
        lock.commit(temp, data)
    assert not_held.value.code == Code.LOCK_ERR_NOT_HELD
    assert data.read_text() == "new\n"


def test_break_lock_removes_anyones_lock_but_flocks(scheme: str, tmp_path: Path) -> None:
    holder = Lock(spec_for(scheme, tmp_path))
    holder.acquire()
    operator = Lock(spec_for(scheme, tmp_path))
    if scheme == "flock":
        # The kernel holds a flock lock until its holder lets go.
        with pytest.raises(LockUsageError) as unsupported:
            operator.break_lock()
        assert unsupported.value.code == Code.LOCK_ERR_UNSUPPORTED
        assert operator.try_acquire() is None
        return
    assert operator.break_lock() is True
    assert not operator.inspect().held
    assert operator.break_lock() is False
    assert operator.try_acquire() is not None
    with pytest.raises(LockLost):
        holder.release()


@pytest.mark.parametrize("renewing", [False, True], ids=["plain", "renewing"])
def test_the_destructor_releases(scheme: str, tmp_path: Path, renewing: bool) -> None:
    if renewing and scheme == "flock":
        pytest.skip("flock has no watchdog")
    holder = Lock(spec_for(scheme, tmp_path, ttl="30s"))
    holder.acquire()
    if renewing:
        holder.autorenew()
    other = Lock(spec_for(scheme, tmp_path))
    assert other.try_acquire() is None
    del holder  # the last reference: no garbage collection needed
    assert other.try_acquire() is not None


def test_close_releases_and_ends_the_handle(scheme: str, tmp_path: Path) -> None:
    lock = Lock(spec_for(scheme, tmp_path))
    lock.acquire()
    lock.close()
    assert lock.closed
    lock.close()
    with pytest.raises(LockUsageError, match="closed"):
        lock.acquire()
    other = Lock(spec_for(scheme, tmp_path))
    assert other.try_acquire() is not None


def test_a_forked_child_cannot_use_the_parents_lock(scheme: str, tmp_path: Path) -> None:
    lock = Lock(spec_for(scheme, tmp_path))
    lock.acquire()
    child = os.fork()
    if child == 0:
        try:
            lock.release()
            code = 1
        except LockUsageError as forked:
            code = 0 if forked.code == Code.LOCK_ERR_FORKED else 2
        lock.close()  # leaves the parent's lock alone
        os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's release did not answer LOCK_ERR_FORKED"
    assert lock.inspect().held_by_this_handle
    lock.release()
