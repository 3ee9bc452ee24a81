"""The toy world as one object: corpus, tokenizer and trained target, cached (chapter 01).

`load_toy_world(profile, device=device)` builds what the artifact cache lacks and loads the rest,
so every notebook runs standalone and a full book run trains each model once. Models train and
live on the device they are given (a GPU trains chapter 01's target in a minute or two); the cache
keys do not name the device, so a model trained on one device loads on any other.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
import torch
from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

from . import cache, target, tokenizer
from . import corpus
from .knobs import CorpusKnobs
from ..hub import quiet_hub_bars
from ...resume import Checkpointer
from .profiles import Profile, TargetConfig, get_profile
from .target import TrainHistory


@dataclass
class ToyWorld:
    """The built toy world (corpus, tokenizer, trained target); later notebooks take their target from here."""

    profile: Profile
    seed: int
    knobs: CorpusKnobs
    corpus_dir: Path
    tokenizer: PreTrainedTokenizerFast
    target: Qwen3ForCausalLM
    history: TrainHistory
    target_dir: Path
    device: torch.device = torch.device("cpu")

    def split(self, split: str, domains: tuple[str, ...] = corpus.DOMAINS) -> datasets.Dataset:
        """A corpus split ("train", "validation", "eval") as a datasets.Dataset."""
        return corpus.load_split(self.corpus_dir, split, domains)

    def eval_prompts(self, domain: str) -> list[str]:
        """The held-out evaluation prompts of one domain."""
        return list(self.split("eval", (corpus.check_domain(domain),))["prompt"])

    def encode_prompt(self, prompt: str) -> torch.Tensor:
        """A user prompt rendered with the chat template, as a 1-D LongTensor."""
        if not prompt.strip():
            raise ValueError("the prompt is empty")
        return torch.tensor(self.tokenizer(tokenizer.format_chat(prompt))["input_ids"])


def _corpus_config(profile: Profile, seed: int, knobs: CorpusKnobs) -> dict:
    return {"sizes": asdict(profile.corpus), "seed": seed, "knobs": asdict(knobs)}


def _sizes(profile: Profile) -> dict[str, int]:
    return {"train": profile.corpus.train, "validation": profile.corpus.validation, "eval": profile.corpus.eval_prompts}


def build_corpus(profile: Profile, seed: int, knobs: CorpusKnobs) -> Path:
    """The corpus JSONL folder for this profile, seed and knobs (cached)."""
    return cache.load_or_build(
        "corpus", _corpus_config(profile, seed, knobs),
        build=lambda folder: corpus.write_corpus(folder, _sizes(profile), seed, knobs),
        load=lambda folder: folder)


def conversations(corpus_dir: Path, split: str) -> list[str]:
    """Every record of a split rendered as a one-turn conversation string."""
    ds = corpus.load_split(corpus_dir, split)
    return [tokenizer.format_chat(p, r) for p, r in zip(ds["prompt"], ds["reply"])]


def build_tokenizer(profile: Profile, seed: int, knobs: CorpusKnobs, corpus_dir: Path) -> PreTrainedTokenizerFast:
    """The BPE tokenizer trained on the train split (cached)."""
    config = {**_corpus_config(profile, seed, knobs), "vocab_size": profile.target.vocab_size}
    return cache.load_or_build(
        "tokenizer", config,
        build=lambda folder: tokenizer.train_tokenizer(
            conversations(corpus_dir, "train"), profile.target.vocab_size).save_pretrained(str(folder)),
        load=tokenizer.load_tokenizer)


def _train_lm(folder: Path, cfg: TargetConfig, seed: int, corpus_dir: Path, tok: PreTrainedTokenizerFast,
              desc: str, device: torch.device) -> None:
    encode = lambda split: target.pack([tok(t)["input_ids"] for t in conversations(corpus_dir, split)], cfg.seq_len)
    model = target.build_target(cfg, tok, seed=seed).to(device)
    history = target.train_causal_lm(model, encode("train"), encode("validation"), cfg, seed=seed, desc=desc,
                                     checkpoint=Checkpointer(folder))
    with quiet_hub_bars():
        model.save_pretrained(str(folder))
        tok.save_pretrained(str(folder))
    (folder / "history.json").write_text(json.dumps(asdict(history)))


def _load_lm(folder: Path, device: torch.device) -> tuple[Qwen3ForCausalLM, TrainHistory]:
    with quiet_hub_bars():
        model = Qwen3ForCausalLM.from_pretrained(str(folder), attn_implementation="sdpa")
    model.to(device).eval()
    history = TrainHistory(**json.loads((folder / "history.json").read_text()))
    return model, history


def load_toy_world(profile: str | Profile = "full", seed: int = 0, knobs: CorpusKnobs | None = None,
                   device: torch.device | str = "cpu") -> ToyWorld:
    """Build (or load from the cache) the corpus, tokenizer and trained target of a profile; the
    target trains on (or is loaded onto) `device`."""
    profile = get_profile(profile) if isinstance(profile, str) else profile
    knobs = knobs or CorpusKnobs()
    device = torch.device(device)
    corpus_dir = build_corpus(profile, seed, knobs)
    tok = build_tokenizer(profile, seed, knobs, corpus_dir)
    model, history, folder = _cached_lm("target", profile.target, profile, seed, knobs, corpus_dir, tok, device)
    return ToyWorld(profile, seed, knobs, corpus_dir, tok, model, history, folder, device)


def _cached_lm(kind: str, cfg: TargetConfig, profile: Profile, seed: int, knobs: CorpusKnobs,
               corpus_dir: Path, tok: PreTrainedTokenizerFast, device: torch.device
               ) -> tuple[Qwen3ForCausalLM, TrainHistory, Path]:
    config = {**_corpus_config(profile, seed, knobs), kind: asdict(cfg)}

    def load(folder: Path):
        return (*_load_lm(folder, device), folder)

    return cache.load_or_build(
        kind, config, build=lambda folder: _train_lm(folder, cfg, seed, corpus_dir, tok, f"train {kind}", device),
        load=load)


def load_classic_drafter_lm(world: ToyWorld) -> tuple[Qwen3ForCausalLM, TrainHistory]:
    """The 2023-style draft model: a small Qwen3 LM trained on the same corpus, on the world's device
    (cached)."""
    model, history, _ = _cached_lm("draft_lm", world.profile.draft_lm, world.profile, world.seed, world.knobs,
                                   world.corpus_dir, world.tokenizer, world.device)
    return model, history
