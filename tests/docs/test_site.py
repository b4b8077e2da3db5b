"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml: every warning, a
broken link or anchor or a page missing from the navigation, fails it), and a broken link in a
copy of it does fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
                           "--site-dir", str(site)], capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly(tmp_path):
    proc = build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "ascend" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with open(tmp_path / "docs" / "index.md", "a") as f:
        f.write("\nSee [the missing page](missing.md) and [an anchor](ascend.md#no-such-section).\n")
    proc = build(tmp_path, tmp_path / "site")
    assert proc.returncode != 0
    assert "missing.md" in proc.stderr and "no-such-section" in proc.stderr, proc.stderr[-3000:]
