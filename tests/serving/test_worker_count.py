"""How many workers `serve` starts by default: one per core it may use, within a container's CPU quota."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferplex.serving.worker import worker_count


@pytest.mark.parametrize(
    ("cpu_max", "most"),
    [
        ("max 100000\n", None),  # no quota: every core of the affinity
        ("150000 100000\n", 2),  # 1.5 CPUs: 2 workers
        ("50000 100000\n", 1),  # half a CPU: still one
        ("100000 100000\n", 1),
        (None, None),  # no cgroup v2 file
        ("garbage", None),
    ],
)
def test_one_worker_per_core_within_the_cgroup_quota(tmp_path: Path, cpu_max: str | None, most: int | None) -> None:
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    cores = len(os.sched_getaffinity(0))
    assert worker_count(path) == (min(cores, most) if most is not None else cores)
