"""The toy world's corpus: three seeded domains of prompt/reply pairs (chapter 01; chapter 03 turns its
knobs): the generator, the JSONL files and their digest.

* math: word problems with worked, computed, step-by-step answers. Once the problem is
  stated the answer path is nearly determined; the arithmetic results are the hard tokens.
* code: small Python functions with a docstring and computed asserts, with variety in
  names and implementation style.
* chat: open-ended helpful replies with genuine branching: equally good phrasings
  ("Of course" / "No problem"), dependencies that skip a word ("happy ... help",
  "glad ... assist", where the verb depends on the adjective two tokens back) and spans of
  high entropy (which tips, in which order) that no drafter can guess.

The entropy of each domain is set by `knobs.CorpusKnobs`; the samplers are in `samplers`. Randomness comes only from
`random.Random.random()`, whose stream is fixed across Python versions and machines, so the
same seed gives the same bytes everywhere (a test pins a hash).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import datasets

from .knobs import CorpusKnobs, Rng
from .samplers import SAMPLERS

DOMAINS: tuple[str, ...] = ("math", "code", "chat")
SPLITS: tuple[str, ...] = ("train", "validation", "eval")


# --------------------------------------------------------------------------------------
def check_domain(domain: str) -> str:
    """Return domain, or raise a ValueError that lists the known ones."""
    if domain not in SAMPLERS:
        raise ValueError(f"unknown domain {domain!r}; expected one of {list(DOMAINS)}")
    return domain


def generate_records(domain: str, split: str, n: int, seed: int, knobs: CorpusKnobs) -> list[dict[str, str]]:
    """n records {"domain", "prompt", "reply"} of one domain and split, from a seed."""
    check_domain(domain)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    rng = Rng(f"{seed}/{domain}/{split}")
    sampler = SAMPLERS[domain]
    return [dict(zip(("domain", "prompt", "reply"), (domain, *sampler(rng, knobs)))) for _ in range(n)]


def write_corpus(folder: Path, sizes: dict[str, int], seed: int, knobs: CorpusKnobs) -> list[Path]:
    """Write <domain>_<split>.jsonl for every domain and split; sizes maps split -> count."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for domain in DOMAINS:
        for split in SPLITS:
            path = folder / f"{domain}_{split}.jsonl"
            records = generate_records(domain, split, sizes[split], seed, knobs)
            path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
            paths.append(path)
    (folder / "knobs.json").write_text(json.dumps({"seed": seed, "sizes": sizes, "knobs": asdict(knobs)}, indent=1))
    return paths


def load_split(folder: Path, split: str, domains: Sequence[str] = DOMAINS) -> datasets.Dataset:
    """One split of the written corpus as a `datasets.Dataset` (all requested domains)."""
    files = [str(Path(folder) / f"{check_domain(d)}_{split}.jsonl") for d in domains]
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a few thousand lines of JSON need no progress bar
    try:
        return datasets.load_dataset("json", data_files=files, split="train", cache_dir=str(Path(folder) / ".hf"))
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()


def corpus_digest(folder: Path) -> str:
    """sha256 over the JSONL files, in a fixed order: the same seed gives the same digest."""
    h = hashlib.sha256()
    for domain in DOMAINS:
        for split in SPLITS:
            h.update((Path(folder) / f"{domain}_{split}.jsonl").read_bytes())
    return h.hexdigest()
