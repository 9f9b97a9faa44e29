"""``Lock``: one handle of a lock named by a spec."""

from __future__ import annotations

import atexit
import enum
import math
import os
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Callable

from ._errors import Code, LockUsageError, check
from ._library import WAIT_FOREVER, ffi, lib, text


class Liveness(enum.IntEnum):
    """Whether a lock's holder is alive, as far as this host can prove (``lock_liveness``, less ``LOCK_OWNER_``)."""

    UNKNOWN = 0
    """On another host or boot, or not decidable: never treated as dead."""
    ALIVE = 1
    """Same host and boot, and the process (pid and start time) exists."""
    DEAD = 2
    """Same host and boot, and the process is gone, a zombie, or its pid reused."""


# Durations cross into C as milliseconds; the library refuses more than a
# hundred years with LOCK_ERR_INVALID_ARGUMENT, so only what cannot be a
# uint64 at all is refused here.
_MS_PER_SECOND = 1000


def _milliseconds(seconds: float, what: str) -> int:
    if not (0 <= seconds < math.inf):
        raise ValueError(f"{what} must be a finite number of seconds, 0 or more, not {seconds!r}")
    milliseconds = math.ceil(seconds * _MS_PER_SECOND)
    if milliseconds >= WAIT_FOREVER:
        raise ValueError(f"{what} of {seconds!r} seconds is beyond any duration the library takes")
    return milliseconds


def _c_string(value: str | bytes | os.PathLike[str], what: str) -> bytes:
    encoded = os.fsencode(value)
    if b"\0" in encoded:
        raise ValueError(f"{what} contains a NUL byte, which would cut it short in C: {value!r}")
    return encoded


def _moment(unix_ms: int) -> datetime | None:
    return datetime.fromtimestamp(unix_ms / _MS_PER_SECOND, tz=timezone.utc) if unix_ms else None


@dataclass(frozen=True)
class LockInfo:
    """A lock's state, read by :meth:`Lock.inspect` without taking it. Moments are UTC."""

    held: bool
    """Whether anyone holds the lock."""
    held_by_this_handle: bool
    """Whether the holder is the handle that was inspected."""
    stale: bool
    """Whether the next acquirer would break the lock (expired, or its owner is dead)."""
    liveness: Liveness
    """The holder's liveness; ``UNKNOWN`` on another host or boot, or when free."""
    pid: int | None
    """The holder's pid; None if unknown or free."""
    host: str | None
    """The holder's host name; None if unknown or free."""
    fence: int
    """The holder's fencing token; 0 if free or held by a foreign program."""
    last_fence: int
    """The last fencing token handed out for this lock."""
    expires: datetime | None
    """When the holder's TTL runs out and others may break the lock; None for never or unknown."""
    cooldown_until: datetime | None
    """The lock stays closed until then; None without a cooldown."""
    since: datetime | None
    """When the holder took it (a foreign program's lock: when its file was last written); None if unknown."""
    queue_length: int
    """Requests queued, the holder's included, for ``toplock``; 0 for the other schemes."""


def _lock_info(info: Any) -> LockInfo:
    """A ``lock_info`` as filled in by the library."""
    return LockInfo(
        held=bool(info.held),
        held_by_this_handle=bool(info.held_by_this_handle),
        stale=bool(info.stale),
        liveness=Liveness(info.owner_liveness),
        pid=info.owner_pid or None,
        host=text(info.owner_host) or None,
        fence=int(info.fence),
        last_fence=int(info.last_fence),
        expires=_moment(info.expires_unix_ms),
        cooldown_until=_moment(info.cooldown_until_unix_ms),
        since=_moment(info.since_unix_ms),
        queue_length=int(info.queue_length),
    )


# Locks whose watchdog may call into Python. The interpreter stops their
# watchdogs before it finalizes: a callback arriving after that could not
# run Python, and the library's own release at exit comes later still.
_renewing: weakref.WeakSet[Lock] = weakref.WeakSet()


@atexit.register
def _stop_watchdogs() -> None:
    for lock in list(_renewing):
        lock._stop_watchdog_at_exit()


@ffi.callback("lock_lost_fn")
def _watchdog_found_lost(context: Any) -> None:
    # One trampoline for every lock, alive as long as this module, so that C
    # never holds a pointer to a callback Python could collect. The context,
    # kept by the Lock while its watchdog runs, is a weak reference to it: a
    # Lock dropped while renewing is released at once by its destructor.
    lock: Lock | None = ffi.from_handle(context)()
    if lock is None:
        return
    _renewing.discard(lock)
    on_lost = lock._on_lost
    if on_lost is not None:
        on_lost()


class Lock:
    """One handle of the lock named by ``spec``: ``scheme:target?key=value&...``.

    No file is touched until the handle is used. Use it as a context manager
    to hold the lock for a block (the ``as`` target is the fencing token)::

        with Lock("lease:/run/lock/report.lease?ttl=30s", timeout=5) as fence:
            ...

    A handle is used by one thread at a time: a call while another thread's
    call on it runs raises :class:`LockUsageError` (``LOCK_ERR_HANDLE_IN_USE``).
    Two handles of one lock exclude each other like two processes.

    Leaving the ``with`` block releases the lock and keeps the handle for
    the next ``with``. :meth:`close`, or the destructor, release what the
    handle still holds and free it. The library releases what a process
    still holds when it exits; a long-lived worker (WSGI, FastCGI) does not
    exit between requests, so it must release or close every lock it takes.
    """

    def __init__(self, spec: str | bytes, *, timeout: float | None = None) -> None:
        """Opens a handle; ``timeout`` is the wait of ``with``: seconds, ``None`` forever, 0 one attempt.

        Raises :class:`SpecError` for a spec that does not parse.
        """
        self._handle: Any = None
        self._timeout = timeout
        self._on_lost: Callable[[], None] | None = None
        self._lost_context: Any = None
        handle_out = ffi.new("lock_handle **")
        check(lib.lock_open(_c_string(spec, "spec"), handle_out))
        self._handle = handle_out[0]

    def acquire(self, timeout: float | None = None) -> int:
        """Takes the lock and returns its fencing token, greater than every earlier one of this lock.

        ``timeout`` in seconds: ``None`` waits as long as it takes, 0 makes
        one attempt. Raises :class:`LockTimeout` when the time runs out; its
        message names the holder, a cooldown or the queue ahead.
        """
        fence = ffi.new("uint64_t *")
        wait = WAIT_FOREVER if timeout is None else _milliseconds(timeout, "timeout")
        check(lib.lock_acquire(self._live(), wait, fence))
        return int(fence[0])

    def try_acquire(self) -> int | None:
        """One attempt, within a tenth of a second: the fencing token, or ``None`` if the lock is taken.

        ``None`` stands for ``LOCK_BUSY`` (someone holds it, it is cooling
        down, or its guard stayed locked); ``acquire(timeout=0)`` makes the
        same attempt and raises :class:`LockTimeout` with the holder's name.
        """
        fence = ffi.new("uint64_t *")
        result = lib.lock_try_acquire(self._live(), fence)
        if result == Code.LOCK_BUSY:
            return None
        check(result)
        return int(fence[0])

    def release(self, cooldown: float = 0.0) -> None:
        """Releases the lock, keeping it closed to everyone for ``cooldown`` seconds.

        Raises :class:`LockExpired` (it was released, but it had been held
        past its TTL: what ran after that was not protected) or
        :class:`LockLost` (someone else holds it; nothing was removed). After
        either the handle holds nothing, and its watchdog is stopped.
        """
        result = lib.lock_release(self._live(), _milliseconds(cooldown, "cooldown"))
        if result in (Code.LOCK_OK, Code.LOCK_EXPIRED, Code.LOCK_LOST):
            self._forget_watchdog()
        check(result)

    def prolong(self, ttl: float = 0.0) -> None:
        """Moves the expiry to now + ``ttl`` seconds (0: the spec's ``ttl``; without one, never).

        Raises :class:`LockExpired` when the lock had run out (nobody took it;
        it is held again now) and :class:`LockLost` when someone else holds it.
        """
        result = lib.lock_prolong(self._live(), _milliseconds(ttl, "ttl"))
        if result == Code.LOCK_LOST:
            self._forget_watchdog()
        check(result)

    def commit(self, temp_path: str | os.PathLike[str], target_path: str | os.PathLike[str]) -> None:
        """Renames the finished ``temp_path`` over ``target_path`` only if this handle still holds the lock.

        Raises :class:`LockExpired` or :class:`LockLost` without committing,
        and :class:`LockFileError` (``LOCK_ERR_COMMIT``) if the rename fails;
        unless committed, the target is untouched and the temp file is yours.
        """
        result = lib.lock_commit(self._live(), _c_string(temp_path, "temp_path"), _c_string(target_path, "target_path"))
        if result == Code.LOCK_LOST:
            self._forget_watchdog()
        check(result)

    def autorenew(self, on_lost: Callable[[], None] | None = None) -> None:
        """Starts a watchdog thread that prolongs the held lock every third of the spec's ``ttl``.

        It runs until the lock is released, :meth:`stop_autorenew` or
        :meth:`close`. If a renewal finds that someone else holds the lock,
        ``on_lost()`` is called once, on the watchdog's thread, and the
        watchdog stops. It may call any method of any ``Lock``, this one's
        included (:meth:`close` too), set an ``Event``, or interrupt the main
        thread (``_thread.interrupt_main()``); it must not wait for a thread
        that may be releasing, closing or stopping this lock's watchdog,
        since those calls wait for a running ``on_lost`` to return. What it
        raises is printed to stderr and otherwise ignored. Starting again
        replaces the running watchdog.

        Raises :class:`LockUsageError`: ``LOCK_ERR_NOT_HELD`` without the
        lock, ``LOCK_ERR_UNSUPPORTED`` for a spec without ``ttl`` and for
        ``flock``.
        """
        handle = self._live()
        context = ffi.new_handle(weakref.ref(self))
        # The new watchdog may find the lock lost before lock_autorenew has
        # returned, so it must find on_lost already in place; the previous
        # context stays alive until the library says its watchdog is gone.
        previous = self._on_lost
        was_renewing = self._lost_context is not None
        self._on_lost = on_lost
        _renewing.add(self)
        result = lib.lock_autorenew(handle, _watchdog_found_lost, context)
        if result != Code.LOCK_OK:
            self._on_lost = previous
            if not was_renewing:
                _renewing.discard(self)
        check(result)
        self._lost_context = context

    def stop_autorenew(self) -> None:
        """Stops the watchdog and waits for it: no renewal runs after this returns. The lock stays held."""
        check(lib.lock_autorenew_stop(self._live()))
        self._forget_watchdog()

    def inspect(self) -> LockInfo:
        """Reads who holds the lock, until when, its fences and cooldown, without taking it."""
        info: Any = ffi.new("lock_info *")  # cffi's cdata has no static fields
        check(lib.lock_inspect(self._live(), info))
        return _lock_info(info)

    def took_over(self) -> LockInfo | None:
        """The holder whose lock the held acquisition broke, as judged then: one that died
        (``liveness`` is ``DEAD``) or ran past its TTL, so what it protected may be half-done.
        None if the lock was free.

        Raises :class:`LockUsageError` (``LOCK_ERR_NOT_HELD``) when nothing is held.
        """
        info: Any = ffi.new("lock_info *")
        check(lib.lock_took_over(self._live(), info))
        return _lock_info(info) if info.held else None

    def break_lock(self) -> bool:
        """Removes the lock whoever holds it (for an operator who knows the holder is gone); whether there was one.

        Raises :class:`LockUsageError` (``LOCK_ERR_UNSUPPORTED``) for ``flock``,
        which only its holder's exit releases.
        """
        was_held = ffi.new("bool *")
        check(lib.lock_break(self._live(), was_held))
        return bool(was_held[0])

    @property
    def path(self) -> str:
        """The path that is the lock: lock file, lock directory, symlink, flock'd file, lease or queue."""
        handle = self._live()
        length = ffi.new("size_t *")
        buffer = ffi.new("char[]", 256)
        result = lib.lock_path(handle, buffer, len(buffer), length)
        if result == Code.LOCK_ERR_BUFFER_TOO_SMALL:
            buffer = ffi.new("char[]", length[0] + 1)
            result = lib.lock_path(handle, buffer, len(buffer), length)
        check(result)
        return os.fsdecode(ffi.buffer(buffer, length[0])[:])

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run; every other method then raises :class:`LockUsageError`."""
        return self._handle is None

    def close(self) -> None:
        """Releases what the handle holds (no cooldown), stops its watchdog and frees it. Idempotent.

        Raises, as :meth:`release` does, :class:`LockExpired` or
        :class:`LockLost`, or the error of a release that failed; the handle
        is closed whatever it raises.
        """
        handle, self._handle = self._handle, None
        if handle is None:
            return
        result = lib.lock_close(handle)
        self._forget_watchdog()
        check(result)

    def __enter__(self) -> int:
        return self.acquire(self._timeout)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        # A partly constructed Lock (lock_open failed) has no handle yet.
        if getattr(self, "_handle", None) is not None:
            self.close()

    def _live(self) -> Any:
        if self._handle is None:
            raise LockUsageError(Code.LOCK_ERR_NULL_ARGUMENT, "this Lock was closed; open a new one")
        return self._handle

    def _forget_watchdog(self) -> None:
        _renewing.discard(self)
        self._on_lost = None
        self._lost_context = None

    def _stop_watchdog_at_exit(self) -> None:
        if self._handle is not None:
            lib.lock_autorenew_stop(self._handle)
        self._forget_watchdog()
