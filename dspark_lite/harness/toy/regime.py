"""Where the toy world sits against the paper's setup (chapter 01): the measurements of the
regime table.

Three properties of the paper's setting decide which drafter wins, and each is measured here
on the toy world and set beside Qwen3-4B's value:

* **size**: a drafter's non-embedding parameters as a share of the target's
  (`non_embedding_parameters`);
* **what is read**: how many target layers, and whether the final norm, sit above the highest
  layer a drafter reads (`layers_above_read`); `logit_lens` shows how close each layer already
  is to the target's output;
* **what kind of uncertainty**: the target's next-token entropy per domain, and how much of the
  next-but-one token's entropy only the token in between settles (`block_dependency`), which
  a drafter sampling in order sees and a parallel drafter cannot.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn

QWEN3_4B = {"hidden": 2560, "intermediate": 9728, "heads": 32, "kv_heads": 8, "head_dim": 128, "layers": 36,
            "vocab": 151936}
"""Qwen3-4B's shape (its config.json on the hub), for the paper's side of the table."""

PAPER_READ_LAYERS = (1, 9, 17, 25, 33)
"""The target layers DeepSpec's Qwen3-4B drafters read (0-based; DFlash, DSpark and Eagle3)."""


def qwen3_layer_parameters(hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                           attention_input: int | None = None) -> int:
    """Weights of one Qwen3 decoder layer (q/k/v/o projections, q/k norms, SwiGLU MLP, two
    RMSNorms); `attention_input` is q/k/v's input width (EAGLE-3's layer reads 2 x hidden)."""
    width = attention_input or hidden
    attention = width * head_dim * (heads + 2 * kv_heads) + heads * head_dim * hidden + 2 * head_dim
    return attention + 3 * hidden * intermediate + 2 * hidden


def paper_parameter_shares() -> dict[str, float]:
    """Eagle3's and DFlash's non-embedding parameters as a share of Qwen3-4B's, from the shapes
    of DeepSpec's configs: DFlash 5 target-shaped layers, fc over 5 read layers and a norm;
    Eagle3 one layer whose attention reads [embedding; feature] (2 x hidden), fc over the same 5
    read layers (DeepSpec's `validate_eagle3_target_layer_ids` requires exactly 5) and a norm."""
    q = QWEN3_4B
    shape = dict(hidden=q["hidden"], intermediate=q["intermediate"], heads=q["heads"], kv_heads=q["kv_heads"],
                 head_dim=q["head_dim"])
    layer = qwen3_layer_parameters(**shape)
    target = q["layers"] * layer + q["hidden"]
    read = len(PAPER_READ_LAYERS)
    dflash = 5 * layer + read * q["hidden"] ** 2 + 2 * q["hidden"]
    eagle = qwen3_layer_parameters(**shape, attention_input=2 * q["hidden"]) + q["hidden"] + read * q["hidden"] ** 2
    return {"EAGLE-style": eagle / target, "DFlash": dflash / target}


PAPER_DRAFT_LAYERS = {"DFlash": 5, "EAGLE-style": 1}
"""Decoder layers of DeepSpec's Qwen3-4B DFlash (and DSpark backbone) and Eagle3."""

SHARE_BAND = 1.5
"""A toy drafter's share of the target sits on the paper's side when within this factor of the paper's."""


def share_band(paper: float) -> tuple[float, float]:
    """The band of shares held to the paper's: [paper / SHARE_BAND, paper x SHARE_BAND]."""
    return paper / SHARE_BAND, paper * SHARE_BAND


def paper_head_share() -> float:
    """DSpark's Markov head (2 x V x r, r = 256, Eq. 5) as a share of its DFlash backbone's
    non-embedding parameters on Qwen3-4B (DeepSpec's dspark_qwen3_4b config): about 14%."""
    q = QWEN3_4B
    layer = qwen3_layer_parameters(hidden=q["hidden"], intermediate=q["intermediate"], heads=q["heads"],
                                   kv_heads=q["kv_heads"], head_dim=q["head_dim"])
    backbone = 5 * layer + 5 * q["hidden"] ** 2 + 2 * q["hidden"]
    return 2 * q["vocab"] * 256 / backbone


def non_embedding_parameters(model: nn.Module) -> int:
    """Trainable weights outside the token embedding and the LM head (a drafter shares the
    target's, so neither counts for either)."""
    skip = set()
    for name in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, name, lambda: None)()
        if module is not None:
            skip |= {id(p) for p in module.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def layers_above_read(num_target_layers: int, layer_ids: Sequence[int]) -> int:
    """How many target decoder layers sit above the highest one a drafter reads (the final
    norm always sits above them all when this is > 0; at 0 the drafter reads the layer whose
    output transformers replaces by the final normed state)."""
    return num_target_layers - 1 - max(layer_ids)


@torch.inference_mode()
def logit_lens(target: nn.Module, sequences: Sequence[Tensor], reply_starts: Sequence[int]) -> list[dict[str, float]]:
    """Each decoder layer's output read through the target's final norm and LM head, against
    the target's own next-token distribution on the reply positions: top-1 agreement and the
    total variation distance (1 - TV is the acceptance rate such a one-step draft would get).
    Layer L-1's row is the target itself (agreement 1, TV 0)."""
    norm, head = target.model.norm, target.get_output_embeddings()
    per_layer: list[list[tuple[Tensor, Tensor]]] = []
    for ids, start in zip(sequences, reply_starts):
        out = target(input_ids=ids[None], output_hidden_states=True)
        final = out.logits[0, start - 1:-1].float().softmax(-1)
        states = out.hidden_states[1:-1] + (None,)  # hidden_states[-1] is already normed
        rows = []
        for layer, state in enumerate(states):
            probs = final if state is None else head(norm(state[0, start - 1:-1])).float().softmax(-1)
            rows.append(((probs.argmax(-1) == final.argmax(-1)).float(), 0.5 * (probs - final).abs().sum(-1)))
        per_layer.append(rows)
    table = []
    for layer in range(len(per_layer[0])):
        agree = torch.cat([seq[layer][0] for seq in per_layer])
        tv = torch.cat([seq[layer][1] for seq in per_layer])
        table.append({"layer": layer, "top1_agreement": agree.mean().item(), "tv": tv.mean().item()})
    return table


def _entropy(probs: Tensor) -> Tensor:
    return -(probs * probs.clamp_min(1e-30).log()).sum(-1)


@torch.inference_mode()
def block_dependency(target: nn.Module, sequences: Sequence[Tensor], reply_starts: Sequence[int],
                     anchors_per_sequence: int = 8, mass: float = 0.99, generator: torch.Generator | None = None
                     ) -> dict[str, float]:
    """How much of the next-but-one token's entropy only the token in between settles.

    At anchor t (the context x_<=t), the target gives p(x_t+1 | ctx) and, for each likely
    x_t+1 = v (top tokens covering `mass`), p(x_t+2 | ctx, v). A drafter that samples in order
    faces the conditional entropy E_v H(x_t+2 | ctx, v); a parallel drafter, which cannot see
    v, at best the marginal H(sum_v p(v) p(. | ctx, v)). Their difference is the mutual
    information I(x_t+1; x_t+2 | ctx) in nats: zero when every choice is settled by the context.
    Returns the means of H(x_t+1), the conditional and marginal entropies of x_t+2, and the
    mutual information, over anchors drawn uniformly from the reply positions."""
    h1, cond, marg = [], [], []
    for ids, start in zip(sequences, reply_starts):
        if len(ids) - start < 2:  # no anchor with two reply tokens after it
            continue
        picks = torch.randint(start - 1, len(ids) - 2, (anchors_per_sequence,), generator=generator)
        logits = target(input_ids=ids[None]).logits[0].float()
        for t in picks.tolist():
            p1 = logits[t].softmax(-1)
            order = p1.argsort(descending=True)
            keep = int((p1[order].cumsum(0) < mass).sum().item()) + 1
            tokens, weights = order[:keep], p1[order[:keep]] / p1[order[:keep]].sum()
            batch = torch.cat([ids[: t + 1].expand(keep, -1), tokens[:, None]], dim=1)
            p2 = target(input_ids=batch).logits[:, -1].float().softmax(-1)
            h1.append(_entropy(p1).item())
            cond.append((weights * _entropy(p2)).sum().item())
            marg.append(_entropy((weights[:, None] * p2).sum(0)).item())
    mean = lambda xs: sum(xs) / len(xs) if xs else math.nan
    return {"next_entropy": mean(h1), "conditional_entropy": mean(cond), "marginal_entropy": mean(marg),
            "mutual_information": mean(marg) - mean(cond), "anchors": len(h1)}


def chat_choice_entropy(knobs, point: str = "opener") -> dict[str, float]:
    """How much the prompt tells about one chat choice, exactly, from the generator's weights
    (`samplers.PromptSkew`): the mean entropy of the choice given the prompt, and the entropy of
    the same choice pooled over all prompts (nats). Equal at chat_skew 0 (uniform choices)."""
    from . import samplers
    from .knobs import Rng

    n = min(knobs.chat_branching, len(samplers.OPENERS))
    given, pooled = [], torch.zeros(n, dtype=torch.float64)
    keys = [f"{t}/{a}" for t in range(len(samplers.CHAT_TOPICS)) for a in range(len(samplers.ASKS))]
    for key in keys:
        w = torch.tensor(samplers.PromptSkew(Rng(0), key, knobs.chat_skew).weights(n, point), dtype=torch.float64)
        p = w / w.sum()
        given.append(_entropy(p).item())
        pooled += p / len(keys)
    return {"given_prompt": sum(given) / len(given), "pooled": _entropy(pooled).item()}


def paper_layers_above_read() -> int:
    """Qwen3-4B's layers above the highest one DeepSpec's drafters read (34 and 35)."""
    return layers_above_read(QWEN3_4B["layers"], PAPER_READ_LAYERS)


def regime_rows(target: nn.Module, drafters: dict[str, nn.Module], layer_ids: Sequence[int],
                dependency: dict[str, dict[str, float]], knobs, head: tuple[nn.Module, nn.Module] | None = None
                ) -> list[dict[str, object]]:
    """The regime table: each property measured on the toy world beside
    Qwen3-4B's value, and the line that says which side of it is the paper's.

    drafters: {name: an (untrained) drafter of the recipe's shape}, named as in
    `paper_parameter_shares`; dependency: `block_dependency` per domain; head: (DSpark's Markov
    head, its DFlash backbone), for the head's share of the backbone (`paper_head_share`)."""
    target_params = non_embedding_parameters(target)
    paper = paper_parameter_shares()
    rows: list[dict[str, object]] = []
    for name, drafter in drafters.items():
        share = non_embedding_parameters(drafter) / target_params
        row = {"property": f"{name}: non-embedding parameters / target's", "toy world": f"{share:.1%}",
               "paper (Qwen3-4B)": f"{paper[name]:.1%}" if name in paper else "-",
               "paper's side of the line": "-", "inside": None}
        if name in paper:
            low, high = share_band(paper[name])
            row.update({"paper's side of the line": f"{low:.1%} to {high:.1%}", "inside": bool(low <= share <= high)})
        rows.append(row)
    if head is not None:
        share = non_embedding_parameters(head[0]) / non_embedding_parameters(head[1])
        low, high = share_band(paper_head_share())
        rows.append({"property": "DSpark's Markov head: parameters / its DFlash backbone's", "toy world": f"{share:.1%}",
                     "paper (Qwen3-4B)": f"{paper_head_share():.1%}", "paper's side of the line": f"{low:.1%} to {high:.1%}",
                     "inside": bool(low <= share <= high)})
    depths = {name: len(drafter.layers) for name, drafter in drafters.items() if name in PAPER_DRAFT_LAYERS}
    if len(depths) == 2:
        layers = target.config.num_hidden_layers
        paper_ratio = PAPER_DRAFT_LAYERS["DFlash"] / PAPER_DRAFT_LAYERS["EAGLE-style"]
        low, high = share_band(paper_ratio)
        rows.append({"property": "depth: DFlash's decoder layers : the EAGLE-style baseline's",
                     "toy world": f"{depths['DFlash']} : {depths['EAGLE-style']}",
                     "paper (Qwen3-4B)": f"{PAPER_DRAFT_LAYERS['DFlash']} : {PAPER_DRAFT_LAYERS['EAGLE-style']}",
                     "paper's side of the line": f"{low:.1f} : 1 to {high:.1f} : 1",
                     "inside": bool(low <= depths["DFlash"] / depths["EAGLE-style"] <= high)})
        rows.append({"property": "one draft layer's share of the target's depth", "toy world": f"1/{layers}",
                     "paper (Qwen3-4B)": f"1/{QWEN3_4B['layers']}",
                     "paper's side of the line": "not held: the toy target has too few layers", "inside": None})
    above = layers_above_read(target.config.num_hidden_layers, layer_ids)
    rows.append({"property": "target layers above the highest layer read (and the final norm)",
                 "toy world": f"{above} of {target.config.num_hidden_layers}",
                 "paper (Qwen3-4B)": f"{paper_layers_above_read()} of {QWEN3_4B['layers']}",
                 "paper's side of the line": "at least 1", "inside": bool(above >= 1)})
    choice = chat_choice_entropy(knobs)
    rows.append({"property": "chat: entropy of the opener given the prompt / pooled over prompts (nats)",
                 "toy world": f"{choice['given_prompt']:.2f} / {choice['pooled']:.2f}",
                 "paper (Qwen3-4B)": "real requests skew real replies",
                 "paper's side of the line": "lower given the prompt", "inside": bool(choice["given_prompt"] < choice["pooled"] - 1e-9)})
    for domain, dep in dependency.items():
        share = dep["mutual_information"] / dep["marginal_entropy"] if dep["marginal_entropy"] > 0 else 0.0
        rows.append({"property": f"{domain}: entropy of the next token (nats)", "toy world": f"{dep['next_entropy']:.3f}",
                     "paper (Qwen3-4B)": "not reported", "paper's side of the line": "-", "inside": None})
        rows.append({"property": f"{domain}: share of the next-but-one token's entropy that only the token between settles",
                     "toy world": f"{share:.1%}", "paper (Qwen3-4B)": "not reported",
                     "paper's side of the line": "-", "inside": None})
    return rows


def reply_sequences(world, domain: str, n: int, device: torch.device | str | None = None
                    ) -> tuple[list[Tensor], list[int]]:
    """The first n validation conversations of a domain as token ids, and where each reply
    starts: what `block_dependency` and `logit_lens` read."""
    from .tokenizer import format_chat

    part = world.split("validation", (domain,))
    part = part.select(range(min(n, len(part))))
    encode = lambda text: world.tokenizer(text)["input_ids"]
    ids = [torch.tensor(encode(format_chat(p, r)), device=device) for p, r in zip(part["prompt"], part["reply"])]
    return ids, [len(encode(format_chat(p))) for p in part["prompt"]]
