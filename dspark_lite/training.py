"""The drafter training loop of paper section 3.3 (chapter 03 trains DFlash and EAGLE with it,
chapter 04 the Markov and RNN heads, chapter 05 adds the confidence head's BCE of Eq. 8).

A step draws a batch of the target's own replies (`training_data.TrainingSequences`), samples
anchors in them and reads the frozen target's view of them (`training_data.TargetViews`, computed
once before training), then each drafter takes an AdamW step on the block loss of
`loss.block_loss`: 0.1 CE + 0.9 TV with position weights w_k = exp(-(k - 1) / decay), plus the
confidence BCE for a drafter with a confidence head.

Any drafter with `train_logits(AnchorBatch) -> BlockOutput | Tensor`, a `gamma` and
`target_layer_ids` trains with `train_drafter`; several train side by side, on one view of the
target, with `train_drafters`, which resumes an interrupted run through `resume`.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Mapping, Protocol, Sequence

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel, get_cosine_schedule_with_warmup

from . import checks
from .hidden_drafter import AnchorBatch, BlockOutput
from .loss import block_loss, block_targets
from .progress import progress
from .resume import Checkpointer, resume_training, training_state
from .runtime import fast_autocast, model_device
from .training_data import TargetViews, TrainingSequences, sample_anchor_positions


class TrainableDrafter(Protocol):
    """What `train_drafter` needs from a drafter."""

    gamma: int
    target_layer_ids: tuple[int, ...] | None

    def train_logits(self, batch: AnchorBatch) -> BlockOutput | Tensor: ...

    def parameters(self): ...


@dataclass(frozen=True)
class DrafterTrainConfig:
    """Recipe of `train_drafter`. A step reads `sequences_per_batch` sequences
    and `anchors_per_sequence` anchors in each. `loss_decay` None means gamma (the paper's
    w_k = exp(-(k-1)/gamma); DeepSpec's configs use 4 for gamma = 7). Defaults CE 0.1,
    TV 0.9, soft CE 0 (Eagle3's loss: `loss.EAGLE3_DECAY`), confidence BCE 1.0 (used only if the
    drafter returns confidence logits); these five loss fields are the `loss.LossWeights` that `loss.block_loss` reads."""

    steps: int = 300
    sequences_per_batch: int = 4
    anchors_per_sequence: int = 32
    lr: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    ce_weight: float = 0.1
    tv_weight: float = 0.9
    soft_ce_weight: float = 0.0
    confidence_weight: float = 1.0
    loss_decay: float | None = None
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        for name in ("steps", "sequences_per_batch", "anchors_per_sequence"):
            checks.positive_int(getattr(self, name), name)
        checks.positive_int(self.warmup_steps, "warmup_steps", minimum=0)
        for name in ("ce_weight", "tv_weight", "soft_ce_weight", "confidence_weight"):
            checks.in_interval(getattr(self, name), name, 0.0)
        checks.in_interval(self.ce_weight + self.tv_weight + self.soft_ce_weight, "ce_weight + tv_weight + soft_ce_weight",
                           0.0, closed=False)
        for name in ("lr", "max_grad_norm") + (("loss_decay",) if self.loss_decay is not None else ()):
            checks.in_interval(getattr(self, name), name, 0.0, closed=False)


# ----------------------------------------------------------------------------------------
# One step's batch, shared by the drafters trained side by side, and a drafter's loss on it
# ----------------------------------------------------------------------------------------


@dataclass
class TargetBatch:
    """A batch of sequences with freshly sampled anchors and the frozen target's view of it:
    logits [B, T, V] and the selected hidden states (or None). Drafters trained
    side by side share one (`train_drafters`)."""

    input_ids: Tensor
    lengths: Tensor
    anchors: Tensor
    logits: Tensor
    hidden: Tensor | None


def target_batch(views: TargetViews, sequences: TrainingSequences, indices: Sequence[int],
                 cfg: DrafterTrainConfig, generator: torch.Generator) -> TargetBatch:
    """Batch `indices`, sample `cfg.anchors_per_sequence` anchors in each sequence, read the
    target's view of them."""
    input_ids, lengths, prompt_lengths = sequences.batch(indices)
    anchors = sample_anchor_positions(lengths, prompt_lengths, cfg.anchors_per_sequence, generator)
    logits, hidden = views.batch(indices)
    return TargetBatch(input_ids, lengths, anchors, logits, hidden)


def _as_block_output(output: BlockOutput | Tensor) -> BlockOutput:
    return output if isinstance(output, BlockOutput) else BlockOutput(output)


def drafter_loss(drafter: TrainableDrafter, batch: TargetBatch, cfg: DrafterTrainConfig) -> tuple[Tensor, dict]:
    """The drafter's loss and metrics on a `TargetBatch`."""
    device = model_device(drafter)
    hidden = None if batch.hidden is None else batch.hidden.to(device)
    with fast_autocast(device):
        output = _as_block_output(drafter.train_logits(AnchorBatch(batch.input_ids.to(device), hidden,
                                                                   batch.anchors.to(device))))
    targets = block_targets(batch.input_ids, batch.logits.to(device), batch.anchors, batch.lengths, drafter.gamma)
    return block_loss(output, targets, cfg)


# ----------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------


def optimizer_step(loss: Tensor, optimizer: torch.optim.Optimizer, schedule, parameters,
                   max_grad_norm: float = 1.0) -> None:
    """Backward, clip the gradient norm, step the optimiser and the schedule, clear gradients."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)


@dataclass
class DrafterTrainHistory:
    """Per-step curves of `train_drafter`; see `loss.acceptance_proxies`."""

    loss: list[float] = field(default_factory=list)
    ce: list[float] = field(default_factory=list)
    tv: list[float] = field(default_factory=list)
    soft_ce: list[float] = field(default_factory=list)
    confidence_bce: list[float] = field(default_factory=list)
    slot_acceptance_tv: list[list[float]] = field(default_factory=list)
    prefix_survival_tv: list[list[float]] = field(default_factory=list)
    expected_tau_tv: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def record(self, loss: float, parts: dict) -> None:
        self.loss.append(loss)
        for name in ("ce", "tv", "soft_ce", "confidence_bce", "slot_acceptance_tv", "prefix_survival_tv", "expected_tau_tv"):
            if name in parts:
                getattr(self, name).append(parts[name])


class EpochBatches:
    """Endless shuffled epochs of sequence indices (a reshuffle per epoch from `generator`), with
    its position as state, so a resumed training draws the same batches."""

    def __init__(self, n_sequences: int, batch_size: int, generator: torch.Generator) -> None:
        self.n_sequences, self.batch_size, self.generator = n_sequences, batch_size, generator
        self.order: list[int] = []
        self.position = 0

    def __next__(self) -> list[int]:
        if self.n_sequences < self.batch_size:  # fewer sequences than a batch: every one, every step
            return torch.randperm(self.n_sequences, generator=self.generator).tolist()
        if self.position + self.batch_size > len(self.order):
            self.order, self.position = torch.randperm(self.n_sequences, generator=self.generator).tolist(), 0
        self.position += self.batch_size
        return self.order[self.position - self.batch_size:self.position]

    def state_dict(self) -> dict:
        return {"order": self.order, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.order, self.position = list(state["order"]), int(state["position"])


@dataclass
class DrafterRun:
    """One drafter's training in `train_drafters`: its trainable parameters, AdamW (betas
    0.9/0.95) with linear warmup and cosine decay, and its curves."""

    drafter: TrainableDrafter
    parameters: list[nn.Parameter]
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    history: DrafterTrainHistory = field(default_factory=DrafterTrainHistory)

    @classmethod
    def start(cls, drafter: TrainableDrafter, cfg: DrafterTrainConfig) -> "DrafterRun":
        """A fresh run: the drafter in training mode, the optimiser over what requires a gradient."""
        parameters = [p for p in drafter.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay,
                                      fused=True)
        drafter.train()
        return cls(drafter, parameters, optimizer, get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.steps))

    def step(self, batch: TargetBatch, cfg: DrafterTrainConfig, shared_seconds: float) -> None:
        """One optimiser step on `batch`; its time, plus `shared_seconds` (this run's share of the
        target's view), goes to the history."""
        start = time.perf_counter()
        loss, parts = drafter_loss(self.drafter, batch, cfg)
        optimizer_step(loss, self.optimizer, self.schedule, self.parameters, cfg.max_grad_norm)
        self.history.record(loss.item(), parts)
        self.history.seconds += time.perf_counter() - start + shared_seconds

    def state_dict(self) -> dict:
        return {"drafter": self.drafter.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "history": asdict(self.history)}

    def load_state_dict(self, state: dict) -> None:
        self.drafter.load_state_dict(state["drafter"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.history = DrafterTrainHistory(**state["history"])


def _postfix(runs: Mapping[str, DrafterRun]) -> dict[str, str]:
    """The bar's postfix: one drafter's loss and acceptance proxies, or every drafter's tau_tv."""
    if len(runs) > 1:
        return {f"tau_tv {name}": f"{run.history.expected_tau_tv[-1]:.2f}" for name, run in runs.items()}
    history = next(iter(runs.values())).history
    survival = history.prefix_survival_tv[-1]
    return {"loss": f"{history.loss[-1]:.3f}", "accept_rate@1": f"{survival[0]:.2f}",
            f"accept_rate@{len(survival)}": f"{survival[-1]:.2f}", "tau_tv": f"{history.expected_tau_tv[-1]:.2f}"}


def train_drafter(drafter: TrainableDrafter, target: PreTrainedModel, sequences: TrainingSequences,
                  cfg: DrafterTrainConfig, seed: int = 0, desc: str = "train drafter",
                  checkpoint: Checkpointer | None = None) -> DrafterTrainHistory:
    """Train `drafter` against the frozen `target` on `sequences`.

    AdamW (betas 0.9/0.95) with linear warmup and cosine decay, gradient clipping, a progress
    bar showing the loss, DeepSpec's accept_rate@k (prefix survival, from 1 - TV) at k = 1
    and k = gamma, and the expected tokens per round. Returns the curves. With a `checkpoint`,
    an interrupted run resumes where it stopped (see `train_drafters`).
    """
    return train_drafters({desc: drafter}, target, sequences, cfg, seed, desc, checkpoint)[desc]


def train_drafters(drafters: Mapping[str, TrainableDrafter], target: PreTrainedModel, sequences: TrainingSequences,
                   cfg: DrafterTrainConfig, seed: int = 0, desc: str = "train drafters",
                   checkpoint: Checkpointer | None = None) -> dict[str, DrafterTrainHistory]:
    """Train several drafters side by side, each as `train_drafter` would alone.

    The frozen target reads every sequence once, before the first step (`TargetViews`). Every
    step draws one batch and one set of anchors and reads the target's view of them once; each
    drafter then takes its own step on that `TargetBatch` with its own optimiser. With the same
    seed, a drafter's run is step for step the one it gets alone; only the target's view is
    shared. A history's `seconds` are the drafter's own steps plus an equal share of the
    target's view, so they add up to the loop's time.
    With a `checkpoint`, every drafter's state and the shared batch order are saved every few
    minutes; a run that finds them resumes and ends exactly as an uninterrupted run.
    """
    layer_ids = _drafters_to_train(drafters, target)
    generator = torch.Generator().manual_seed(seed)
    runs = {name: DrafterRun.start(drafter, cfg) for name, drafter in drafters.items()}
    target.eval()
    batches = EpochBatches(len(sequences), cfg.sequences_per_batch, generator)
    checkpoint = checkpoint or Checkpointer(None)
    done = resume_training(checkpoint, generator, batches, runs, desc)
    views = TargetViews(target, sequences, layer_ids)
    for run in runs.values():  # the view is shared: each run's history carries its share
        run.history.seconds += views.seconds / len(runs)
    bar = progress(range(done, cfg.steps), desc=desc, initial=done, total=cfg.steps)
    for step in bar:
        start = time.perf_counter()
        batch = target_batch(views, sequences, next(batches), cfg, generator)
        shared_seconds = (time.perf_counter() - start) / len(runs)  # each run's share of the target's view
        for run in runs.values():
            run.step(batch, cfg, shared_seconds)
        bar.set_postfix(_postfix(runs))
        checkpoint.maybe_save(lambda: training_state(step + 1, generator, batches, runs), last_step=step + 1 == cfg.steps)
    for name, run in runs.items():
        run.drafter.eval()
        checks.validate_finite_loss(run.history.loss[-1], name)
    return {name: run.history for name, run in runs.items()}


# --- checks (this module's door)


def _drafters_to_train(drafters: Mapping[str, TrainableDrafter], target: PreTrainedModel) -> tuple[int, ...] | None:
    """The target layers the drafters (a mapping name -> drafter) read, checked: at least one
    drafter, all reading the same layers (they share one view of the target), and none holding
    a target parameter (the target, its embedding and LM head included, stays frozen)."""
    checks.positive_int(len(drafters), "the number of drafters")
    layers = {None if d.target_layer_ids is None else tuple(d.target_layer_ids) for d in drafters.values()}
    if len(layers) != 1:
        raise ValueError(f"drafters trained together must read the same target layers, got {sorted(map(str, layers))}")
    target_parameters = {id(p) for p in target.parameters()}
    for drafter in drafters.values():
        shared = [name for name, p in drafter.named_parameters() if id(p) in target_parameters]
        if shared:
            raise ValueError(f"drafter parameters {shared} belong to the target; the target must stay frozen")
    return layers.pop()
