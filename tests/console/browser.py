"""Driving the admin console in a real browser (Debian's chromium through Playwright's sync API).

Playwright never downloads a browser here: it launches the system's chromium by path. `Console` wraps one
browser page with what every flow needs: the gateway's address, every URL the browser asked for (so a test
can show that a key never travelled in one), the page's JavaScript errors, and screenshots of each page at
a desktop and a phone size into test-artifacts/console/ (gitignored) for a person to look at."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Response

# headless in a container: no sandbox (no user namespaces), no GPU, and nothing fetched from Google
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
WIDE = (1440, 900)
PHONE = (375, 812)
# how long the browser waits for a page, an element or a condition before the step fails
STEP_TIMEOUT_MS = 15_000
RESIZE_SETTLE_MS = 400


def launch(playwright: Playwright, chromium: Path) -> Browser:
    return playwright.chromium.launch(executable_path=str(chromium), headless=True, args=LAUNCH_ARGS)


def tid(name: str) -> str:
    return f'[data-testid="{name}"]'


@dataclass
class Console:
    """One browser tab (in a context of its own: its own cookies) on the console of the gateway at `base`."""

    context: BrowserContext
    page: Page
    base: str
    urls: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # scripts, styles, images and fonts the browser could not load
    broken: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, browser: Browser, base: str, viewport: tuple[int, int] = WIDE) -> Console:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        context.set_default_timeout(STEP_TIMEOUT_MS)
        page = context.new_page()
        console = cls(context, page, base)
        context.on("request", lambda request: console.urls.append(request.url))
        page.on("framenavigated", lambda frame: console.urls.append(frame.url))
        page.on("pageerror", lambda error: console.errors.append(str(error)))
        context.on("response", console._note_broken)
        context.on("requestfailed", lambda request: console.broken.append(f"{request.url}: {request.failure}"))
        return console

    def _note_broken(self, response: Response) -> None:
        if response.status >= 400 and response.request.resource_type in ("script", "stylesheet", "image", "font"):
            self.broken.append(f"{response.url}: {response.status}")

    def close(self) -> None:
        self.context.close()

    def goto(self, path: str) -> None:
        response = self.page.goto(self.base + path)
        assert response is not None and response.ok, f"GET {path}: {response and response.status}"

    def goto_when_found(self, path: str) -> None:
        """Open a page about something the gateway writes a moment after answering (a request's log row):
        while it answers 404, wait a little and ask again."""
        for _ in range(40):
            response = self.page.goto(self.base + path)
            assert response is not None
            if response.status != 404:
                assert response.ok, f"GET {path}: {response.status}"
                return
            self.page.wait_for_timeout(250)
        raise AssertionError(f"GET {path} still answers 404")

    def path(self) -> str:
        return self.page.url.removeprefix(self.base)

    def sign_in(self, key: str) -> None:
        """Sign in through the login form and wait to be let in."""
        self.goto("/ui/login")
        self.page.fill(tid("login-key"), key)
        self.page.click(tid("login-submit"))
        self.page.wait_for_url(lambda url: "/ui/" in url and "/ui/login" not in url)

    def resize(self, viewport: tuple[int, int]) -> None:
        """Resize the window, and give the page's debounced resize handlers (the usage charts redraw 100 ms
        after the last resize event) time to run before anything is measured or shot."""
        self.page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
        self.page.wait_for_timeout(RESIZE_SETTLE_MS)

    def shoot(self, name: str) -> int:
        """Screenshots of the current page (whole length) at desktop and phone width; the viewport is the desktop
        one again afterwards. Answers how many CSS pixels the page overflows sideways at phone width (0: none),
        which on a phone means scrolling sideways to reach part of it."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        self.resize(PHONE)
        overflow = int(self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))
        self.page.screenshot(path=str(ARTIFACTS / f"{slug}-phone.png"), full_page=True)
        self.resize(WIDE)
        self.page.screenshot(path=str(ARTIFACTS / f"{slug}-wide.png"), full_page=True)
        return overflow
