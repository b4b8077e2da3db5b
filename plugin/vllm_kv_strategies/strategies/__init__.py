"""Built-in strategies, one module per KV cache spec kind."""

from .base import KVCacheStrategy, ModelDims, PagePart
from .full_attention import FullAttentionStrategy
from .mamba import MambaStrategy
from .mla import MLAStrategy
from .sparse_mla import SparseMLAStrategy

BUILTIN_STRATEGIES: tuple[type[KVCacheStrategy], ...] = (
    FullAttentionStrategy,
    MLAStrategy,
    SparseMLAStrategy,
    MambaStrategy,
)

__all__ = [
    "BUILTIN_STRATEGIES",
    "FullAttentionStrategy",
    "KVCacheStrategy",
    "MLAStrategy",
    "MambaStrategy",
    "ModelDims",
    "PagePart",
    "SparseMLAStrategy",
]
