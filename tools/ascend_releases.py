"""Classify every vllm-ascend release on the package index against the matrix's cells.

For each release from 0.11.0rc0 on (``pip index versions vllm-ascend --pre``), download it with
pip (a wheel where the index has one, else the sdist, whose metadata is prepared without build
isolation and without CANN), read ``vllm_ascend/worker/model_runner_v1.py`` out of the archive and
fingerprint the ``NPUModelRunner`` methods the plugin patches or reads
(:func:`vllm_kv_strategies.platforms.fingerprint.method_fingerprint` over
:data:`vllm_kv_strategies.platforms.ascend.releases.FINGERPRINTED_METHODS`). Prints the
``FINGERPRINTS`` mapping that :mod:`vllm_kv_strategies.platforms.ascend.releases` holds, so that a
release with the same code as a cell's release is covered by that cell and any other is not.

    python tools/ascend_releases.py [--cache DIR] [--from 0.11.0rc0]

Needs pip, packaging, setuptools and setuptools-scm in the running interpreter (for the sdists);
about 30 downloads of 0.4-30 MB, kept in --cache (default .nox/_releases) between runs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugin"))

from packaging.version import Version  # noqa: E402

from vllm_kv_strategies.platforms.ascend.releases import FINGERPRINTED_METHODS, V2_FINGERPRINTED_FUNCTIONS  # noqa: E402
from vllm_kv_strategies.platforms.fingerprint import method_fingerprint  # noqa: E402

RUNNER_FILE = "vllm_ascend/worker/model_runner_v1.py"
#: Ascend Model Runner V2's KV cache allocation (0.30+): ``V2_FINGERPRINTS``.
V2_FILE = "vllm_ascend/worker/v2/attn_utils.py"
WHEEL_TAGS = ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_24_x86_64",
              "--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"]


def index_versions() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "vllm-ascend", "--pre"],
                         capture_output=True, text=True, check=True).stdout
    listed = re.search(r"Available versions: (.*)", out)
    if listed is None:
        sys.exit(f"pip index versions printed no version list:\n{out}")
    return [v.strip() for v in listed.group(1).split(",")]


def download(version: str, cache: Path) -> Path:
    """The release's archive in ``cache`` (downloaded once)."""
    for path in cache.glob(f"vllm_ascend-{version}[-.]*"):
        if path.name.endswith((".whl", ".tar.gz")):
            return path
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), f"vllm-ascend=={version}"]
    wheel = subprocess.run([*pip, "--only-binary=:all:", *WHEEL_TAGS], capture_output=True, text=True)
    if wheel.returncode != 0:
        env = {**os.environ, "SOC_VERSION": "ascend910b1", "COMPILE_CUSTOM_KERNELS": "0"}
        subprocess.run([*pip, "--no-binary=:all:", "--no-build-isolation"], env=env, check=True,
                       capture_output=True, text=True)
    return download(version, cache)


def runner_source(archive: Path, path: str = RUNNER_FILE) -> str | None:
    """The text of ``path`` in a wheel or sdist, None where it has no such file."""
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as whl:
            return whl.read(path).decode() if path in whl.namelist() else None
    with tarfile.open(archive) as sdist:
        for member in sdist.getmembers():
            if member.name.endswith("/" + path) and member.name.count("/") == path.count("/") + 1:
                return sdist.extractfile(member).read().decode()
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=ROOT / ".nox" / "_releases")
    parser.add_argument("--from", dest="first", default="0.11.0rc0")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    versions = sorted((v for v in index_versions() if Version(v) >= Version(args.first)), key=Version)
    print("FINGERPRINTS: dict[str, str] = {")
    v2 = {}
    for version in versions:
        print(f"[ascend_releases] {version}: downloading", file=sys.stderr, flush=True)
        archive = download(version, args.cache)
        source = runner_source(archive)
        value = "None" if source is None else repr(method_fingerprint(source, "NPUModelRunner", FINGERPRINTED_METHODS))
        print(f"    {version!r}: {value},", flush=True)
        v2_source = runner_source(archive, V2_FILE) if Version(version) >= Version("0.30.0rc1") else None
        if v2_source is not None:
            v2[version] = method_fingerprint(v2_source, None, V2_FINGERPRINTED_FUNCTIONS)
    print("}")
    # the releases whose V2 has a fingerprint; only those a cell runs belong in V2_FINGERPRINTS
    print("V2 fingerprints (V2_FINGERPRINTS lists the releases a cell runs):")
    for version, value in v2.items():
        print(f"    {version!r}: {value!r},")
    return 0


if __name__ == "__main__":
    sys.exit(main())
