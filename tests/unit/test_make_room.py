"""tools/make_room.py: tools/test.sh frees disk for the next cell by removing other cells' environments."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("make_room", Path(__file__).parents[2] / "tools" / "make_room.py")
make_room = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_room)


def _env(nox: Path, name: str, installed_at: int, gib: float) -> Path:
    site = nox / name / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (nox / name / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (nox / name / "size").write_text(str(gib))
    os.utime(site, (installed_at, installed_at))
    return nox / name


@pytest.fixture
def nox(tmp_path, monkeypatch):
    """A .nox with three environments (3.3, 2.2, 1.9 GiB) and a reports folder, on a disk
    with 0.5 GiB free besides what removing environments gives back."""
    nox = tmp_path / ".nox"
    _env(nox, "upstream-0-32-0", installed_at=3000, gib=3.3)
    _env(nox, "ascend-0-11-0", installed_at=1000, gib=2.2)
    _env(nox, "ascend-0-13-0", installed_at=2000, gib=1.9)
    (nox / "_reports").mkdir()
    sizes = {p.name: float((p / "size").read_text()) for p in nox.iterdir() if (p / "size").exists()}

    def free_gib(path):
        return 0.5 + sum(gib for name, gib in sizes.items() if not (nox / name).exists())

    monkeypatch.setattr(make_room, "free_gib", free_gib)
    return nox


def test_enough_room_removes_nothing(nox):
    assert make_room.make_room(nox / "ascend-0-23-0", need_gib=0.5, log=lambda _: None)
    assert sorted(p.name for p in nox.iterdir()) == ["_reports", "ascend-0-11-0", "ascend-0-13-0", "upstream-0-32-0"]


def test_removes_least_recently_installed_first_until_enough(nox):
    logged = []
    assert make_room.make_room(nox / "ascend-0-23-0", need_gib=4.0, log=logged.append)
    # 0.5 + 2.2 (ascend-0-11-0, oldest) = 2.7 < 4; + 1.9 (ascend-0-13-0) = 4.6 >= 4: stop there.
    assert sorted(p.name for p in nox.iterdir()) == ["_reports", "upstream-0-32-0"]
    assert len(logged) == 2
    assert "0.50 GiB free, a cell needs about 4 GiB: removing" in logged[0] and "ascend-0-11-0" in logged[0]
    assert "2.70 GiB free" in logged[1] and "ascend-0-13-0" in logged[1]


def test_never_removes_the_cells_own_environment(nox):
    logged = []
    assert not make_room.make_room(nox / "upstream-0-32-0", need_gib=10.0, log=logged.append)
    # Both others gone (0.5 + 2.2 + 1.9 = 4.6 GiB), its own kept, the reports folder kept.
    assert sorted(p.name for p in nox.iterdir()) == ["_reports", "upstream-0-32-0"]
    assert "only 4.60 GiB free" in logged[-1] and "needs about 10 GiB" in logged[-1]


def test_main_exit_status(nox, capsys):
    assert make_room.main([str(nox / "ascend-0-13-0"), "--need-gib", "2"]) == 0
    assert "removing" in capsys.readouterr().out
    assert make_room.main([str(nox / "ascend-0-13-0"), "--need-gib", "100"]) == 1


def test_main_free_prints_the_free_gib_and_removes_nothing(nox, capsys):
    assert make_room.main(["--free", str(nox / "ascend-0-23-0")]) == 0
    assert capsys.readouterr().out == "0.5\n"
    assert sorted(p.name for p in nox.iterdir()) == ["_reports", "ascend-0-11-0", "ascend-0-13-0", "upstream-0-32-0"]


def test_free_gib_of_a_path_not_yet_created(tmp_path):
    # The cell's environment does not exist before its first run: its parent's filesystem counts.
    assert make_room.free_gib(tmp_path / ".nox" / "upstream-0-32-0") > 0
