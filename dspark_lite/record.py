"""The record of rounds (chapter 02; read by every later chapter): what the engine writes and
everything downstream reads, with the paper's measures on it: tau (footnote 3), prefix survival
(DeepSpec's accept_rate@k) and conditional acceptance (Figure 2). The head's predicted prefix
survival a_k (chapters 05-06, Algorithm 1's a_{r,j}) is `scheduler.survival`.

One verification round is one row: how many drafts were proposed and accepted, whether an
accepted end token stopped the round (DeepSpec's accounting, see `speculative.settle_round`),
the confidence head's logits z_k for the proposed positions, and the domain of the prompt.
The columns are numpy arrays, so a million rounds are one array each, and the same record goes
to the metrics below, to calibration (chapter 05), to the serving simulator and the widgets
(chapter 06b) and to the GPU harness's results file (chapter 07).

Confidences travel as logits. The head computes z_k (Eq. 7 before its sigmoid); c_k =
sigmoid(z_k) is computed where a probability is needed. A float32 sigmoid rounds to exactly 1.0
above z of about 16.7, and logit(1.0) is infinite: a record of probabilities loses what a
record of logits keeps, and temperature scaling (z / T) needs the logits anyway.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from . import checks
from .scheduler import survival


def sigmoid(z: Any) -> np.ndarray:
    """c = 1 / (1 + exp(-z)) in float64, without overflow warnings; NaN stays NaN."""
    z = np.asarray(z, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))


def logit(c: Any) -> np.ndarray:
    """z = log(c / (1 - c)) in float64: the inverse of `sigmoid` (c = 0 or 1 gives -inf or inf)."""
    c = np.asarray(c, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(c) - np.log1p(-c)


@dataclass(frozen=True)
class Rounds:
    """Verification rounds as columns. For N rounds:

    proposed[N]        drafts sent to verification (int64 >= 0)
    accepted[N]        drafts the target kept, 0 <= accepted <= proposed
    ended_in_draft[N]  True when an accepted end token stopped the round (then accepted ==
                       proposed >= 1 and the round emits no correction/bonus token)
    logits[N, G]       the confidence head's logits z_1..z_G (float32); NaN past `proposed` and
                       on every position of a drafter without a confidence head
    domain[N]          the prompt's domain ("" when unlabelled)

    Build one with `Rounds.of(...)`; the arrays are checked there and stored read-only.
    """

    proposed: np.ndarray
    accepted: np.ndarray
    ended_in_draft: np.ndarray
    logits: np.ndarray
    domain: np.ndarray

    def __post_init__(self) -> None:
        columns = _round_columns(self.proposed, self.accepted, self.ended_in_draft, self.logits, self.domain)
        for name, array in zip(("proposed", "accepted", "ended_in_draft", "logits", "domain"), columns):
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @classmethod
    def of(cls, proposed: Any, accepted: Any, logits: Any = None, ended_in_draft: Any = None,
           domain: str | Sequence[str] = "") -> Rounds:
        """A record from any array-likes: `logits` None means no confidence head (one NaN column
        per drafted position), `ended_in_draft` None means no round ended in a draft, a single
        string labels every round."""
        proposed = np.asarray(proposed).reshape(-1)
        n = proposed.shape[0]
        width = int(np.ceil(proposed.max(initial=0))) if proposed.dtype.kind in "iuf" else 0
        logits = np.full((n, width), np.nan, np.float32) if logits is None else logits
        ended = np.zeros(n, dtype=bool) if ended_in_draft is None else ended_in_draft
        labels = np.full(n, domain, dtype=object) if isinstance(domain, str) else domain
        return cls(proposed, accepted, ended, logits, labels)

    @classmethod
    def concat(cls, parts: Sequence[Rounds]) -> Rounds:
        """The rounds of `parts` one after another; logits padded with NaN to the widest."""
        parts = list(parts)
        if not parts:
            return cls.of([], [])
        width = max(p.width for p in parts)
        pad = lambda z: np.pad(z, ((0, 0), (0, width - z.shape[1])), constant_values=np.nan)
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in ("proposed", "accepted", "ended_in_draft")),
                   np.concatenate([pad(p.logits) for p in parts]), np.concatenate([p.domain for p in parts]))

    def __len__(self) -> int:
        return int(self.proposed.shape[0])

    def __getitem__(self, rows: Any) -> Rounds:
        """The rounds at `rows` (a boolean mask, an index array or a slice)."""
        return Rounds(self.proposed[rows], self.accepted[rows], self.ended_in_draft[rows], self.logits[rows],
                      self.domain[rows])

    @property
    def width(self) -> int:
        """Columns of `logits`: the most drafts any round proposed (the record's width; a round's
        own proposal is its `proposed`)."""
        return int(self.logits.shape[1])

    @property
    def emitted(self) -> np.ndarray:
        """Tokens each round added to the output: accepted, plus the correction/bonus token
        unless an accepted draft ended the sequence."""
        return self.accepted + ~self.ended_in_draft

    def confidences(self) -> np.ndarray:
        """c_k = sigmoid(z_k) [N, G] in float64 (NaN where `logits` is NaN)."""
        return sigmoid(self.logits)

    def labelled(self, domain: str) -> Rounds:
        """The same rounds, every one labelled `domain`."""
        return replace(self, domain=np.full(len(self), domain, dtype=object))

    def with_logits(self, logits: Any) -> Rounds:
        """The same rounds with other logits (a calibrator's output), same shape."""
        return replace(self, logits=np.asarray(logits, dtype=np.float32))

    def full_blocks(self, gamma: int | None = None) -> Rounds:
        """The rounds that proposed a whole block of `gamma` drafts (default: `self.width`) with
        confidences, logits cut to gamma columns: what calibration and the scheduler read.
        ValueError when there is none."""
        gamma = self.width if gamma is None else checks.positive_int(gamma, "gamma")
        keep = (self.proposed == gamma) & ~np.isnan(self.logits[:, :gamma]).any(axis=1) if gamma <= self.width \
            else np.zeros(len(self), dtype=bool)
        _full_blocks_found(int(keep.sum()), gamma, len(self), self.width)
        full = self[keep]
        return replace(full, logits=full.logits[:, :gamma])

    @property
    def domains(self) -> list[str]:
        """Sorted distinct domains."""
        return sorted(set(self.domain.tolist()))

    def counts(self) -> dict[str, int]:
        """Rounds per domain."""
        names, counts = np.unique(self.domain.astype(str), return_counts=True)
        return {str(k): int(v) for k, v in zip(names, counts)}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The columns as plain arrays (for `np.savez`; `Rounds.from_arrays` reads them back)."""
        return {"proposed": self.proposed, "accepted": self.accepted, "ended_in_draft": self.ended_in_draft,
                "logits": self.logits, "domain": self.domain.astype(str)}

    @classmethod
    def from_arrays(cls, arrays: Any) -> Rounds:
        """The record `to_arrays` wrote (a dict or an open npz file)."""
        return cls(*(np.asarray(arrays[name]) for name in ("proposed", "accepted", "ended_in_draft", "logits")),
                   np.asarray(arrays["domain"]).astype(object))

    def to_json(self) -> dict[str, list]:
        """JSON-able columns (NaN logits as null)."""
        logits = [[None if np.isnan(z) else float(z) for z in row] for row in self.logits.tolist()]
        return {"proposed": self.proposed.tolist(), "accepted": self.accepted.tolist(),
                "ended_in_draft": self.ended_in_draft.tolist(), "logits": logits, "domain": self.domain.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, list]) -> Rounds:
        """The record `to_json` wrote."""
        rows = [[np.nan if z is None else z for z in row] for row in data["logits"]]
        logits = np.array(rows, dtype=np.float32) if rows else np.empty((0, 0), np.float32)
        return cls(np.array(data["proposed"], dtype=np.int64), np.array(data["accepted"], dtype=np.int64),
                   np.array(data["ended_in_draft"], dtype=bool), logits, np.array(data["domain"], dtype=object))


# ----------------------------------------------------------------------------------------
# What was observed: tau and the acceptance curves
# ----------------------------------------------------------------------------------------


def tau(rounds: Rounds) -> float:
    """Tokens per round counting the correction/bonus token: mean of accepted + 1 (paper
    footnote 3), except that a round ended by an accepted end token counts its
    accepted drafts only (`Rounds.emitted`; DeepSpec's acceptance length)."""
    return float(_some_rounds(rounds).emitted.mean())


def _positions(rounds: Rounds, gamma: int | None) -> int:
    return int(rounds.proposed.max()) if gamma is None else checks.positive_int(gamma, "gamma")


def prefix_survival(rounds: Rounds, gamma: int | None = None) -> np.ndarray:
    """Observed prefix survival, DeepSpec's accept_rate@k: entry k-1 is the
    fraction of rounds whose first k drafts were all accepted, among rounds that proposed at
    least k drafts (NaN where none did). `gamma` defaults to the most proposed."""
    r = _some_rounds(rounds)
    out = np.full(_positions(r, gamma), np.nan)
    for k in range(1, out.size + 1):
        reached = r.proposed >= k
        if reached.any():
            out[k - 1] = np.mean(r.accepted[reached] >= k)
    return out


def conditional_acceptance(rounds: Rounds, gamma: int | None = None) -> np.ndarray:
    """The paper's Figure 2: entry k-1 is, among rounds that proposed at least k
    drafts and accepted the first k-1, the fraction that also accepted the k-th (NaN where
    that denominator is 0)."""
    r = _some_rounds(rounds)
    out = np.full(_positions(r, gamma), np.nan)
    for k in range(1, out.size + 1):
        reached = (r.proposed >= k) & (r.accepted >= k - 1)
        if reached.any():
            out[k - 1] = np.mean(r.accepted[reached] >= k)
    return out


def expected_tau_from_conditional(alpha: Sequence[float] | np.ndarray) -> float:
    """1 + sum_k prod_{i<=k} alpha_i: the expected tokens per round implied by
    conditional acceptances. NaN entries after the survival product reached 0 are ignored."""
    expected, survival = 1.0, 1.0
    for k, alpha_k in enumerate(np.asarray(alpha, dtype=float), start=1):
        if survival == 0.0:
            break
        survival *= checks.probability(alpha_k, f"alpha[{k - 1}] (a conditional acceptance probability)")
        expected += survival
    return expected


# --- checks (this module's door)


def _round_columns(proposed: Any, accepted: Any, ended_in_draft: Any, logits_: Any,
                   domain: Any) -> tuple[np.ndarray, ...]:
    """The columns of a `Rounds`, checked and converted (int64, int64, bool, float32 [N, G],
    object strings)."""
    p, a = np.asarray(proposed), np.asarray(accepted)
    n = p.shape[0] if p.ndim == 1 else -1
    if p.ndim != 1 or a.shape != (n,):
        raise ValueError(f"proposed and accepted must be 1-D of one length; got shapes {p.shape} and {a.shape}")
    for values, what in ((p, "proposed"), (a, "accepted")):
        if values.size and (values.dtype.kind not in "iuf" or not np.array_equal(values, np.round(values))):
            raise ValueError(f"{what} must hold integers; got {values.dtype} values")
    p, a = p.astype(np.int64), a.astype(np.int64)
    if n and ((a < 0).any() or (a > p).any()):
        i = int(np.flatnonzero((a < 0) | (a > p))[0])
        raise ValueError(f"each round needs 0 <= accepted <= proposed; round {i} has accepted {a[i]} of {p[i]}")
    e = np.asarray(ended_in_draft)
    e = e.astype(bool) if e.size == 0 else e  # an empty list comes as float64
    if e.shape != (n,) or (e.size and e.dtype != bool):
        raise ValueError(f"ended_in_draft must be {n} booleans; got {e.dtype} of shape {e.shape}")
    if (e & ~((a == p) & (p >= 1))).any():
        raise ValueError("a round with ended_in_draft needs accepted == proposed >= 1 (the drafts up to and including "
                         "the end token)")
    z = checks.float_array(logits_, "logits").astype(np.float32)
    if z.ndim != 2 or z.shape[0] != n or z.shape[1] < int(p.max(initial=0)):
        raise ValueError(f"logits must be shaped (N = {n}, G >= the most proposed, {int(p.max(initial=0))}); "
                         f"got {z.shape}")
    beyond = np.arange(z.shape[1])[None, :] >= p[:, None]
    if (~np.isnan(z) & beyond).any():
        raise ValueError("logits past a round's proposed drafts must be NaN (no draft, no confidence)")
    d = np.asarray(domain, dtype=object)
    if d.shape != (n,) or not all(isinstance(x, str) for x in d):
        raise ValueError(f"domain must be {n} strings, one per round; got shape {d.shape}")
    return p, a, e.astype(bool), z, d


def _some_rounds(rounds: Any) -> Rounds:
    """`rounds` itself: a `Rounds` holding at least one round; ValueError otherwise."""
    if not isinstance(rounds, Rounds):
        raise ValueError(f"expected a Rounds record, got {type(rounds).__name__}")
    if len(rounds) == 0:
        raise ValueError("no rounds recorded; expected at least one round")
    return rounds


def _full_blocks_found(kept: int, gamma: int, rounds: int, widest: int) -> None:
    """ValueError unless some round proposed a whole block of `gamma` drafts with confidences."""
    if kept == 0:
        raise ValueError(f"no round proposed a full block of gamma = {gamma} drafts with confidences "
                         f"({rounds} rounds, the widest {widest})")
