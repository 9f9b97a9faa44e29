"""Several processes contending for one lock: an exact count, no overlap, fences growing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import spec_for

PROCESSES = 4
ROUNDS = 100
CONTENDER = Path(__file__).with_name("contender.py")


def test_processes_take_turns(scheme: str, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0 0\n")
    spec = spec_for(scheme, tmp_path, ttl="30s")
    contenders = [
        subprocess.Popen(
            [sys.executable, str(CONTENDER), "count", spec, str(counter), str(ROUNDS)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    failures = []
    for number, contender in enumerate(contenders):
        _, stderr = contender.communicate(timeout=120)
        if contender.returncode != 0:
            failures.append(f"contender {number} exited {contender.returncode}: {stderr}")
    assert not failures, "\n".join(failures)
    count, _ = counter.read_text().split()
    assert int(count) == PROCESSES * ROUNDS
