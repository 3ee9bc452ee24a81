"""harness.book.source: shown source fits the page's column and stays valid Python."""
import ast
import inspect

from dspark_lite import dspark
from dspark_lite.harness.book.source import WIDTH, reflow


def test_reflow_fits_the_column_and_parses():
    for obj in (dspark.MarkovHead, dspark.sample_chain, dspark.RNNHead.advance, dspark.DSparkDrafter.train_logits):
        shown = reflow(inspect.getsource(obj))
        assert max(len(line) for line in shown.splitlines()) <= WIDTH
        ast.parse(shown)
        assert [t for t in shown.split() if t.isidentifier()][:3] == [t for t in inspect.getsource(obj).split()
                                                                      if t.isidentifier()][:3]


def test_reflow_keeps_short_lines():
    text = "def f(a, b):\n    return a + b"
    assert reflow(text) == text
