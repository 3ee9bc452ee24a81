"""The toy world: the corpus and its domains, the tokenizer, the target and its training, the
profiles' sizes, the trained-artifact cache and model zoo, the evaluation protocol, the
collision study and the regime table (chapters 01-05). It imports the method and the harness's
base modules, nothing from the other rooms.
"""
