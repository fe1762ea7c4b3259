"""A real headless Chromium (Debian's chromium + chromedriver, driven by Selenium) and a real
uvicorn server on loopback for the browser tests."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import uvicorn

from tests.ports import reserve_port

CHROMIUM = Path(os.environ.get("OTEL_BLAME_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("OTEL_BLAME_CHROMEDRIVER", "/usr/bin/chromedriver"))
# The docs' screenshots are refreshed with OTEL_BLAME_UI_SCREENSHOTS=1; otherwise they are still taken
# (the pages render in a real browser either way) but land in a temporary directory of this process's
# own, so a test run leaves the committed images alone, and two runs (or pytest-xdist workers) never
# write, then check, the same file.
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
SCREENSHOTS = (
    DOCS_IMAGES
    if os.environ.get("OTEL_BLAME_UI_SCREENSHOTS", "").lower() in ("1", "true", "yes")
    else Path(tempfile.gettempdir()) / "otel-blame-ui-screenshots" / str(os.getpid())
)


@contextmanager
def serving(app) -> Iterator[str]:  # noqa: ANN001
    """Run ``app`` under uvicorn in a thread on a free loopback port; yield its base URL."""
    port = reserve_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="ui-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the UI server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def chromium(width: int = 1440, height: int = 1000) -> Iterator[object]:
    """Headless Chromium with a fresh profile and the performance (network) log switched on."""
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        pytest.skip("Chromium or chromedriver missing: make system-packages installs them (Debian packages)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="otel-blame-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions", "--disable-dev-shm-usage",
        "--no-default-browser-check", "--disable-features=Translate,OptimizationHints,MediaRouter",
        f"--user-data-dir={profile}", f"--window-size={width},{height}", "--force-device-scale-factor=1",
    ):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    os.environ.setdefault("SE_AVOID_STATS", "true")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def requested_urls(driver) -> list[str]:  # noqa: ANN001
    """Every URL the browser asked for since the last call (from the DevTools performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def off_loopback(urls: list[str]) -> list[str]:
    outside = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about", "chrome", "devtools"):
            continue
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            outside.append(url)
    return outside


def screenshot(driver, name: str) -> Path:  # noqa: ANN001
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    assert driver.save_screenshot(str(path)), f"no screenshot saved to {path}"
    assert path.stat().st_size > 10_000, "the screenshot is blank"
    return path
