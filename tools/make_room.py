"""Make disk room for the next test cell by removing other cells' environments.

    python3 tools/make_room.py .nox/ascend-0-23-0 [--need-gib 4]
    python3 tools/make_room.py --free PATH     # print the free GiB on PATH's filesystem

A cell's environment takes 1.9 GiB (ascend-0.13.0) to 3.3 GiB (upstream-X:
torch 0.75, triton 1.0, vLLM 0.5), so the seven of them need about 17 GiB,
more than some machines have free. tools/test.sh runs this before each cell:
when the filesystem holding the environments has less than ``--need-gib`` GiB
free, the other environments beside the given one (directories holding a
``pyvenv.cfg``), least recently installed first, are removed until it has.
Each is rebuilt from its pins on its cell's next run. The given environment is
never removed, so a reused one stays reused.

Exit status 0 when the room is there (after removals or not), 1 when it is
still short with nothing left to remove; the message names the free and
needed sizes. Standard library only: it runs on the system Python.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

GIB = 2**30


def free_gib(path: Path) -> float:
    """Free space (GiB) on the filesystem holding ``path``, or its nearest existing parent."""
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / GIB


def _installed_at(env: Path) -> float:
    # pip rewrites site-packages on every install into the environment (the plugin
    # is reinstalled on each run of its cell); the directory's own mtime otherwise.
    site = sorted(env.glob("lib/python*/site-packages"))
    return (site[0] if site else env).stat().st_mtime


def other_environments(keep: Path) -> list[Path]:
    """Virtual environments beside ``keep`` (not ``keep`` itself), least recently installed first."""
    parent = keep.parent
    if not parent.is_dir():
        return []
    envs = [p for p in parent.iterdir() if p.is_dir() and (p / "pyvenv.cfg").is_file() and p.resolve() != keep.resolve()]
    return sorted(envs, key=_installed_at)


def make_room(keep: Path, need_gib: float, log=print) -> bool:
    """Remove environments beside ``keep`` until ``need_gib`` GiB are free; True when they are."""
    free = free_gib(keep)
    if free >= need_gib:
        return True
    for env in other_environments(keep):
        log(f"make_room: {free:.2f} GiB free, a cell needs about {need_gib:g} GiB: "
            f"removing {env} (rebuilt from its pins on its next run)")
        shutil.rmtree(env)
        free = free_gib(keep)
        if free >= need_gib:
            return True
    log(f"make_room: only {free:.2f} GiB free on the filesystem of {keep}, a cell needs about "
        f"{need_gib:g} GiB, and no other environment is left to remove; trying anyway")
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", type=Path, help="the environment the next cell uses (kept), e.g. .nox/ascend-0-23-0")
    parser.add_argument("--free", action="store_true", help="only print the free GiB on ENV's filesystem (one decimal)")
    parser.add_argument("--need-gib", type=float, default=4.0,
                        help="free GiB wanted before the cell starts (default 4: the largest "
                             "environment, 3.3 GiB, plus pip's downloads and the tests' files)")
    args = parser.parse_args(argv)
    if args.free:
        print(f"{free_gib(args.env):.1f}")
        return 0
    return 0 if make_room(args.env, args.need_gib) else 1


if __name__ == "__main__":
    sys.exit(main())
