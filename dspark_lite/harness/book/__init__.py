"""The book's face: results tables and glue, verdict wording, plots, interactive figures and the
token stream. It may import every other room.
"""
