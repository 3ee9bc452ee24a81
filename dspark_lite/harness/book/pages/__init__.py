"""One module a chapter (`ch01`, `ch02`, ...): the chapter's bookkeeping behind names that say what
they show (the sentences a run's numbers go into, the verdict box's rows, figure plumbing), so the
notebook's visible code is the method and its measurement. Each sentence comes out of the cell
that measured it as Markdown output (`results.say`).
"""
