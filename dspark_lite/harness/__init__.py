"""The harness: everything it takes to measure the method in `dspark_lite`, none of it DSpark.

In rooms by concern, each a sub-package, and each room imports only the rooms below it:

  result_files, hub   the base every room may import: results folders, provenance and files,
                      paths as a page prints them; the hub's own progress bars hidden
  toy                 the toy world: corpus and samplers, tokenizer, target, profiles, the
                      trained-artifact cache and zoo, reply generation, evaluation, the
                      collision study and the regime table (chapters 01-05)
  serving             step timing, cost profiling, batched verification, the serving simulator,
                      the wall-clock race, the files the serving engines read, the scheduler's
                      studies (chapters 02, 04, 06, 06b)
  gpu                 chapter 07: Qwen3-4B and DeepSpec's released drafters, the paper's protocol,
                      memory and costs, the setup checks, the released layouts, the evaluation
                      sets, and `python -m dspark_lite.harness.gpu`; may import toy and serving
  book                the book's face: results on the page, verdict wording, plots, interactive
                      figures, the token stream; may import every room

It imports the method; the method never imports it (tests/test_layers.py checks both directions,
the rooms' order and the absence of import circles, with `ast`).
"""
