"""One module a chapter (`ch01`, `ch02`, ...), on its way out: each chapter's words and
experiments move into its notebook, and the chapters' shared setup is `book.notebook`.
"""
from ..notebook import BUILD_TIMES, run_time_note, start  # noqa: F401
