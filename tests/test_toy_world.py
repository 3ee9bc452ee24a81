"""The toy world of chapter 01: corpus, tokenizer, target, cache."""
from __future__ import annotations

from dataclasses import replace
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from dspark_lite.harness.toy import cache, tokenizer as toks
from dspark_lite.harness.toy import corpus, samplers
from dspark_lite.harness.toy.knobs import CorpusKnobs, Rng, NAMES, PRONOUN
from dspark_lite.harness.toy.profiles import get_profile
from dspark_lite.harness.toy.target import build_target, pack, reply_token_stats, train_causal_lm
from dspark_lite.harness.toy.world import load_toy_world

SIZES = {"train": 3, "validation": 2, "eval": 2}
# sha256 of the JSONL files for seed 0, default knobs, SIZES. If the generator changes on
# purpose, update it here; it must never change with the machine or the Python version.
PINNED_DIGEST = "0f772fff910290b5eae18cb540785ee2605178f70810ae29209ee8c3ca60a0bf"
# The same with chat_skew = 0: the bytes of the generator before the knob existed (uniform chat choices).
UNIFORM_CHAT_DIGEST = "5c7cf8ac1b6dce5cabdb8cda8f5f0f970e541dbc599ca4a8f5578bb25f39e7a1"


def test_corpus_bytes_are_pinned(tmp_path: Path) -> None:
    corpus.write_corpus(tmp_path, SIZES, seed=0, knobs=CorpusKnobs())
    assert corpus.corpus_digest(tmp_path) == PINNED_DIGEST
    corpus.write_corpus(tmp_path, SIZES, seed=0, knobs=CorpusKnobs(chat_skew=0.0))
    assert corpus.corpus_digest(tmp_path) == UNIFORM_CHAT_DIGEST


def test_chat_choices_follow_the_prompts_skew() -> None:
    """Each prompt ranks the openers its own way, and the generated openers follow the weights
    1 / r ** chat_skew of that ranking (chi-square against the exact weights)."""
    knobs = CorpusKnobs(chat_skew=1.0)
    records = corpus.generate_records("chat", "train", 4000, 0, knobs)
    prompts = sorted({r["prompt"] for r in records})
    rankings = set()
    for prompt in prompts[:6]:
        topic = next(i for i, t in enumerate(samplers.CHAT_TOPICS) if t[0] in prompt)
        ask = next(i for i, a in enumerate(samplers.ASKS) if a.format(req=samplers.CHAT_TOPICS[topic][0]) == prompt)
        weights = samplers.PromptSkew(Rng(0), f"{topic}/{ask}", 1.0).weights(5, "opener")
        assert sorted(weights, reverse=True) == pytest.approx([1 / r for r in range(1, 6)])
        rankings.add(tuple(weights))
        openers = [r["reply"].split("!")[0] + "!" for r in records if r["prompt"] == prompt]
        counts = [sum(o == opener for o in openers) for opener in samplers.OPENERS]
        expected = [len(openers) * w / sum(weights) for w in weights]
        chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected))
        assert chi2 < 18.5, (prompt, counts, expected)  # chi-square, 4 degrees of freedom, p = 0.001
    assert len(rankings) > 1, "different prompts must skew the choices differently"
    uniform = samplers.PromptSkew(Rng(0), "0/0", 0.0).weights(5, "opener")
    assert uniform == [1.0] * 5
    with pytest.raises(ValueError, match="chat_skew"):
        CorpusKnobs(chat_skew=-1.0)


def test_corpus_is_seeded() -> None:
    knobs = CorpusKnobs()
    a = corpus.generate_records("math", "train", 20, 1, knobs)
    assert a == corpus.generate_records("math", "train", 20, 1, knobs)
    assert a != corpus.generate_records("math", "train", 20, 2, knobs)
    assert a != corpus.generate_records("math", "validation", 20, 1, knobs)


def test_math_answers_are_computed() -> None:
    for record in corpus.generate_records("math", "train", 200, 0, CorpusKnobs()):
        for line in record["reply"].splitlines():
            if "=" in line:  # every "a op b (op c) = d" in a solution is true arithmetic
                lhs, rhs = line.split("=")[-2:]
                expression = re.search(r"\d+(?: [-x+/] \d+)+\s*$", lhs).group()
                value = int(rhs.split()[0].rstrip(".,"))
                assert eval(expression.replace("x", "*").replace("/", "//")) == value, line


def test_code_asserts_hold() -> None:
    for record in corpus.generate_records("code", "train", 200, 0, CorpusKnobs()):
        exec(compile(record["reply"], "<corpus>", "exec"), {})  # raises if a computed assert is wrong


def test_chat_skip_dependency_knob() -> None:
    verbs = dict(samplers.AGREEMENT)
    def agreement_rate(p: float) -> float:
        recs = corpus.generate_records("chat", "train", 300, 0, CorpusKnobs(chat_skip_dependency=p))
        hits = [verbs[r["reply"].split(" to ")[0].split()[-1]] in r["reply"].split(" to ")[1] for r in recs]
        return sum(hits) / len(hits)
    assert agreement_rate(1.0) == 1.0
    assert agreement_rate(0.0) < 0.5


def test_chat_remarks_knob_and_their_skip_word_agreement() -> None:
    """The opening line and every tip end with a three-clause remark at chat_remarks = 1, none at
    0; each clause's last word agrees with its verb two words back (chat_skip_dependency = 1)."""
    words = dict(samplers.REMARKS)
    def clauses(rate: float) -> list[list[str]]:
        recs = corpus.generate_records("chat", "train", 100, 0, CorpusKnobs(chat_remarks=rate))
        remarks = [line.split(" It ")[-1].rstrip(".") for r in recs for line in r["reply"].split("\n")
                   if " It " in line]
        return [c.split() for remark in remarks for c in remark.replace(" and ", ", ").split(", ")]
    found = clauses(1.0)
    assert len(found) == 3 * 100 * (CorpusKnobs().chat_tips + 1)
    assert all(words[verb] == word and middle == "you" for verb, middle, word in found)
    assert clauses(0.0) == []


def test_unknown_domain_and_bad_knobs_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown domain 'poetry'.*math"):
        corpus.generate_records("poetry", "train", 1, 0, CorpusKnobs())
    with pytest.raises(ValueError, match="unknown split"):
        corpus.generate_records("math", "test", 1, 0, CorpusKnobs())
    with pytest.raises(ValueError, match="chat_branching"):
        CorpusKnobs(chat_branching=9)
    with pytest.raises(ValueError, match="chat_remarks"):
        CorpusKnobs(chat_remarks=1.5)
    with pytest.raises(ValueError, match="probability"):
        CorpusKnobs(code_style_entropy=1.5)
    with pytest.raises(ValueError, match="math_names"):
        CorpusKnobs(math_names=1)


def test_math_names_knob_limits_the_names_and_mixes_pronouns() -> None:
    pool = samplers.math_names(CorpusKnobs(math_names=4))
    assert {PRONOUN[n] for n in pool} == {"she", "he"}
    records = corpus.generate_records("math", "train", 100, 0, CorpusKnobs(math_names=4))
    used = {word for r in records for word in r["prompt"].replace(".", " ").split() if word in NAMES}
    assert used == set(pool)


def test_math_explain_knob_adds_word_only_lines_and_keeps_the_arithmetic() -> None:
    def lines(explain: float) -> list[list[str]]:
        records = corpus.generate_records("math", "train", 100, 0, CorpusKnobs(math_explain=explain))
        return [r["reply"].splitlines() for r in records]

    terse, explained = lines(0.0), lines(1.0)
    assert all(reply[0] != "Let's solve this step by step." for reply in terse)
    assert all(reply[0] == "Let's solve this step by step." for reply in explained)
    words_only = [line for reply in explained for line in reply if not any(ch.isdigit() for ch in line)]
    assert len(words_only) >= 3 * len(explained)  # the opener and at least two step sentences each
    count = lambda replies: sum(len(reply) for reply in replies)
    assert count(explained) - count(terse) == len(words_only)  # the computed lines are unchanged in number
    with pytest.raises(ValueError, match="math_explain"):
        CorpusKnobs(math_explain=2.0)


def _texts() -> list[str]:
    recs = [r for d in corpus.DOMAINS for r in corpus.generate_records(d, "train", 60, 0, CorpusKnobs())]
    return [toks.format_chat(r["prompt"], r["reply"]) for r in recs]


def test_tokenizer_special_tokens_template_and_roundtrip(tmp_path: Path) -> None:
    tok = toks.train_tokenizer(_texts(), 400)
    assert len(tok) <= 400
    for special in toks.SPECIAL_TOKENS:
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    assert tok.mask_token == toks.MASK and tok.eos_token == toks.EOS and tok.pad_token == toks.PAD
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], tokenize=False)
    assert rendered == toks.format_chat("hi", "hello")
    text = _texts()[5]
    assert tok.decode(tok(text)["input_ids"]) == text
    tok.save_pretrained(str(tmp_path))
    again = toks.load_tokenizer(tmp_path)
    assert again(text)["input_ids"] == tok(text)["input_ids"]


def test_vocab_too_small_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="too small.*special tokens"):
        toks.train_tokenizer(_texts(), 100)


def test_target_trains_and_reports_stats() -> None:
    tok = toks.train_tokenizer(_texts(), 400)
    cfg = replace(get_profile("smoke").target, vocab_size=400, steps=12, batch_size=4, seq_len=64)
    model = build_target(cfg, tok)
    assert model.config.vocab_size == len(tok)
    rows = pack([tok(t)["input_ids"] for t in _texts()], cfg.seq_len)
    history = train_causal_lm(model, rows, rows[:4], cfg, eval_every=6)
    assert history.val_steps == [6, 12] and len(history.train_loss) == 12
    assert history.train_loss[-1] < history.train_loss[0]
    stats = reply_token_stats(model, tok, ["How do I bake a loaf of bread?"] * 2, ["Of course!", "No problem!"])
    assert 0 < stats["entropy"] < torch.log(torch.tensor(float(len(tok)))).item() + 1e-4
    assert stats["perplexity"] > 1


def test_target_larger_than_config_vocab_is_refused() -> None:
    tok = toks.train_tokenizer(_texts(), 400)
    with pytest.raises(ValueError, match="tokenizer has"):
        build_target(replace(get_profile("smoke").target, vocab_size=300), tok)


def _write(folder: Path) -> None:
    (folder / "weights.bin").write_bytes(b"abc" * 100)


def test_cache_builds_once_then_loads(tmp_path: Path) -> None:
    calls = []
    def build(folder: Path) -> None:
        calls.append(folder)
        _write(folder)
    load = lambda folder: (folder / "weights.bin").read_bytes()
    assert cache.load_or_build("demo", {"a": 1}, build, load, root=tmp_path) == b"abc" * 100
    assert cache.load_or_build("demo", {"a": 1}, build, load, root=tmp_path) == b"abc" * 100
    assert len(calls) == 1
    cache.load_or_build("demo", {"a": 2}, build, load, root=tmp_path)
    assert len(calls) == 2, "a different config is a different artifact"


def test_cache_contains_only_complete_artifacts(tmp_path: Path) -> None:
    load = lambda folder: (folder / "weights.bin").read_bytes()
    assert not cache.contains("demo", {"a": 1}, root=tmp_path, builder=__name__)
    cache.load_or_build("demo", {"a": 1}, _write, load, root=tmp_path)
    assert cache.contains("demo", {"a": 1}, root=tmp_path, builder=__name__) and not cache.contains("demo", {"a": 2}, root=tmp_path, builder=__name__)
    (cache.artifact_folder("demo", {"a": 1}, root=tmp_path, builder=__name__) / "weights.bin").write_bytes(b"ab")
    assert not cache.contains("demo", {"a": 1}, root=tmp_path, builder=__name__), "a damaged folder is not a cached artifact"


@pytest.mark.parametrize("damage", ["truncate", "delete", "manifest"])
def test_corrupt_cache_is_reported_with_path_and_rebuilt(tmp_path: Path, damage: str) -> None:
    load = lambda folder: (folder / "weights.bin").read_bytes()
    cache.load_or_build("demo", {"a": 1}, _write, load, root=tmp_path)
    folder = next(tmp_path.glob("demo-*"))
    if damage == "truncate":
        (folder / "weights.bin").write_bytes(b"ab")
    elif damage == "delete":
        (folder / "weights.bin").unlink()
    else:
        (folder / cache.MANIFEST).unlink()
    with pytest.warns(UserWarning, match=str(folder)):
        assert cache.load_or_build("demo", {"a": 1}, _write, load, root=tmp_path) == b"abc" * 100
    cache.verify_manifest(folder)  # healthy again


def test_unloadable_cache_is_rebuilt(tmp_path: Path) -> None:
    state = {"fail": True}
    def load(folder: Path) -> bytes:
        if state.pop("fail", False):
            raise OSError("simulated unreadable weights")
        return (folder / "weights.bin").read_bytes()
    cache.load_or_build("demo", {"a": 1}, _write, lambda f: None, root=tmp_path)
    with pytest.warns(UserWarning, match="simulated unreadable weights"):
        assert cache.load_or_build("demo", {"a": 1}, _write, load, root=tmp_path) == b"abc" * 100


def test_smoke_world_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    again = load_toy_world("smoke", seed=0)  # second call loads from the cache
    ids = world.encode_prompt(world.eval_prompts("chat")[0])
    with torch.no_grad():
        assert torch.equal(world.target(input_ids=ids[None]).logits, again.target(input_ids=ids[None]).logits)
    assert len(list(tmp_path.glob("target-*"))) == 1
    with pytest.raises(ValueError, match="empty"):
        world.encode_prompt("   ")
    # Issue 31, item 1: a cached target loads onto the device asked for ("meta": no GPU here).
    elsewhere = load_toy_world("smoke", seed=0, device="meta")
    assert elsewhere.device.type == "meta" and next(elsewhere.target.parameters()).device.type == "meta"
    assert next(world.target.parameters()).device.type == "cpu" and world.device.type == "cpu"


def test_the_target_trains_on_the_device_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, item 1: `load_toy_world(device=...)` builds the target there and trains it there (the
    classic draft model too), not on the CPU with a move afterwards. "meta" stands in for a GPU: the
    training is stopped as it starts, where the model's device is recorded."""
    from dspark_lite.harness.toy import target as toy_target, world as toy_world

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))

    class Started(Exception):
        pass

    seen = []

    def spy(model, *args, **kwargs):
        seen.append(next(model.parameters()).device.type)
        raise Started

    monkeypatch.setattr(toy_target, "train_causal_lm", spy)
    with pytest.raises(Started):
        load_toy_world("smoke", seed=0, device="meta")
    assert seen == ["meta"]
    monkeypatch.undo()
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    cpu_world = load_toy_world("smoke", seed=0)
    monkeypatch.setattr(toy_target, "train_causal_lm", spy)
    with pytest.raises(Started):
        toy_world.load_classic_drafter_lm(toy_world.ToyWorld(**{**vars(cpu_world), "device": torch.device("meta")}))
    assert seen == ["meta", "meta"]


def test_latency_curve_covers_every_query_count_and_rejects_bad_input() -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from dspark_lite.harness.serving.costs import forward_latency_curve

    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=1, head_dim=16, intermediate_size=64))
    curve = forward_latency_curve(model, 16, [1, 2, 4, 8], repeats=2, warmup=1)
    assert sorted(curve) == [1, 2, 4, 8] and all(t > 0 for t in curve.values())
    with pytest.raises(ValueError, match="query counts"):
        forward_latency_curve(model, 16, [0, 2])
    with pytest.raises(ValueError, match="repeats"):
        forward_latency_curve(model, 16, [1], repeats=0)


WORLD, ZOO = "dspark_lite.harness.toy.world", "dspark_lite.harness.toy.zoo"  # the two builders of the book


def _package_copy(tmp_path: Path) -> Path:
    import shutil

    package = tmp_path / "dspark_lite"
    shutil.copytree(cache.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    return package


def _edited(module: Path, keys: Callable[[], dict[str, str]]) -> dict[str, str]:
    """`keys()` with `module` edited (a comment appended), then the file restored."""
    original = module.read_bytes()
    module.write_bytes(original + b"\n# an edit\n")
    try:
        return keys()
    finally:
        module.write_bytes(original)


def test_a_key_hashes_its_builders_import_closure_and_nothing_else(tmp_path: Path) -> None:
    """The target's key (built by `world`) and the drafters' (built by `zoo`) change with every
    module each builder imports, at any depth, and with nothing else: the book's pages, the GPU
    path, the serving room and the calibration are outside both, and `dspark.py` outside the
    target's."""
    package = _package_copy(tmp_path)
    keys = lambda: {b: cache.builder_hash(b, package) for b in (WORLD, ZOO)}
    before = keys()
    assert before == {b: cache.builder_hash(b) for b in (WORLD, ZOO)}
    closures = {b: set(cache.import_closure(b, package)) for b in (WORLD, ZOO)}
    assert closures[WORLD] < closures[ZOO]  # a drafter's world is in its key (the target's folder name), and its code
    for module in sorted(package.rglob("*.py")):
        name = ".".join(module.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        after = _edited(module, keys)
        for builder in (WORLD, ZOO):
            assert (after[builder] != before[builder]) == (name in closures[builder]), (name, builder)
    assert keys() == before
    rooms = {b: {n.split(".")[2] for n in closures[b] if n.startswith("dspark_lite.harness.")} for b in (WORLD, ZOO)}
    assert rooms[WORLD] == rooms[ZOO] == {"hub", "toy"}  # no book, gpu or serving module shapes an artifact
    assert "dspark_lite.dspark" in closures[ZOO] and "dspark_lite.dspark" not in closures[WORLD]
    assert "dspark_lite.calibration" not in closures[ZOO]
    assert len(closures[ZOO]) > 25  # read from the imports, not a hand-kept list


def test_the_closure_follows_imports_inside_functions_and_the_packages_on_the_way(tmp_path: Path) -> None:
    """A lazy import inside a function, a relative `from .. import name` of a module and an
    absolute `import a.b.c` each bring their module into the closure, with the `__init__.py` of
    every package on the way; a name imported from a module is not a module."""
    package = _package_copy(tmp_path)
    world = package / "harness" / "toy" / "world.py"
    assert "dspark_lite.harness.book.plots" not in cache.import_closure(WORLD, package)
    world.write_text(world.read_text() + "\n\ndef _later():\n    from ..book import plots\n"
                     "    import dspark_lite.harness.serving.timing\n    from ...dspark import MarkovHead\n")
    closure = cache.import_closure(WORLD, package)
    for name in ("dspark_lite.harness.book.plots", "dspark_lite.harness.book", "dspark_lite.harness.serving",
                 "dspark_lite.harness.serving.timing", "dspark_lite.dspark"):
        assert name in closure, name
    assert closure["dspark_lite.harness.book"] == package / "harness" / "book" / "__init__.py"
    assert not any(name.endswith("MarkovHead") for name in closure)
    with pytest.raises(ValueError, match="not a module of dspark_lite"):
        cache.import_closure("dspark_lite.harness.toy.no_such_module", package)


def test_a_builder_outside_the_package_is_keyed_by_its_own_file_and_what_it_imports() -> None:
    closure = cache.import_closure(__name__)
    assert closure[__name__] == Path(__file__).resolve()
    assert "dspark_lite.harness.toy.cache" in closure and "dspark_lite.harness.toy.zoo" in closure  # imported lazily
    assert not any(name.startswith("dspark_lite.harness.book") for name in closure)


def test_rollouts_in_worker_processes_give_the_numbers_of_one_process(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rollout draws from its own seeded generator, so generating them in two forked processes
    gives exactly the rollouts one process generates, in the same order; bad worker counts are refused."""
    from dspark_lite.harness.toy import evaluation, zoo

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    drafter = zoo.build_dflash(world, world.profile.drafter)  # untrained: rounds of every length
    runs = [evaluation.measure_acceptance(world, drafter, 3, 2, 12, samples=2, keep_record=True, workers=w)
            for w in (1, 2)]
    for domain in runs[0]:
        one, two = runs[0][domain], runs[1][domain]
        assert one.per_generation == two.per_generation and one.tau == two.tau, domain
        assert np.array_equal(one.record.accepted, two.record.accepted), domain
        assert len(one.per_generation) == 4 and one.rounds > 4, domain
    other_seed = evaluation.measure_acceptance(world, drafter, 3, 2, 12, samples=2, seed=1, workers=2)
    assert any(other_seed[d].per_generation != runs[0][d].per_generation for d in runs[0])
    with pytest.raises(ValueError, match="workers >= 1"):
        evaluation.measure_acceptance(world, drafter, 3, 2, 12, workers=0)


def test_drafters_trained_in_worker_processes_match_the_side_by_side_loop(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two kinds trained in two forked single-thread processes end with the weights and curves they
    get side by side in one loop here, whatever this process's thread count (the loop trains on one
    thread: `workers.one_thread`; two threads round a product's sums otherwise and the weights
    differ); both are cached, and the parent's one bar counted every step of both."""
    from dspark_lite import progress as bars
    from dspark_lite.harness.toy import evaluation, zoo

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "shared"))
    world = load_toy_world("smoke", seed=0)
    recipe = replace(world.profile.drafter, dspark_steps=world.profile.drafter.steps)  # one group of two kinds
    runs, shown = {}, []
    monkeypatch.setattr(zoo, "progress", lambda *args, **kwargs: shown.append(bars.progress(*args, **kwargs)) or shown[-1])
    for workers in (1, 2):
        monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / f"workers{workers}"))
        monkeypatch.setattr(zoo, "worker_processes", lambda device, w=workers: w)
        threads = torch.get_num_threads()
        torch.set_num_threads(2)  # what this machine's chapters run with
        try:
            runs[workers] = zoo.load_or_train_drafters(world, ["dflash", "dspark-markov"], recipe)
            assert torch.get_num_threads() == 2  # restored after the training
        finally:
            torch.set_num_threads(threads)
        assert all(cache.contains(*zoo._drafter_entry(world, kind, recipe, 0), builder=zoo.__name__) for kind in runs[workers])
        assert bars.RELAY is None and zoo._TRAINING is None  # nothing of the workers' state is left here
    steps = zoo.training_steps("dflash", recipe)
    assert steps == zoo.training_steps("dspark-markov", recipe)
    assert len(shown) == 1 and shown[0].total == shown[0].n == 2 * steps  # the workers' bar: every step of both
    for kind in ("dflash", "dspark-markov"):
        (one, one_history), (two, two_history) = runs[1][kind], runs[2][kind]
        assert one_history.loss == two_history.loss, kind
        for name, value in one.state_dict().items():
            assert torch.equal(value, two.state_dict()[name]), (kind, name)


def test_drafters_of_several_seeds_train_at_once_and_each_is_the_one_trained_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`load_or_train_seeds` trains every (kind, seed) in worker processes and caches each under
    its own seed: seed s is the drafter `load_or_train_drafter(..., seed=s)` finds, and two seeds
    differ. $DSPARK_SEED picks disjoint seed sets and bad values fail before any training."""
    from dspark_lite.harness.toy import zoo

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    monkeypatch.setattr(zoo, "worker_processes", lambda device: 2)
    monkeypatch.delenv(zoo.SEED_VAR, raising=False)
    seeds = zoo.drafter_seeds(world.profile)
    assert seeds == list(range(world.profile.drafter_seeds)) and len(seeds) >= 2
    runs = zoo.load_or_train_seeds(world, ["dflash"], seeds=seeds)
    assert list(runs) == ["dflash"] and len(runs["dflash"]) == len(seeds)
    for seed, (drafter, history) in zip(seeds, runs["dflash"]):
        alone, alone_history = zoo.load_or_train_drafter(world, "dflash", seed=seed)  # from the cache
        assert alone_history.loss == history.loss
        assert all(torch.equal(v, alone.state_dict()[k]) for k, v in drafter.state_dict().items())
    first, second = (run[0].state_dict() for run in runs["dflash"][:2])
    assert any(not torch.equal(first[k], second[k]) for k in first)
    monkeypatch.setenv(zoo.SEED_VAR, "1")
    assert set(zoo.drafter_seeds(world.profile)).isdisjoint(seeds)
    for bad in ("-1", "one", "1.5"):
        monkeypatch.setenv(zoo.SEED_VAR, bad)
        with pytest.raises(ValueError, match="DSPARK_SEED"):
            zoo.drafter_seeds(world.profile)
