"""The GPU path of chapter 07: Qwen3-4B and DeepSpec's released drafters (loading), the paper's
evaluation protocol (measure), memory and costs, the setup checked before any weight is read
(preflight), the released checkpoints' layouts (released_config, checkpoints), the evaluation sets, and
the headless entry point `python -m dspark_lite.harness.gpu`. It may import the toy world and
serving rooms.
"""
