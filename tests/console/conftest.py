"""Fixtures for the console's browser tests: the system's chromium (installed with apt-get when missing and
we may, else the tests are skipped saying why), one Playwright browser per module, and a gateway with a fake
OpenAI upstream and the console on. The httpx-level console tests in this folder use none of these."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = Path("/usr/bin/chromium")
# Playwright must use the system's chromium, never fetch its own
os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


def _install_chromium() -> str | None:
    """Make /usr/bin/chromium exist: None when it does, else why it cannot (the reason to skip)."""
    if CHROMIUM.exists():
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return f"no chromium at {CHROMIUM}, and installing it needs root and apt-get (apt-get install chromium)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command, limit in ((["apt-get", "update"], 300), (["apt-get", "install", "-y", "chromium"], 900)):
        try:
            subprocess.run(command, env=env, check=True, timeout=limit, capture_output=True)
        except (OSError, subprocess.SubprocessError) as error:
            return f"no chromium at {CHROMIUM}, and `{' '.join(command)}` failed: {error}"
    return None if CHROMIUM.exists() else f"apt-get installed chromium, but not at {CHROMIUM}"


@pytest.fixture(scope="session")
def chromium() -> Path:
    reason = _install_chromium()
    if reason is not None:
        pytest.skip(reason)
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Browser]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the test extra's playwright is not installed")
    from tests.console.browser import launch

    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright, chromium)
        yield browser
        browser.close()


class ServerErrors(logging.Handler):
    """The tracebacks uvicorn logs when the app raises (an exception no page handled): a browser test
    fails on them, though the browser only saw a 500 or a dropped connection."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(self.format(record))


@pytest.fixture(scope="module")
def console_gateway(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    """A gateway of the module's own (its own SQLite store: the usage and request pages see only its
    traffic), with the console on at /ui."""
    config = openai_config(fake_openai)
    config["console"] = {"enabled": True}
    with GatewayServer(config) as server:
        yield server


@pytest.fixture
def server_errors() -> Iterator[ServerErrors]:
    """What the gateway's server logged as errors during the test."""
    handler = ServerErrors()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
