"""Headless Chromium (Debian's ``chromium`` package) for the HTML report: the DOM it
builds from a file, and screenshots. Used by the tests and by benchmarks/report_picture.py."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# As root and with no network: no sandbox, none of the background connections, a fresh profile.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")


def executable() -> str | None:
    """Where chromium is on PATH; None where it is not installed."""
    return shutil.which("chromium")


def missing() -> str | None:
    """Why chromium cannot run here, for a test's skip (None: it can)."""
    return "chromium: not installed" if executable() is None else None


def chromium(profile: Path, *args: str) -> str:
    """Run chromium headless with ``args``; its stdout. A failure raises with its stderr."""
    found = executable()
    if found is None:
        raise FileNotFoundError("chromium is not installed (Debian: apt-get install chromium)")
    result = subprocess.run([found, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                            timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"chromium {' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return result.stdout
