"""The toy target: a small `transformers.Qwen3ForCausalLM`, trained here on CPU (chapter 01).

The same class loads Qwen/Qwen3-4B in chapter 07, so every later chapter runs unchanged
on the real model.
"""
from __future__ import annotations

import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, get_cosine_schedule_with_warmup

from ... import checks
from ...progress import progress
from ...resume import Checkpointer, restore_rng, rng_state
from ...runtime import fast_autocast
from ...training import optimizer_step
from ...training_data import pad
from .profiles import TargetConfig


def build_target(cfg: TargetConfig, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Qwen3ForCausalLM:
    """A freshly initialised Qwen3 with the profile's shape and the tokenizer's vocabulary."""
    if len(tokenizer) > cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens but the target config allows {cfg.vocab_size}")
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_positions,
        rope_theta=10_000.0, tie_word_embeddings=True, attention_dropout=0.0,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    return model


def pack(sequences: list[list[int]], seq_len: int) -> torch.Tensor:
    """Concatenate token sequences and cut them into rows of seq_len + 1 (inputs and shifted labels)."""
    flat = [t for seq in sequences for t in seq]
    rows = len(flat) // (seq_len + 1)
    if rows == 0:
        raise ValueError(f"{len(flat)} tokens cannot fill one row of {seq_len + 1}")
    return torch.tensor(flat[: rows * (seq_len + 1)]).view(rows, seq_len + 1)


@dataclass
class TrainHistory:
    """Loss curves of one training run (steps at which validation was measured)."""

    train_loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


@torch.no_grad()
def evaluate_loss(model: Qwen3ForCausalLM, rows: torch.Tensor, batch_size: int) -> float:
    """Mean next-token cross-entropy over packed rows."""
    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for i in range(0, len(rows), batch_size):
        batch = rows[i : i + batch_size].to(device)
        logits = model(input_ids=batch[:, :-1]).logits
        total += torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        count += batch[:, 1:].numel()
    model.train()
    return total / count


@contextmanager
def deterministic_algorithms():
    """`torch.use_deterministic_algorithms` inside the block, restored after it. Compiled, the
    decoder's backward scatters the embedding's gradient with parallel atomic adds, whose order
    (and so the float sums) changes from run to run; in this mode inductor falls back to aten's
    deterministic index_put, so the same code trains the same target bit for bit."""
    before, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


@deterministic_algorithms()  # the whole training, compile included
def train_causal_lm(
    model: Qwen3ForCausalLM, train_rows: torch.Tensor, val_rows: torch.Tensor, cfg: TargetConfig,
    seed: int = 0, eval_every: int = 50, desc: str = "train target", checkpoint: Checkpointer | None = None,
) -> TrainHistory:
    """AdamW with a cosine schedule over packed rows; returns the loss curves.

    Validation loss is measured every `eval_every` steps on the first 64 validation rows.
    With a `checkpoint`, the whole state is saved every few minutes and a run that finds a
    saved state resumes from it, ending exactly where an uninterrupted run would.
    """
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95), fused=True)
    sched = get_cosine_schedule_with_warmup(opt, cfg.warmup_steps, cfg.steps)
    history = TrainHistory()
    order = torch.randperm(len(train_rows), generator=generator)
    cursor, done = 0, 0
    checkpoint = checkpoint or Checkpointer(None)
    saved = checkpoint.load()
    if saved is not None:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["schedule"])
        restore_rng(generator, saved["rng"])
        order, cursor, done, history = saved["order"], saved["cursor"], saved["step"], TrainHistory(**saved["history"])
        print(f"{desc}: resuming from the checkpoint at step {done} of {cfg.steps} ({checkpoint.path})")
    start = time.perf_counter() - history.seconds
    model.train()
    body = model.base_model  # the decoder; the LM head runs after it, in float32
    forward = torch.compile(body) if cfg.compile else body
    bar = progress(range(done + 1, cfg.steps + 1), desc=desc, initial=done, total=cfg.steps)
    for step in bar:
        if cursor + cfg.batch_size > len(order):
            order, cursor = torch.randperm(len(train_rows), generator=generator), 0
        batch = train_rows[order[cursor : cursor + cfg.batch_size]].to(device)
        cursor += cfg.batch_size
        with fast_autocast(device, wide=True):  # [batch_size * seq_len, H] rows: bf16 pays on more CPUs
            try:
                hidden = forward(input_ids=batch[:, :-1]).last_hidden_state
            except Exception as error:  # torch.compile needs a C++ toolchain; without one, train eagerly
                if forward is body:
                    raise
                warnings.warn(f"{desc}: torch.compile failed ({type(error).__name__}: {error}); training without it")
                forward = body
                hidden = body(input_ids=batch[:, :-1]).last_hidden_state
        # logits [B, T, V] in float32 even under autocast: bf16 logits of size ~20 round by ~0.1
        logits = model.get_output_embeddings()(hidden.float())
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer_step(loss, opt, sched, model.parameters())
        history.train_loss.append(loss.item())
        if step % eval_every == 0 or step == cfg.steps:
            history.val_steps.append(step)
            history.val_loss.append(evaluate_loss(model, val_rows[:64], cfg.batch_size))
            bar.set_postfix(train=f"{loss.item():.3f}", val=f"{history.val_loss[-1]:.3f}")
        history.seconds = time.perf_counter() - start
        checkpoint.maybe_save(lambda: {
            "model": model.state_dict(), "optimizer": opt.state_dict(), "schedule": sched.state_dict(),
            "rng": rng_state(generator), "order": order, "cursor": cursor, "step": step,
            "history": asdict(history)}, last_step=step == cfg.steps)
    model.eval()
    history.seconds = time.perf_counter() - start
    checks.validate_finite_loss(history.train_loss[-1], desc)
    return history


@torch.no_grad()
def reply_token_stats(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[str], replies: list[str],
    batch_size: int = 32,
) -> dict[str, float]:
    """Mean next-token entropy (nats, temperature 1) and NLL of the target on reply tokens only.

    Entropy says how many continuations the target keeps open; NLL (and its exp, perplexity)
    says how well it predicts the corpus. Both are averaged over every reply token, EOS included.
    """
    from .tokenizer import format_chat

    if len(prompts) != len(replies) or not prompts:
        raise ValueError(f"need equally many prompts and replies (>0), got {len(prompts)} and {len(replies)}")
    model.eval()
    device = next(model.parameters()).device
    entropies, nlls = [], []
    for i in range(0, len(prompts), batch_size):
        starts, seqs = [], []
        for p, r in zip(prompts[i : i + batch_size], replies[i : i + batch_size]):
            starts.append(len(tokenizer(format_chat(p))["input_ids"]))
            seqs.append(tokenizer(format_chat(p, r))["input_ids"])
        ids, mask = pad(seqs, tokenizer.pad_token_id)
        logp = torch.log_softmax(model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float(), -1).cpu()
        for row, (start, seq) in enumerate(zip(starts, seqs)):
            lp = logp[row, start - 1 : len(seq) - 1]          # predictions of reply tokens
            entropies.append(-(lp.exp() * lp).sum(-1))
            nlls.append(-lp.gather(-1, torch.tensor(seq[start:])[:, None]).squeeze(-1))
    entropy, nll = torch.cat(entropies).mean().item(), torch.cat(nlls).mean().item()
    return {"entropy": entropy, "nll": nll, "perplexity": math.exp(nll)}
