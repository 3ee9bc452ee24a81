"""Make the repository root importable, so that tests can `import ci.xxx` and `dspark_lite`;
shared fixtures."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and the machine is shared (used by module marks)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def float32_matmuls(monkeypatch):
    """Hold bf16 autocast off (`runtime.bf16_autocast_pays`), for tests that compare two paths of one
    float32 computation to float32 precision: on a CPU with AMX the trainer's matmuls would otherwise
    run in bf16 on one side only, and the test would measure bf16 rounding, not the paths' agreement."""
    from dspark_lite import runtime

    monkeypatch.setattr(runtime, "bf16_autocast_pays", lambda device, wide=False: False)
