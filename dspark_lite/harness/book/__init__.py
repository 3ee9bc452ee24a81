"""The book's face: results tables and the sentences a run says, verdict wording, plots, interactive figures and the
token stream. It may import every other room.
"""
