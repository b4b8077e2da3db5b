"""Errors raised by vllm-kv-strategies. All derive from :class:`KVStrategiesError`."""


class KVStrategiesError(RuntimeError):
    """Base class of the plugin's errors."""


class UnsupportedSpecError(KVStrategiesError, TypeError):
    """No registered strategy handles a layer's KV cache spec type."""


class KVCacheLayoutError(KVStrategiesError, ValueError):
    """A KV cache config cannot be laid out: sizes, coverage or sharing are wrong."""


class KVCacheAllocationError(KVStrategiesError, MemoryError):
    """Allocating a KV cache buffer failed; nothing was bound to the model."""


class IncompatibleRunnerError(KVStrategiesError):
    """The model runner lacks state the adapter reads (an unsupported release)."""
