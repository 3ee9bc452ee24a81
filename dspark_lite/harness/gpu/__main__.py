"""`python -m dspark_lite.harness.gpu`: chapter 07 without Jupyter (see `headless`)."""
import sys

from .headless import main
from .preflight import SetupError

if __name__ == "__main__":
    try:
        main()
    except SetupError as error:
        sys.exit(f"python -m dspark_lite.harness.gpu: {error}")
