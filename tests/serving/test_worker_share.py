"""What each of N workers gets of the server's resources: its share of `storage.pool_size` (the server's
PostgreSQL connections, not each worker's), and a shared-state coordinator only when the limits need one."""

from __future__ import annotations

import os
from typing import Any

import pytest

from inferplex.config import Config, parse_config
from inferplex.defaults import DEFAULT_CONFIG
from inferplex.serving import supervisor as sup
from inferplex.serving.worker import for_slot


def config(**storage: Any) -> Config:
    base = parse_config(DEFAULT_CONFIG, "<embedded defaults>")
    return base.model_copy(update={"storage": base.storage.model_copy(update=storage)})


@pytest.mark.parametrize(("pool", "workers", "each"), [(20, 1, 20), (20, 2, 10), (20, 3, 7), (1, 4, 1)])
def test_the_pool_is_the_servers_split_over_its_workers(pool: int, workers: int, each: int) -> None:
    shares = [for_slot(config(pool_size=pool), slot, workers).storage.pool_size for slot in range(workers)]
    assert shares == [each] * workers
    assert sum(shares) < pool + workers  # never more than the server's pool plus rounding


class Started:
    def __init__(self) -> None:
        self.path = "/nowhere"
        self.started = 0

    def start(self) -> None:
        self.started += 1


@pytest.mark.parametrize(
    ("redis_url", "workers", "wanted"),
    [(None, 2, True), ("redis://127.0.0.1:6379/0", 2, False), (None, 1, False)],
)
def test_a_coordinator_only_when_several_workers_keep_limits_without_redis(
    monkeypatch: pytest.MonkeyPatch, redis_url: str | None, workers: int, wanted: bool
) -> None:
    monkeypatch.setattr(sup, "Coordinator", Started)
    plan = sup.Plan("127.0.0.1", 0, None, workers)
    s = sup.Supervisor(plan, config(redis_url=redis_url), lambda _: (config(), ""), lambda c, s: "k")
    try:
        s._coordinate(s.config, workers)
        assert (s.coordinator is not None) is wanted
        if wanted:
            s._coordinate(s.config, workers)  # a reload keeps the one running
            assert isinstance(s.coordinator, Started) and s.coordinator.started == 1
    finally:
        os.close(s._ready_r)
        os.close(s._ready_w)
