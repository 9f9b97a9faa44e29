"""A process that contends for a lock, run by the tests with this interpreter.

contender.py count SPEC COUNTER ROUNDS   take the lock ROUNDS times; each time
                                         add one to COUNTER, checking that no
                                         other holder is inside and that the
                                         fence grew
contender.py take SPEC SECONDS           try for SECONDS to take the lock; print
                                         "acquired FENCE" or "timeout MESSAGE"
"""

from __future__ import annotations

import os
import sys

from lockffi import Lock, LockTimeout


def count(spec: str, counter: str, rounds: int) -> None:
    inside = counter + ".inside"
    lock = Lock(spec, timeout=60)
    for _ in range(rounds):
        with lock as fence:
            try:
                # O_EXCL: a second holder inside finds the marker of the first.
                os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                sys.exit(f"overlap: pid {os.getpid()} holds the lock (fence {fence}) while another holder is inside")
            with open(counter) as file:
                value, last_fence = (int(word) for word in file.read().split())
            if fence <= last_fence:
                sys.exit(f"fence {fence} of pid {os.getpid()} is not greater than the previous holder's {last_fence}")
            with open(counter, "w") as file:
                file.write(f"{value + 1} {fence}\n")
            os.unlink(inside)
    lock.close()


def take(spec: str, seconds: float) -> None:
    lock = Lock(spec)
    try:
        print(f"acquired {lock.acquire(timeout=seconds)}")
    except LockTimeout as timeout:
        print(f"timeout {timeout.message}")
    lock.close()


if __name__ == "__main__":
    command, spec, *rest = sys.argv[1:]
    if command == "count":
        count(spec, rest[0], int(rest[1]))
    elif command == "take":
        take(spec, float(rest[0]))
    else:
        sys.exit(f"contender.py: unknown command {command!r}")
