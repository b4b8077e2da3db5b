"""Compare two ``run_generate.py`` JSON files.

    python tests/e2e/compare_outputs.py A.json B.json

Prints whether the token ids are identical, the first differing (prompt, step),
and the largest absolute logprob difference over the steps both runs share
(sampled token and the common top-k entries).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field


@dataclass
class Diff:
    tokens_equal: bool = True
    # first (prompt index, decode step) where the sampled token differs
    first_token_diff: tuple[int, int] | None = None
    # first (prompt index, decode step) where any logprob differs by > 0
    first_logprob_diff: tuple[int, int] | None = None
    # max |a - b| over sampled-token logprobs and shared top-k entries,
    # counted only while the token prefixes agree
    max_abs_logprob_diff: float = 0.0
    # top-k id sets differ at some step (with equal prefixes)
    topk_sets_differ: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return (
            self.tokens_equal
            and self.max_abs_logprob_diff == 0.0
            and not self.topk_sets_differ
        )


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def compare(a: dict, b: dict) -> Diff:
    d = Diff()
    ra, rb = a["results"], b["results"]
    if len(ra) != len(rb):
        d.tokens_equal = False
        d.notes.append(f"prompt count {len(ra)} != {len(rb)}")
    for pi, (xa, xb) in enumerate(zip(ra, rb)):
        for si, (sa, sb) in enumerate(zip(xa["steps"], xb["steps"])):
            if sa["token_id"] != sb["token_id"]:
                d.tokens_equal = False
                if d.first_token_diff is None:
                    d.first_token_diff = (pi, si)
                if d.first_logprob_diff is None:
                    d.first_logprob_diff = (pi, si)
                break  # later steps have different contexts
            diffs = [abs(sa["logprob"] - sb["logprob"])]
            ka, kb = set(sa["top"]), set(sb["top"])
            if ka != kb:
                d.topk_sets_differ = True
            diffs += [abs(sa["top"][k] - sb["top"][k]) for k in ka & kb]
            diffs = [x if not math.isnan(x) else math.inf for x in diffs]
            m = max(diffs)
            if (m > 0 or ka != kb) and d.first_logprob_diff is None:
                d.first_logprob_diff = (pi, si)
            d.max_abs_logprob_diff = max(d.max_abs_logprob_diff, m)
        if xa["token_ids"] != xb["token_ids"] and d.tokens_equal:
            d.tokens_equal = False
            d.notes.append(f"prompt {pi}: token_ids differ outside logged steps")
    return d


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__)
        return 2
    d = compare(load(argv[0]), load(argv[1]))
    out = asdict(d)
    out["identical"] = d.identical
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
