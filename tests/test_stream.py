"""The token stream (chapters 02, 04, 07): what the figure draws equals the record of rounds and the
token ids, round by round; the recording drafter changes nothing the engine does."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_check import PROMPTS, VOCAB, noisy_copy, tiny_target  # noqa: E402

from dspark_lite.dspark import DSparkDrafter
from dspark_lite.hidden_drafter import DrafterConfig
from dspark_lite.harness.book import stream
from dspark_lite.baselines import ModelDrafter
from dspark_lite.speculative import speculative_generate


class Ids:
    """A tokenizer stand-in: token t decodes to 't<t> '."""

    def decode(self, ids):
        return "".join(f"t{i} " for i in ids)


def rollout_of(drafter, seed: int = 0, new_tokens: int = 40, gamma: int = 4, eos=None):
    target = tiny_target()
    recording = stream.RecordingDrafter(drafter)
    out = speculative_generate(target, recording, torch.tensor(PROMPTS[0]), new_tokens, gamma, 1.0,
                               torch.Generator().manual_seed(seed), eos)
    plain = speculative_generate(target, drafter, torch.tensor(PROMPTS[0]), new_tokens, gamma, 1.0,
                                 torch.Generator().manual_seed(seed), eos)
    assert torch.equal(out.tokens, plain.tokens)  # recording changes nothing
    return out, recording.drafts


@pytest.mark.parametrize("kind", ["model", "dspark"])
def test_what_the_stream_draws_is_the_record(kind: str) -> None:
    target = tiny_target()
    if kind == "model":
        drafter = ModelDrafter(noisy_copy(target, seed=1, noise=0.3))
    else:
        drafter = DSparkDrafter(target, DrafterConfig((0, 1), mask_token_id=1, gamma=4, num_layers=1,
                                                     head_type="markov", head_rank=4, confidence_head=True), seed=2)
    out, drafts = rollout_of(drafter)
    rounds = stream.stream_rounds(out, drafts)
    tokens = out.tokens.tolist()
    # The stream rebuilds the output: the prefill's token, then each round's accepted drafts and added token.
    rebuilt = [tokens[0]]
    for rnd, proposed, accepted in zip(rounds, out.rounds.proposed, out.rounds.accepted):
        assert len(rnd.drafted) == proposed and rnd.accepted == accepted
        assert rnd.anchor == rebuilt[-1]
        rebuilt += list(rnd.drafted[:rnd.accepted]) + ([] if rnd.added is None else [rnd.added])
        if rnd.added is not None:
            assert rnd.bonus == (rnd.accepted == len(rnd.drafted))
        assert (rnd.confidences is not None) == (kind == "dspark")
    assert rebuilt[:len(tokens)] == tokens and len(rebuilt) - len(tokens) <= max(out.rounds.proposed)
    states = stream.stream_states(rounds, Ids(), context_tokens=8, width=40)
    for r, rnd in enumerate(rounds):
        drawn = states[states["round"] == r]
        by = lambda k: drawn.loc[drawn["kind"] == k, "token"].tolist()
        assert by("anchor") == [rnd.anchor]
        assert by("accepted") == list(rnd.drafted[:rnd.accepted]) and by("rejected") == list(rnd.drafted[rnd.accepted:])
        assert by("correction") + by("bonus") == ([] if rnd.added is None else [rnd.added])
        before = len(tokens[:1 + sum(x.accepted + (x.added is not None) for x in rounds[:r])]) - 1
        assert by("context") == rebuilt[:before][-8:]  # the committed text just before the anchor
        assert (drawn["x2"] <= 40).all() and drawn["text"].str.len().eq(drawn["x2"] - drawn["x"]).all()
        if rnd.confidences is not None:
            assert drawn.loc[drawn["kind"].isin(["accepted", "rejected"]), "confidence"].tolist() == pytest.approx(
                list(rnd.confidences), abs=5e-4)
    chart = stream.stream_chart({"one": rounds, "two": rounds[:3]}, Ids(), width=40).to_dict()
    assert chart["params"][0]["bind"]["max"] == len(rounds) - 1
    assert "bind" not in stream.stream_chart({"one": rounds[:1]}, Ids()).to_dict()["params"][0]  # nothing to step


def test_drafts_of_another_rollout_are_refused() -> None:
    target = tiny_target()
    out, drafts = rollout_of(ModelDrafter(noisy_copy(target, seed=1, noise=0.3)))
    with pytest.raises(ValueError, match="rounds"):
        stream.stream_rounds(out, drafts[:-1])
    wrong = [list(d) for d in drafts]
    first = next(i for i, r in enumerate(out.rounds.accepted) if r > 0)
    wrong[first][0] = (wrong[first][0] + 1) % VOCAB
    with pytest.raises(ValueError, match="does not match"):
        stream.stream_rounds(out, wrong)


def test_token_text_keeps_its_spaces_in_the_figure() -> None:
    """SVG drops a text's leading spaces (no-break ones too), so a token " problem" drawn at its
    column would read "Noproblem" with the space after it: the figure draws the text without its
    leading space one column further. Newlines and empty pieces stay visible."""
    class Words:
        def decode(self, ids: list[int]) -> str:
            return {1: "No", 2: " problem", 3: "\n", 4: "", 5: "!", 6: "\x03"}[ids[0]]

    assert [stream._piece(Words(), t) for t in (1, 2, 3, 4, 6)] == ["No", " problem", "⏎", "·", "\ufffd"]
    rounds = [stream.StreamRound(1, (2, 5), 2, 3, True, None)]
    drawn = stream.stream_states(rounds, Words(), width=40)
    assert drawn[["glyphs", "x", "x_glyphs", "x2"]].values.tolist() == [
        ["No", 0, 0, 2], ["problem", 2, 3, 10], ["!", 10, 10, 11], ["⏎", 11, 11, 12]]
