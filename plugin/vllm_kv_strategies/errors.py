"""Errors raised by vllm-kv-strategies. All derive from :class:`KVStrategiesError`.

In ``KV_STRATEGIES=auto`` a configuration the plugin cannot lay out leaves the
runner stock with one warning, whatever the error; only a
:class:`StockWouldFailError` stops vLLM in every mode, because the plugin has
proven that stock would corrupt the KV cache or fail on it too.
"""


class KVStrategiesError(RuntimeError):
    """Base class of the plugin's errors."""


class UnsupportedSpecError(KVStrategiesError, TypeError):
    """No registered strategy handles a layer's KV cache spec type."""


class KVCacheLayoutError(KVStrategiesError, ValueError):
    """A KV cache config cannot be laid out: sizes, coverage or sharing are wrong."""


class BeyondConfigError(KVCacheLayoutError):
    """A layout would allocate more bytes than the ``KVCacheTensor`` s of the
    config hold (vLLM sized ``num_blocks`` to fit those bytes in memory):
    refused before anything is allocated."""


class StockWouldFailError(KVCacheLayoutError):
    """The config is one stock would also fail on or corrupt: raised in every
    mode, before anything is allocated, instead of falling back."""


class StockWouldCorruptError(StockWouldFailError):
    """Two layers would alias one byte under different block indices (one
    block's writes would land in another block of another layer)."""


class ModelLayerMismatchError(StockWouldFailError):
    """The KV cache config names layers the model (this pipeline stage) does
    not have; stock fails on them after allocating."""


class KVCacheAllocationError(KVStrategiesError, MemoryError):
    """Allocating a KV cache buffer failed; nothing was bound to the model."""


class UnscaledBudgetError(StockWouldFailError):
    """vllm-ascend 0.30: the worker's KV cache budget was left unscaled for
    the plugin's overlay of KV cache groups, which it then cannot build; stock's
    private per-layer buffers would need several times the budget, so nothing
    falls back to them."""


class KVBudgetExceededError(StockWouldFailError):
    """The bytes about to be allocated for the KV cache exceed the budget the
    worker measured before its budget step (or ``--kv-cache-memory-bytes``):
    raised in every mode, before anything is allocated, whichever path
    (the plugin's layout or stock's build) was about to allocate."""


class NothingToBuildError(KVStrategiesError):
    """The KV cache config names no layer for the strategies to build (an
    empty config, or one whose every layer is the runner's own): the replaced
    function takes it as it is, in every mode, with nothing logged."""


def missing_input(exc: BaseException) -> str | None:
    """What an input lacks, where ``exc`` is an ``AttributeError`` raised on an
    object the plugin was handed (a runner, a config, a spec: anything not of
    this package), else None. The plugin reads more of its inputs than the
    function it replaces does; where one of those reads finds nothing, stock
    builds in every mode (one warning names it), since stock would not have
    asked (``KV_STRATEGIES=on`` included)."""
    if not isinstance(exc, AttributeError) or exc.name is None:
        return None
    owner = getattr(exc, "obj", None)  # None too: an attribute of None is a default of the plugin's own
    if owner is None or type(owner).__module__.split(".")[0] == __name__.split(".")[0]:
        return None
    return f"{type(owner).__qualname__} {exc.name!r} (which the replaced function does not read)"
