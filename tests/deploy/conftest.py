from __future__ import annotations

import pytest

from tests.deploy import tools


@pytest.fixture(scope="session")
def deploy_tools() -> tools.Tools:
    try:
        return tools.install()
    except (tools.Unavailable, OSError) as exc:
        pytest.skip(f"the deployment validators could not be installed: {exc}")
