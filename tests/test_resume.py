"""Interrupted trainings resume from their checkpoint and end bit-identical to an uninterrupted run
(the target of chapter 01, the drafters of chapters 03-05, and the artifact cache around them)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_drafters import PAD_ID, dflash, eagle, random_ids, stub_tokenizer, tiny_target

from dspark_lite import resume
from dspark_lite.harness.toy import cache
from dspark_lite.harness.toy.profiles import get_profile
from dspark_lite.harness.toy.target import build_target, train_causal_lm
from dspark_lite.harness.toy.replies import generate_training_sequences
from dspark_lite.training import DrafterTrainConfig, train_drafters

pytestmark = pytest.mark.usefixtures("one_thread")


class Killed(Exception):
    """Stands for the process being killed."""


class KilledAfter(resume.Checkpointer):
    """Saves after every step, and "dies" right after the save that follows step `kill_at`
    (as a process killed during step kill_at + 1 would have left things)."""

    def __init__(self, folder: Path, kill_at: int) -> None:
        super().__init__(folder, every_seconds=0)
        self.kill_at, self.saves = kill_at, 0

    def maybe_save(self, state, last_step: bool = False) -> bool:
        saved = super().maybe_save(state, last_step)
        self.saves += saved
        if self.saves == self.kill_at:
            raise Killed
        return saved


def tiny_target_run(checkpoint: resume.Checkpointer | None):
    cfg = replace(get_profile("smoke").target, steps=9, warmup_steps=2, batch_size=4, seq_len=16)
    model = build_target(cfg, SizedTokenizer(), seed=3)
    rows = torch.randint(0, 45, (24, cfg.seq_len + 1), generator=torch.Generator().manual_seed(0))
    history = train_causal_lm(model, rows[:20], rows[20:], cfg, seed=5, eval_every=2, checkpoint=checkpoint)
    return model, history


class SizedTokenizer:
    """A stand-in with what `build_target` reads of a tokenizer: its size and two special ids."""

    eos_token_id, pad_token_id = 46, PAD_ID

    def __len__(self) -> int:
        return 48


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    theirs = b.state_dict()
    for key, value in a.state_dict().items():
        assert torch.equal(value, theirs[key]), key


@pytest.mark.parametrize("kill_at", [1, 4, 7])
def test_target_training_resumes_bit_identical(tmp_path: Path, kill_at: int, capsys) -> None:
    whole, whole_history = tiny_target_run(None)
    with pytest.raises(Killed):
        tiny_target_run(KilledAfter(tmp_path, kill_at))
    assert (tmp_path / resume.FILE).exists()
    resumed, history = tiny_target_run(resume.Checkpointer(tmp_path, every_seconds=0))
    assert f"resuming from the checkpoint at step {kill_at} of 9" in capsys.readouterr().out
    assert_same_weights(whole, resumed)
    assert history.train_loss == whole_history.train_loss and len(history.train_loss) == 9
    assert history.val_steps == whole_history.val_steps and history.val_loss == whole_history.val_loss


def test_drafters_trained_together_resume_bit_identical(tmp_path: Path, capsys) -> None:
    target = tiny_target(seed=4)
    prompts = [random_ids(40 + i, 4 + i % 3) for i in range(8)]
    data = generate_training_sequences(target, stub_tokenizer(), prompts, 12, 1.0, torch.Generator().manual_seed(0),
                                       batch_size=8)
    cfg = DrafterTrainConfig(steps=8, sequences_per_batch=3, anchors_per_sequence=4, lr=1e-2, warmup_steps=1)
    fresh = lambda: {"dflash": dflash(target), "eagle": eagle(target)}
    whole = fresh()
    whole_histories = train_drafters(whole, target, data, cfg, seed=3)
    with pytest.raises(Killed):
        train_drafters(fresh(), target, data, cfg, seed=3, checkpoint=KilledAfter(tmp_path, 5))
    resumed = fresh()
    histories = train_drafters(resumed, target, data, cfg, seed=3, checkpoint=resume.Checkpointer(tmp_path, 0))
    assert "resuming from the checkpoint at step 5" in capsys.readouterr().out
    for name in whole:
        assert_same_weights(whole[name], resumed[name])
        assert histories[name].loss == whole_histories[name].loss and len(histories[name].loss) == 8
        assert histories[name].prefix_survival_tv == whole_histories[name].prefix_survival_tv


def test_a_checkpoint_of_other_drafters_is_refused(tmp_path: Path) -> None:
    target = tiny_target(seed=4)
    data = generate_training_sequences(target, stub_tokenizer(), [random_ids(1, 4), random_ids(2, 5)], 8, 1.0,
                                       torch.Generator().manual_seed(0), batch_size=2)
    cfg = DrafterTrainConfig(steps=3, sequences_per_batch=2, anchors_per_sequence=2)
    with pytest.raises(Killed):
        train_drafters({"a": dflash(target)}, target, data, cfg, checkpoint=KilledAfter(tmp_path, 1))
    with pytest.raises(ValueError, match=r"holds drafters \['a'\], not \['b'\]"):
        train_drafters({"b": dflash(target)}, target, data, cfg, checkpoint=resume.Checkpointer(tmp_path, 0))


def test_the_cache_keeps_an_interrupted_build_for_the_next_one(tmp_path: Path) -> None:
    calls: list[bool] = []

    def build(folder: Path) -> None:
        found = (folder / resume.FILE).exists()
        calls.append(found)
        if not found:  # first attempt: checkpoint, then die
            resume.Checkpointer(folder, 0).save({"step": 3})
            (folder / f"{resume.FILE}.tmp999").write_bytes(b"half")  # a save the kill interrupted
            raise Killed
        (folder / "weights.txt").write_text(str(torch.load(folder / resume.FILE)["step"]))

    with pytest.raises(Killed):
        cache.load_or_build("thing", {"a": 1}, build, lambda f: f, root=tmp_path)
    folder = cache.load_or_build("thing", {"a": 1}, build, lambda f: f, root=tmp_path)
    assert calls == [False, True]
    assert (folder / "weights.txt").read_text() == "3"
    assert sorted(p.name for p in folder.iterdir()) == [cache.MANIFEST, "weights.txt"], "no checkpoint is kept"
    assert not cache.work_folder("thing", {"a": 1}, root=tmp_path, builder=__name__).exists()
    cache.verify_manifest(folder)


def test_the_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(resume.ENV_VAR, "7.5")
    assert resume.Checkpointer(None).every_seconds == 7.5
    monkeypatch.setenv(resume.ENV_VAR, "soon")
    with pytest.raises(ValueError, match=r"DSPARK_CHECKPOINT_SECONDS \(seconds between checkpoints\) must be numeric.*'soon'"):
        resume.interval_seconds()
    monkeypatch.delenv(resume.ENV_VAR)
    assert resume.interval_seconds() == resume.DEFAULT_SECONDS


def test_training_falls_back_to_eager_when_compiling_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", lambda model: broken)
    cfg = replace(get_profile("smoke").target, steps=3, warmup_steps=1, batch_size=4, seq_len=16, compile=True)
    eager_cfg = replace(cfg, compile=False)
    rows = torch.randint(0, 45, (12, 17), generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="torch.compile failed .RuntimeError: no C.. compiler.; training without it"):
        history = train_causal_lm(build_target(cfg, SizedTokenizer(), seed=3), rows[:8], rows[8:], cfg, seed=5)
    eager = train_causal_lm(build_target(eager_cfg, SizedTokenizer(), seed=3), rows[:8], rows[8:], eager_cfg, seed=5)
    assert history.train_loss == eager.train_loss
