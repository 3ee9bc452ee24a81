"""The harness: everything it takes to measure the method in `dspark_lite`, none of it DSpark.

The toy world (corpus, tokenizer, target, profiles, the trained-model cache and zoo), the
evaluation protocol, cost profiling, batched verification and the serving simulator, the wall-
clock race, results files, interactive figures and plots, checkpoint loading, evaluation sets and the GPU
harness of chapter 07. It imports the method; the method never imports it
(tests/test_layers.py checks both, with `ast`).
"""
