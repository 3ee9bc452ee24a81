"""The one bar policy (`dspark_lite.progress`): the outermost bar stays in the output, a bar
opened inside it is transient, and a disabled bar does not count as showing."""
from __future__ import annotations

import io

from dspark_lite.progress import Bar, progress


def test_a_bar_inside_another_is_transient_and_the_next_outer_one_stays() -> None:
    out = io.StringIO()
    assert Bar.showing == 0
    with progress(total=2, file=out) as outer:
        assert outer.leave and Bar.showing == 1
        inner = progress(range(3), file=out)
        assert not inner.leave and Bar.showing == 2
        assert list(inner) == [0, 1, 2]  # the loop's end closes it
        assert Bar.showing == 1
        kept = progress(range(2), file=out, leave=True)
        assert kept.leave  # an explicit leave wins
        kept.close()
    assert Bar.showing == 0
    again = progress(range(2), file=out)
    assert again.leave
    again.close()
    again.close()  # closing twice counts once
    assert Bar.showing == 0


def test_a_disabled_bar_does_not_count_as_showing() -> None:
    with progress(total=1, disable=True) as hidden:
        assert Bar.showing == 0
        shown = progress(range(1), file=io.StringIO())
        assert shown.leave
        shown.close()
    assert Bar.showing == 0 and hidden.disable
