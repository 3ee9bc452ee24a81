"""ci/page_metrics.py: words, tables and figures a reader meets per notebook, and the afternoon book's
budget (issue 64)."""
from __future__ import annotations

from pathlib import Path

import nbformat

from ci import page_metrics


def executed(path: Path, words: int, tables: int, figures: int, said: str = "") -> Path:
    """An executed notebook with `words` words of markdown, `tables` HTML tables and `figures` PNGs."""
    outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<table><tr><td>1</td></tr></table>"})
               for _ in range(tables)]
    outputs += [nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "fig"})
                for _ in range(figures)]
    if said:
        outputs.append(nbformat.v4.new_output("display_data", data={"text/markdown": said}))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# T\n\n" + " ".join(["word"] * (words - 1))
                                      + "\n\n```python\nnot prose at all\n```\n\n$$a = b$$\n"
                                      + "<details><summary>Solution</summary>hidden words here</details>"),
        nbformat.v4.new_code_cell("x", outputs=outputs, execution_count=1)])
    nbformat.write(nb, path)
    return path


def test_counts_prose_tables_and_figures_and_skips_code_math_and_solutions(tmp_path: Path) -> None:
    found = page_metrics.notebook_metrics(executed(tmp_path / "a.ipynb", 40, 3, 2, said="tau is 4.2 here"))
    assert found == {"words": 40 + 4, "tables": 3, "figures": 2}
    assert page_metrics.prose_words("| a | b |\n|---|---|\n| 1 | 2 |") == 4


def test_the_budget_names_each_chapter_over_it(tmp_path: Path) -> None:
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: chapters/00_a\nparts:\n  - caption: The main path\n"
                                       "    chapters:\n      - file: chapters/01_b\n  - caption: Studies\n"
                                       "    chapters:\n      - file: chapters/s01a_c\n")
    out = tmp_path / "executed"
    out.mkdir()
    executed(out / "00_a.ipynb", 100, 1, 0)
    executed(out / "01_b.ipynb", 2_300, 6, 3)
    executed(out / "s01a_c.ipynb", 9_000, 20, 20)  # a study may be long
    found = page_metrics.book_metrics(out, tmp_path)
    assert set(found) == {"The main path", "Studies"} and set(found["The main path"]) == {"00_a", "01_b"}
    assert page_metrics.over_budget(found) == ["01_b: 2300 words (at most 2200)", "01_b: 9 tables and figures (at most 8)"]
    assert page_metrics.main([str(out), "--root", str(tmp_path), "--check"]) == 1
    executed(out / "01_b.ipynb", 2_000, 5, 3)
    assert page_metrics.main([str(out), "--root", str(tmp_path), "--check"]) == 0
