"""Build, execution and check scripts for the book (run as `python ci/NAME.py` or import `ci.NAME`)."""
