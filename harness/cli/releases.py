"""A package's releases from the registry, and the final ones between two versions, in order.

`pip_releases` asks pip (`pip index versions NAME`: the index pip is configured with, PyPI by
default), so a proxy or a mirror the user set up applies; `between` is pure, so `harness bisect`
takes the lister as a parameter and its tests pass a fixed list.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable

from packaging.version import InvalidVersion, Version

from harness.cli.project import UsageError

Lister = Callable[[str], list[str]]
TIMEOUT_S = 120


def pip_releases(package: str) -> list[str]:
    """Every version the index lists for `package` (pip's "Available versions:" line)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True,
                              text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"could not list the releases of {package}: {exc}") from None
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        why = (done.stderr.strip().splitlines() or ["no 'Available versions' line"])[-1]
        raise UsageError(f"could not list the releases of {package} (pip index versions): {why}")
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def final(versions: Iterable[str]) -> list[Version]:
    """The final releases (no pre-, post-, dev- or local part), oldest first."""
    out = set()
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if str(version) == version.base_version:
            out.add(version)
    return sorted(out)


def between(versions: Iterable[str], good: str, bad: str) -> list[str]:
    """GOOD, every final release after it and before BAD, then BAD - as the registry spells them."""
    releases = final(versions)
    low, high = Version(good), Version(bad)
    if low >= high:
        raise UsageError(f"GOOD {good} must be older than BAD {bad}")
    for wanted in (low, high):
        if wanted not in releases:
            raise UsageError(f"{wanted} is not a final release in the registry's list")
    return [str(v) for v in releases if low <= v <= high]
