"""Sampling (chapters 02-04): probabilities at a temperature (the p_t and p_d of section
2's rejection rule), their total variation (1 - TV is the rule's acceptance probability), a
draw from them, and the Gumbel-max trick the drafters use to draw a whole block's noise at
once. Temperature 0 means greedy everywhere: a one-hot distribution at the argmax, and no
randomness used. These trust their input: the engine checks the temperature at its door."""
from __future__ import annotations

import torch
from torch import Tensor


def probs_from_logits(logits: Tensor, temperature: float) -> Tensor:
    """Float32 probabilities over the last axis at `temperature`; 0 means greedy, a one-hot
    vector at the argmax."""
    logits = logits.float()
    if temperature == 0:
        one_hot = torch.zeros_like(logits)
        return one_hot.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.softmax(logits / temperature, dim=-1)


def total_variation(p: Tensor, q: Tensor) -> Tensor:
    """TV(p, q) = 0.5 * ||p - q||_1 over the last axis of probabilities p, q [..., V], in
    float32, [...]: 1 - TV(p_d, p_t) is the probability that the rejection rule accepts a draft
    sampled from p_d (the trainer's TV term, Eq. 8's soft label, the KV-cache self-check)."""
    return 0.5 * (p.float() - q.float()).abs().sum(-1)


def sample_from_probs(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    """One token per row of `probs` [..., V], drawn with `generator`; returns a LongTensor of
    shape [...] on the device of `probs`."""
    device = generator_device(generator, probs.device)
    flat = probs.reshape(-1, probs.shape[-1]).to(device)
    tokens = torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
    return tokens.to(probs.device)


def gumbel_perturbed(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """float32 logits / T + G with G standard Gumbel noise, [..., V]: the argmax
    of each row is an exact draw from softmax(logits / T) (the Gumbel-max trick). At T = 0
    the logits themselves (argmax = greedy). A loop that samples rows one after another can
    draw all its noise in one call up front."""
    if temperature == 0:
        return logits.float()
    device = generator_device(generator, logits.device)
    uniform = torch.rand(logits.shape, generator=generator, device=device).to(logits.device)
    return logits.float() * (1.0 / temperature) - torch.log(-torch.log(uniform))


def sample_token(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """Sample from `logits` [..., V] at `temperature` (0 = argmax, no randomness used);
    returns a LongTensor of shape [...]."""
    if temperature == 0:
        return logits.argmax(-1)
    return sample_from_probs(probs_from_logits(logits, temperature), generator)


def generator_device(generator: torch.Generator | None, fallback: torch.device) -> torch.device:
    """Where `generator` draws (a CUDA generator draws on the GPU); `fallback` without one."""
    return generator.device if generator is not None else fallback
