"""Planning a deployment before it starts (``python -m vllm_kv_strategies plan``):
the model built on the meta device from its ``config.json``
(:mod:`.model`), vLLM's own planner on it (:mod:`.predict`), the table and
JSON (:mod:`.render`), the command (:mod:`.cli`). Imports vLLM only inside
functions.
"""
