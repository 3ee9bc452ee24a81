"""The chapters' opening diagrams (harness/book/diagrams): bad input is refused before drawing, and
the drawings fit the page as every figure must (plots.figure_problems)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from dspark_lite.harness.book import diagrams, plots  # noqa: E402


def test_flow_refuses_mismatched_notes_and_highlights() -> None:
    with pytest.raises(ValueError, match="2 steps but 1 notes"):
        diagrams.flow(["a", "b"], "t", notes=["x"])
    with pytest.raises(ValueError, match="outside 0..1"):
        diagrams.flow(["a", "b"], "t", highlight=[2])
    with pytest.raises(ValueError, match="at least one step"):
        diagrams.flow([], "t")


def test_token_round_refuses_more_kept_than_drafted() -> None:
    with pytest.raises(ValueError, match="kept must be in 0..3"):
        diagrams.token_round("ctx", ["a", "b", "c"], kept=4, own="d", title="t")


@pytest.mark.parametrize("kept", [0, 2, 3])
def test_diagrams_fit_the_page(kept: int) -> None:
    figures = [diagrams.flow(["one", "two\nlines", "three"], "A title", notes=["n", "", "m"], highlight=[1]),
               diagrams.token_round("User: hi", ["a", "b", "c"], kept=kept, own="d", title="A round", head=True)]
    for fig in figures:
        assert plots.figure_problems(plots.figure_report(fig)) == []
        plt.close(fig)


def test_token_round_draws_the_targets_own_token_where_the_round_ends() -> None:
    correction = diagrams.token_round("ctx", ["a", "b", "c"], kept=1, own="X", title="t")
    bonus = diagrams.token_round("ctx", ["a", "b", "c"], kept=3, own="X", title="t")
    texts = {f: {t.get_text(): t.get_position() for t in f.axes[0].texts} for f in (correction, bonus)}
    assert "correction: the target's own" in texts[correction]
    assert "bonus: the\ntarget's own" in texts[bonus]
    # the correction sits under the first rejected slot (slot 2); the bonus after the last slot
    assert texts[correction]["X"][0] == pytest.approx(texts[correction]["slot 2"][0])
    assert texts[bonus]["X"][0] > texts[bonus]["slot 3"][0]
    plt.close("all")
