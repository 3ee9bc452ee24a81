"""The prose check (ci/check_prose.py): a measured number typed into a chapter's text fails it;
the paper's numbers (after "the paper:"), section numbers, versions and recipe counts pass."""
from __future__ import annotations

from pathlib import Path

import nbformat

from ci.check_prose import check_notebook, measured_numbers


def test_a_typed_in_measurement_fails() -> None:
    for sentence in ["DFlash reaches 4.62 tokens per round on math.",
                     "STS lowers the ECE by 25.7%.",
                     "The race ran 2.1x faster.",
                     "Training took 431 s and the chapter 14 minutes.",
                     "a 3.67M-parameter target",
                     "the scheduler needs 205 us per call",
                     "<details>\n\n1. 0.37 by hand\n\n</details>\n\nDFlash reaches 4.62 on math."]:
        assert measured_numbers(sentence), sentence


def test_paper_and_recipe_numbers_pass() -> None:
    for sentence in ["DSpark's macro gain over DFlash (the paper: +16.3%) is what Table 1 holds us to.",
                     "DFlash's tau (the paper: 4.80 / 4.44 / 2.95) is the calibration's anchor.",
                     "## 3.5 tau per domain",
                     "Sections 3.2.1 and 3.3 of the paper; Eq. 2 and Figure 4.",
                     "a 4-layer target trained for 1200 steps on Qwen3-4B's recipe, gamma = 7",
                     "the code `x = 4.62` and the math $\\tau = 4.62$",
                     "transformers 5.10.2 and torch 2.13.0",
                     "<details>\n<summary>Solutions</summary>\n\n1. 0.68 x 0.55 = 0.37, 20 % coherent\n\n</details>"]:
        assert measured_numbers(sentence) == [], sentence


def test_the_check_fails_on_a_planted_sentence_and_names_it(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T\n\nDSpark gains {glue:md}`gain` over DFlash."),
                nbformat.v4.new_markdown_cell("On this run the head adds 24.5% in every domain.")]
    path = tmp_path / "ch.ipynb"
    nbformat.write(nb, path)
    problems = check_notebook(path, "chapters/ch.ipynb")
    assert len(problems) == 1 and problems[0].startswith("chapters/ch.ipynb: cell 1: '24.5%'")


def test_the_book_states_no_typed_in_measurement() -> None:
    """Every chapter's prose: measured numbers are glued from its run or marked as the paper's."""
    from ci.check_prose import check_book

    problems = check_book()
    assert not problems, "\n".join(problems)


def test_printed_values_read_as_words_not_reprs():
    import numpy as np

    from dspark_lite.harness.book.results import plain

    assert plain({"math": 0.0261, "code": 0.273, "chat": 0.4}) == "math 0.026, code 0.273 and chat 0.4"
    assert plain(["math", "code"]) == "math and code" and plain([]) == "none" and plain(("chat",)) == "chat"
    assert plain(np.True_) == "yes" and plain(False) == "no" and plain(np.int64(3)) == "3"
    assert plain({"opener": {"target": 0.0, "DFlash": 0.76}}) == "opener (target 0 and DFlash 0.76)"
    assert plain({"math": [1.37, 1.55]}) == "math (1.37 and 1.55)"
