"""dspark_lite: a small, readable reproduction of DSpark (confidence-scheduled speculative
decoding with a semi-autoregressive drafter). One module per concern; each public
function names the chapter of the book that builds it."""

__version__ = "0.1.0"
