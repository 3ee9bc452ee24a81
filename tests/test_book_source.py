"""harness.book.source: the method's code as a chapter shows it, its own lines, with or without the docstring."""
import ast
import inspect
import textwrap

from dspark_lite import dspark
from dspark_lite.harness.book.source import source_of


def test_shown_source_is_the_package_source_dedented():
    for obj in (dspark.MarkovHead, dspark.sample_chain, dspark.RNNHead.advance):
        shown = source_of(obj)
        assert shown == textwrap.dedent(inspect.getsource(obj)).rstrip("\n")
        ast.parse(shown)


def test_without_the_docstring_only_the_docstring_goes():
    shown = source_of(dspark.RNNHead.advance, docstring=False)
    tree = ast.parse(shown).body[0]
    assert ast.get_docstring(tree) is None and ast.get_docstring(ast.parse(source_of(dspark.RNNHead.advance)).body[0])
    full = source_of(dspark.RNNHead.advance).splitlines()
    assert set(shown.splitlines()) <= set(full) and len(shown.splitlines()) < len(full)
