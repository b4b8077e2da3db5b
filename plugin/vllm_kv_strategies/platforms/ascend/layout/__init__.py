"""Layouts the plugin owns: how a runner's raw buffers hold the strategies'
page parts. Upstream vLLM lays out every kind itself (the plugin calls it);
vllm-ascend's layout is the plugin's, in :mod:`.buffers`. Layout code never
imports adapters or patches anything."""
