"""Does each build's interval hold the other build's estimate? Every 95% interval that both builds
wrote to their result files, side by side.

    python ci/compare_intervals.py BUILD_A/_build/results BUILD_B/_build/results

The book's rule: an interval holds every noise that moves its number between two builds, the
drafters' training seeds included. Two builds of the same code with other drafter seeds
(`DSPARK_SEED=0` and `=1`) are two draws of that noise. If both intervals are honest and equally
wide, each holds the other's estimate in about 83% of cases, and the two are disjoint in about 0.6%
(the script prints both rates, computed from the normal distribution). Far fewer holds, or more
disjoint pairs, mean the intervals are too narrow. The usual cause is a bootstrap over too few seeds
to see their spread. The rows are not independent (a build's intervals share its seeds): read the
counts as a yardstick, not a test. Exits 0: it reports, it does not judge.
"""
from __future__ import annotations

import math
import sys
from statistics import NormalDist
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_results import results  # noqa: E402
from compare_verdicts import two_builds  # noqa: E402
from dspark_lite.harness.book.verdicts import widened  # noqa: E402

Triple = tuple[float, float, float]  # (estimate, low, high)


def _markov_minus_dflash(results: dict, keys: list[str]) -> float:
    return results["tau"]["dspark_markov"][keys[-1]] - results["tau"]["dflash"][keys[-1]]


# Result file: {path: where its estimate is}; "*" stands for every key, or every item of a list. A path
# whose estimate is None names [estimate, low, high]; any other names [low, high], and the function
# reads its estimate from the file's results and the keys walked. Chapter 04's per-slot falls and
# slopes of DFlash and the baseline repeat chapter 03's: listed once.
EstimateAt = Callable[[dict, list[str]], float] | None
INTERVALS: dict[str, dict[str, EstimateAt]] = {
    "parallel_drafting": dict.fromkeys((
        "crossover/map/*/gain_percent", "crossover/split_gap/*/*", "crossover/loss_ablation/eagle3_over_tv_percent",
        "dflash_minus_eagle_interval/*", "chat_minus_next_lowest/*", "per_slot_fall/*/*", "per_slot_fall_minus_eagle/*",
        "conditional_slope/*/*")),
    "table1_toy": {
        **dict.fromkeys(("per_slot_fall/dspark_markov/*", "per_slot_fall/dspark_rnn/*", "chat_slope/dspark-markov",
                         "chat_slope/dspark-rnn", "shallow_dspark_minus_deep_dflash/*", "e2e_markov_over_dflash_percent",
                         "e2e_markov_over_eagle_percent")),
        "macro_gain_over_dflash_interval": lambda r, keys: r["macro_gain_over_dflash"],
        "macro_gain_over_eagle_interval": lambda r, keys: r["macro_gain_over_eagle"],
        "markov_minus_dflash_interval/*": _markov_minus_dflash,
    },
}


def _label(item: Any, index: int) -> str:
    """A list item's name in a path: a crossover point by its capacity ratio and domain, else its index."""
    if isinstance(item, dict) and {"capacity_ratio", "domain"} <= item.keys():
        return f"{item['capacity_ratio']:.2f}:{item['domain']}"
    return str(index)


def matches(tree: Any, pattern: str) -> Iterator[tuple[list[str], Any]]:
    """(the keys walked, the value) of every place in `tree` that `pattern` names."""
    def walk(node: Any, parts: list[str], keys: list[str]) -> Iterator[tuple[list[str], Any]]:
        if not parts:
            yield keys, node
            return
        head, rest = parts[0], parts[1:]
        if isinstance(node, dict):
            for key in (node if head == "*" else [head] if head in node else []):
                yield from walk(node[key], rest, keys + [str(key)])
        elif isinstance(node, list) and head == "*":
            for i, item in enumerate(node):
                yield from walk(item, rest, keys + [_label(item, i)])

    yield from walk(tree, pattern.split("/"), [])


def intervals(folder: Path) -> dict[str, Triple]:
    """Every interval of a build's result files: {"file/keys": (estimate, low, high)}."""
    found: dict[str, Triple] = {}
    for name, paths in INTERVALS.items():
        tree = results(folder, name)
        for pattern, estimate in paths.items():
            for keys, value in matches(tree, pattern):
                if estimate is None and isinstance(value, list) and len(value) == 4 and isinstance(value[3], list):
                    low, high = widened(*map(float, value[:3]), value[3])  # the interval rule, from the seeds
                    found["/".join([name, *keys])] = (float(value[0]), low, high)
                elif isinstance(value, list) and len(value) == (3 if estimate is None else 2):
                    found["/".join([name, *keys])] = tuple(map(float, value if estimate is None
                                                                else [estimate(tree, keys), *value]))
    return found


def holds(interval: Triple, value: float) -> bool:
    return interval[1] <= value <= interval[2]


def honest_rates() -> tuple[float, float]:
    """For two independent estimates with the same spread and honest, equally wide 95% intervals:
    how often one interval holds the other estimate, and how often the two intervals are disjoint."""
    normal = NormalDist()
    z = normal.inv_cdf(0.975)
    inside = lambda x: 2 * normal.cdf(x) - 1  # P(|Z| < x)
    return inside(z / math.sqrt(2)), 1 - inside(z * math.sqrt(2))


def _text(interval: Triple) -> str:
    return f"{interval[0]:+.3f} [{interval[1]:+.3f}, {interval[2]:+.3f}]"


def main(argv: list[str] | None = None) -> int:
    a_folder, b_folder = two_builds(argv, __doc__, "results (make book writes _build/results)")
    a, b = intervals(a_folder), intervals(b_folder)
    both = sorted(a.keys() & b.keys())
    print(f"{'interval':62} {'A':>26} {'B':>26}  A holds B / B holds A")
    held = disjoint = 0
    for key in both:
        x, y = a[key], b[key]
        a_holds, b_holds = holds(x, y[0]), holds(y, x[0])
        apart = x[2] < y[1] or y[2] < x[1]
        held += a_holds + b_holds
        disjoint += apart
        mark = "DISJOINT" if apart else ""
        print(f"{key[:62]:62} {_text(x):>26} {_text(y):>26}  {'yes' if a_holds else 'no'} / {'yes' if b_holds else 'no'}  {mark}")
    hold_rate, disjoint_rate = honest_rates()
    n = len(both)
    print(f"{n} intervals in both builds; each holds the other's estimate in {held} of {2 * n} cases "
          f"(honest intervals: about {hold_rate * 2 * n:.0f}); disjoint pairs: {disjoint} "
          f"(honest intervals: about {disjoint_rate * n:.1f})")
    only = sorted(a.keys() ^ b.keys())
    if only:
        print(f"in one build only ({len(only)}): " + ", ".join(only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
