"""Run the model zoo and print its table (see zoo.py for what a row means).

    python tests/zoo/run_zoo.py                      # the CI slice, kv cache dtype auto
    python tests/zoo/run_zoo.py --all --kv-cache-dtype auto,fp8
    python tests/zoo/run_zoo.py LlamaForCausalLM Qwen3NextForCausalLM --json rows.json

Exits 1 when a row is a plugin failure (``differs`` / ``plugin-failed``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("archs", nargs="*", help="architectures (default: the CI slice; --all: the whole zoo)")
    parser.add_argument("--all", action="store_true", help="every architecture the installed config classes configure")
    parser.add_argument("--kv-cache-dtype", default="auto", help="comma-separated --kv-cache-dtype values (auto,fp8)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

    import configs
    import zoo
    import zoo_slice

    archs = args.archs or (configs.all_archs() if args.all else list(zoo_slice.SLICE))
    rows, start = [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kv_zoo_") as tmp:
        for dtype in args.kv_cache_dtype.split(","):
            for arch in archs:
                row = zoo.try_arch(arch, Path(tmp), dtype)
                print(row.line(), flush=True)
                rows.append(row)
    if args.all:
        rows += zoo.unconfigurable_rows()
    print()
    print(zoo.table(rows))
    print(f"({time.monotonic() - start:.0f} s)")
    if args.json:
        args.json.write_text(zoo.rows_as_json(rows))
    return 1 if any(row.result in zoo.FAILURES for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
