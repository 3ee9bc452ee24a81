"""The toy world's knobs (chapter 01; chapter 03 turns them to reach the paper's regime): each
domain's entropy as `CorpusKnobs`, the seeded random stream `Rng` every sampler draws from, and the
first names the math problems use, which bound one knob.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Sequence

SHE = ("Ava", "Chloe", "Emma", "Grace", "Isla", "Kira", "Maya", "Olivia", "Priya", "Rosa", "Tara",
       "Vera", "Ximena", "Zoe", "Bella", "Dina", "Elena", "Gemma", "Ivy", "Keiko", "Mila", "Nina")
HE = ("Ben", "Daniel", "Farid", "Hugo", "Jonah", "Liam", "Noah", "Quinn", "Sam", "Umar", "Wes",
      "Yusuf", "Aiden", "Carlos", "Felix", "Hassan", "Jack", "Leo")
# Alternating she/he, so that any prefix of the list mixes both pronouns.
NAMES = tuple(n for pair in zip(SHE, HE) for n in pair) + SHE[len(HE):]
PRONOUN = {**{name: "she" for name in SHE}, **{name: "he" for name in HE}}


@dataclass(frozen=True)
class CorpusKnobs:
    """The world's difficulty knobs, turned to reach the paper's regime.

    math_max_number: operands are drawn from 2..math_max_number (bigger = harder arithmetic).
    math_names: how many first names the problems draw from (more = more names to copy).
    math_phrase_entropy: probability that a solution step uses a non-canonical phrasing.
    math_explain: probability that a solution opens with "Let's solve this step by step." and
        that each computation is introduced by a sentence saying what it finds, as model
        solutions to GSM8K-style problems are written. The sentences restate words of the
        problem, so they dilute the computed numbers (0 gives terse, number-dense solutions).
    code_style_entropy: probability that a name or implementation style is non-canonical.
    chat_branching: how many equally good alternatives each chat phrase slot offers (1-5).
    chat_skip_dependency: probability that a skip-word agreement holds: the verb agrees with
        the adjective two words back ("happy to *help*"), a remark's last word with its verb
        ("It keeps you *motivated*").
    chat_tips: how many freely chosen tips a chat reply lists (the high-entropy spans).
    chat_slot_options: how many alternatives each free slot inside a tip offers (1-4).
    chat_remarks: probability that the opening line and each tip end with a remark ("It keeps you
        motivated, saves you time and helps you relax."): skip-word dependencies that a
        first-order (Markov) correction cannot see.
    chat_skew: how much the prompt skews every chat choice. Each choice point (opener, lead,
        ordinal, tip, slot, remark, closer) ranks its options in an order set by the prompt
        (its topic and phrasing) and draws option of rank r with weight 1 / r ** chat_skew:
        0 is uniform, 1 is Zipf's law, the shape of word-choice frequencies in real text. Real
        chat is open in this way: which phrasing comes next depends on the request, and a
        small drafter gets the skew wrong where a uniform choice costs it nothing.
    """

    math_max_number: int = 5
    math_names: int = 10
    math_phrase_entropy: float = 0.0
    math_explain: float = 1.0
    code_style_entropy: float = 0.1
    chat_branching: int = 5
    chat_skip_dependency: float = 1.0
    chat_tips: int = 5
    chat_slot_options: int = 4
    chat_remarks: float = 1.0
    chat_skew: float = 1.0

    def __post_init__(self) -> None:
        if self.math_max_number < 5:
            raise ValueError(f"math_max_number must be >= 5, got {self.math_max_number}")
        if not 2 <= self.math_names <= len(NAMES):
            raise ValueError(f"math_names must be in 2..{len(NAMES)}, got {self.math_names}")
        for name in ("math_phrase_entropy", "math_explain", "code_style_entropy", "chat_skip_dependency", "chat_remarks"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} is a probability in [0, 1], got {value}")
        if not 0.0 <= self.chat_skew <= 4.0:
            raise ValueError(f"chat_skew must be in [0, 4] (0 = uniform choices), got {self.chat_skew}")
        if not 1 <= self.chat_branching <= 5:
            raise ValueError(f"chat_branching must be in 1..5, got {self.chat_branching}")
        if not 1 <= self.chat_tips <= 5:
            raise ValueError(f"chat_tips must be in 1..5, got {self.chat_tips}")
        if not 1 <= self.chat_slot_options <= 4:
            raise ValueError(f"chat_slot_options must be in 1..4, got {self.chat_slot_options}")


class Rng:
    """A seeded generator that uses only `random()`, whose stream never changed across Pythons."""

    def __init__(self, seed: int | str):
        digest = hashlib.sha256(str(seed).encode()).hexdigest()
        self._r = random.Random(int(digest[:16], 16))

    def uniform(self) -> float:
        return self._r.random()

    def int(self, low: int, high: int) -> int:
        """An integer in [low, high], inclusive."""
        return low + min(int(self._r.random() * (high - low + 1)), high - low)

    def choice(self, options: Sequence):
        return options[self.int(0, len(options) - 1)]

    def canonical_or_other(self, options: Sequence, entropy: float):
        """options[0] with probability 1 - entropy, else one of the others uniformly."""
        if len(options) == 1 or self.uniform() >= entropy:
            return options[0]
        return options[self.int(1, len(options) - 1)]

    def weighted_index(self, weights: Sequence[float]) -> int:
        """An index drawn with probability proportional to `weights`."""
        u, total = self.uniform() * sum(weights), 0.0
        for index, weight in enumerate(weights):
            total += weight
            if u < total:
                return index
        return len(weights) - 1

    def sample(self, options: Sequence, k: int) -> list:
        """k distinct elements in random order (a partial Fisher-Yates shuffle)."""
        pool = list(options)
        for i in range(k):
            j = self.int(i, len(pool) - 1)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]
