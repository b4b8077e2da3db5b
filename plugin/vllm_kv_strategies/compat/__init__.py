"""Release facts: what differs between the vLLM / vllm-ascend releases the
plugin supports, split by concern.

* :mod:`.matrix`: the support matrix and the installed versions;
* :mod:`.specs`: which KV cache spec classes and fields a release defines,
  and the two forms of ``KVCacheTensor``;
* :mod:`.upstream`: vLLM's own model runners (V1 and V2): what the plugin
  patches there and why;
* :mod:`.ascend`: vllm-ascend's ``NPUModelRunner``: what the plugin patches
  in each release and the release's layout facts.

What a KV cache spec kind *is* (page parts, the MLA split, sparse detection)
lives in its strategy (:mod:`vllm_kv_strategies.strategies`), not here. No
module of this package imports vLLM at import time.
"""

from .matrix import ASCEND_RELEASES, UPSTREAM_VLLM_RELEASES, Installed, release, supported_releases
from .targets import PatchTarget

__all__ = [
    "ASCEND_RELEASES",
    "UPSTREAM_VLLM_RELEASES",
    "Installed",
    "PatchTarget",
    "release",
    "supported_releases",
]
