"""A video job's reservation is never released by the orphan sweeper while the job may still run.

The sweeper (store/recovery.py) releases reservations older than its bound; a job holds its reservation for
up to `jobs.max_job_s`. The default bound covers the jobs; a configured bound below them is refused at load.
"""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.config import ConfigError, parse_config
from inferplex.store.recovery import orphan_bound


def _config(**extra: Any) -> dict[str, Any]:
    return {
        "providers": [{"name": "o", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [
            {"name": "v", "type": "video", "deployments": [{"provider": "o", "model": "sora-2"}],
             "pricing": {"video_second": 0.1}},
        ],
        **extra,
    }  # fmt: skip


def test_the_default_bound_outlasts_the_longest_job() -> None:
    config = parse_config(_config(jobs={"max_job_s": 7200}), "<test>")
    assert orphan_bound(config) > 7200


def test_a_configured_bound_below_the_longest_job_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"orphan_release_s: 600s is not above jobs\.max_job_s"):
        parse_config(_config(storage={"orphan_release_s": 600}), "<test>")
