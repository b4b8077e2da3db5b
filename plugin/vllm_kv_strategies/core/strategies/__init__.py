"""Built-in strategies, one module per KV cache spec kind, and the spec
classes no strategy lays out (refused, with the reason)."""

from vllm_kv_strategies.core.strategies.base import Field, KVCacheStrategy, LayoutFamily, ModelDims, PagePart
from vllm_kv_strategies.core.strategies.bsh_attention import BSHAttentionStrategy
from vllm_kv_strategies.core.strategies.c8_mxfp import C8MXFPStrategy
from vllm_kv_strategies.core.strategies.ds_mla import DSMLAStrategy
from vllm_kv_strategies.core.strategies.fa_quant_mla import FAQuantMLAStrategy
from vllm_kv_strategies.core.strategies.full_attention import FullAttentionStrategy
from vllm_kv_strategies.core.strategies.hidden_state import HiddenStateStrategy
from vllm_kv_strategies.core.strategies.mamba import MambaStrategy
from vllm_kv_strategies.core.strategies.mla import MLAStrategy
from vllm_kv_strategies.core.strategies.quant_attention import QuantAttentionStrategy
from vllm_kv_strategies.core.strategies.sfa_indexer import SFAIndexerStrategy
from vllm_kv_strategies.core.strategies.sfa_packed import SFAPackedStrategy
from vllm_kv_strategies.core.strategies.sparse_mla import SparseMLAStrategy
from vllm_kv_strategies.core.strategies.sparse_mla_c8 import SparseMLAC8Strategy

#: Within one spec class, strategies with a ``matches`` predicate are tried in
#: this order before the plain one: the quantised sparse MLA kind before the
#: sparse one (both match ``sparse_head_dim``; the sparse one refuses C8 pages).
BUILTIN_STRATEGIES: tuple[type[KVCacheStrategy], ...] = (
    FullAttentionStrategy,
    QuantAttentionStrategy,
    C8MXFPStrategy,
    BSHAttentionStrategy,
    MLAStrategy,
    FAQuantMLAStrategy,
    DSMLAStrategy,
    SparseMLAC8Strategy,
    SparseMLAStrategy,
    SFAPackedStrategy,
    SFAIndexerStrategy,
    MambaStrategy,
    HiddenStateStrategy,
)

#: Spec classes the installed releases define that no built-in strategy lays
#: out, by class name, with the reason. A layer of such a spec leaves the
#: runner stock in ``auto`` (one warning) and raises with ``on``. The spec-class
#: census test requires every KVCacheSpec subclass of every release in the
#: matrix to be served by a strategy or listed here.
REFUSED_SPEC_CLASSES: dict[str, str] = {
    "CircularBufferSpec": "DeepSeek V4's compressor ring buffer: a per-request ring, not paged blocks",
    "HiSparseHotSpec": "HiSparse device pool: laid out by vLLM's hisparse binding, not by KV cache tensors",
    "HiSparseResidentSpec": "HiSparse host-resident pool: laid out by vLLM's hisparse binding",
    "TQFullAttentionSpec": "TurboQuant packed K/V slots: no layout is defined for its packed page",
    "AscendIndexerKPoolTailSpec": (
        "GLM-5-next's indexer kpool tail (vllm-ascend 0.30): a per-request circular fp32 tail inside a "
        "page-strided buffer, not paged blocks"
    ),
    "AscendCircularBufferSpec": "DeepSeek V4.1's ring buffer (vllm-ascend 0.30, A5): a per-request ring, not paged blocks",
}

#: Classes that are not a layer's spec (wrappers and abstract bases).
NOT_LAYER_SPECS: frozenset[str] = frozenset({"KVCacheSpec", "AttentionSpec", "UniformTypeKVCacheSpecs"})

__all__ = [
    "BSHAttentionStrategy",
    "BUILTIN_STRATEGIES",
    "C8MXFPStrategy",
    "DSMLAStrategy",
    "FAQuantMLAStrategy",
    "Field",
    "NOT_LAYER_SPECS",
    "REFUSED_SPEC_CLASSES",
    "FullAttentionStrategy",
    "HiddenStateStrategy",
    "KVCacheStrategy",
    "LayoutFamily",
    "MLAStrategy",
    "MambaStrategy",
    "ModelDims",
    "PagePart",
    "QuantAttentionStrategy",
    "SparseMLAC8Strategy",
    "SFAIndexerStrategy",
    "SFAPackedStrategy",
    "SparseMLAStrategy",
]
