"""What a package adding its own KV cache spec kind builds on, at the path it has had
since 0.1.0: subclass :class:`KVCacheStrategy` and declare the class under the entry
point group ``vllm_kv_strategies.strategies`` (CONTRIBUTING.md, "Adding a KV cache
spec kind"). The built-in kinds and the registry live in :mod:`vllm_kv_strategies.core`;
this module only names the public classes."""

from vllm_kv_strategies.core.strategies.base import Field, KVCacheStrategy, LayoutFamily, ModelDims, PagePart

__all__ = ["Field", "KVCacheStrategy", "LayoutFamily", "ModelDims", "PagePart"]
