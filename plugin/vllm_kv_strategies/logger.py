"""The plugin's logger: a child of vLLM's ``vllm`` logger.

vLLM configures handlers and format on the ``vllm`` logger only (it does not
propagate to the root logger), so a child named ``vllm.kv_strategies`` prints
in vLLM's style without importing vLLM here.
"""

import logging

logger = logging.getLogger("vllm.kv_strategies")

#: Every line users may grep for starts with this.
PREFIX = "kv_strategies:"
