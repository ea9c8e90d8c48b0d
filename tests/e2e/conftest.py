"""A real headless browser for the e2e tests that use a page: Debian's Chromium driven by
Playwright.

`make install` installs the browser (`/usr/bin/chromium`, or `make test CHROMIUM=/path`, which
reaches the tests as `TOOLPIPE_CHROMIUM`); Playwright is in the `dev` extra. Playwright never
downloads a browser of its own here (`playwright install` fails offline): it drives the one at
`executable_path`. A browser that cannot start fails the test that asked for it, never skips
it: CI installs the browser, so a skip would only hide a broken install.
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

CHROMIUM = "/usr/bin/chromium"
# As the machine's notes measured: without these, Chromium opens connections to Google's
# services at start (refused on a closed network, many at a time). A test reaches 127.0.0.1 only.
# Playwright adds --headless and, as root needs, --no-sandbox.
OFFLINE_FLAGS = (
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)
# Short, so a page that lacks what a test looks for fails in seconds (a local page loads in ms).
TIMEOUT_MS = 5_000


class BrowserUnavailableError(Exception):
    """The browser cannot start: the message says what to install or set."""


def chromium_path() -> str:
    return os.environ.get("TOOLPIPE_CHROMIUM") or CHROMIUM


def launch(playwright: "Playwright", executable: str) -> "Browser":
    """Chromium at `executable`, headless and offline, or a one-line reason it cannot start."""
    from playwright.sync_api import Error

    if not Path(executable).is_file():
        raise BrowserUnavailableError(
            f"no browser at {executable}: run `make install` (it installs Debian's chromium), "
            "or set TOOLPIPE_CHROMIUM to a Chrome or Chromium"
        )
    try:
        return playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(OFFLINE_FLAGS), timeout=30_000
        )
    except Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BrowserUnavailableError(f"{executable} did not start: {first}") from e


@pytest.fixture(scope="module")
def playwright() -> Iterator["Playwright"]:
    """Playwright's driver, once per module (one per thread: its sync API cannot nest). Not per
    session: while it is open, an asyncio loop runs on the main thread, and every later test in
    the process that calls `asyncio.run` (async tools, MCP listings) fails."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        pytest.fail(f"Playwright is not installed ({e}): run `make install` (the dev extra has it)")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: "Playwright") -> Iterator["Browser"]:
    """One Chromium for the module (its start costs ~0.7 s); each test gets its own page."""
    try:
        started = launch(playwright, chromium_path())
    except BrowserUnavailableError as e:
        pytest.fail(str(e))
    yield started
    started.close()


@pytest.fixture
def page(browser: "Browser") -> Iterator["Page"]:
    """A fresh page (its own context: no cookies or storage from another test)."""
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()
