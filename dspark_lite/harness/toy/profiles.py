"""Every size in the book lives here, in one table (chapter 00); HeadStudy holds chapter 04's sizes,
ConfidenceStudy 05's, ServingStudy 06 and 06b's, GpuStudy 07's.

A notebook's `parameters` cell sets PROFILE; papermill injects "smoke" in the tests.
`full` is what the rendered book shows and is sized for a 2-core CPU.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class CorpusSize:
    """How many samples the corpus generator writes per domain and split."""

    train: int
    validation: int
    eval_prompts: int


@dataclass(frozen=True)
class TargetConfig:
    """The toy Qwen3 target's shape and its training recipe.

    compile: train through `torch.compile`: inductor fuses the elementwise work around the
    matmuls, which pays for its compile (about a minute on 2 cores) only over the full target's
    training; where compiling fails (no C++ toolchain), training goes on without it.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_positions: int
    seq_len: int
    batch_size: int
    steps: int
    lr: float
    warmup_steps: int
    weight_decay: float = 0.1
    compile: bool = False


@dataclass(frozen=True)
class DrafterRecipe:
    """The hidden-state drafters' shape, training and evaluation sizes (reused by 04).

    gamma: the slots a parallel block drafts (and the autoregressive baseline's
        training-time-test horizon); 7 as the paper's Table 1.
    target_layer_ids: 0-based target layers whose hidden states form the context. As DeepSpec's
        (1, 9, 17, 25, 33 of Qwen3-4B's 36), they start at layer 1 and leave the two top layers
        and the final norm unread (the regime table and the logit lens).
    training_replies / reply_tokens: how many replies the target regenerates for training,
        and at most how many tokens each.
    steps .. loss_decay: the `training.DrafterTrainConfig` recipe (loss_decay None = gamma);
        `steps` trains DFlash, `eagle_steps` the autoregressive baseline, `dspark_steps` DSpark
        drafters trained from scratch; all three equal in the full profile, so
        every drafter of Table 1 gets the same steps x batch on the same replies,
        `finetune_steps` the steps a drafter trains on top of another trained one (the
        confidence head on DSpark-Markov).
    eval_prompts / eval_new_tokens / eval_samples: held-out prompts per domain, tokens
        generated per prompt, independent generations per prompt.
    latency_gammas / latency_repeats: the draft-latency sweep.
    collision_contexts / collision_samples: the multimodal-collision exhibit's size.
    head_rank: r of DSpark's Markov and RNN heads (256 for Qwen3-4B).
    dflash_layers / draft_intermediate_size / draft_num_heads / draft_head_dim: the parallel
        backbone's (DFlash's and DSpark's) depth, and every draft layer's MLP width, attention
        heads (one key/value head) and head width (None: the target's). The drafters keep the
        target's hidden size (they share its embedding and LM head); thin layers are what let
        the backbone be 5 layers deep, as the paper's, at the paper's share of the target (the
        regime table).
    eagle_intermediate_size / eagle_num_heads / eagle_head_dim: the EAGLE-style layer's MLP
        width, attention heads (one key/value head) and head width (None: the target's). Eagle3's
        one layer and its fc are 4.1% of Qwen3-4B's non-embedding parameters against DFlash's
        14.8% (`regime.paper_parameter_shares`); these bring ours to the same share.
    eagle_loss: what the EAGLE-style baseline trains on: "eagle3", Eagle3's soft cross-entropy
        against the target's distribution with step weights 0.8^(k-1) (DeepSpec's
        `compute_eagle3_loss`), or "dspark", the CE + TV of the parallel drafters (the ablation
        `zoo.TV_BASELINE` keeps the book's earlier baseline that way).
    """

    gamma: int
    target_layer_ids: tuple[int, ...]
    dflash_layers: int
    eagle_layers: int
    training_replies: int
    reply_tokens: int
    steps: int
    eagle_steps: int
    dspark_steps: int
    sequences_per_batch: int
    anchors_per_sequence: int
    lr: float
    warmup_steps: int
    ce_weight: float
    tv_weight: float
    loss_decay: float | None
    eval_prompts: int
    eval_new_tokens: int
    eval_samples: int
    latency_gammas: tuple[int, ...]
    latency_repeats: int
    collision_contexts: int
    collision_samples: int
    head_rank: int
    finetune_steps: int
    draft_intermediate_size: int | None = None
    draft_num_heads: int | None = None
    draft_head_dim: int | None = None
    eagle_intermediate_size: int | None = None
    eagle_num_heads: int | None = None
    eagle_head_dim: int | None = None
    eagle_loss: str = "eagle3"

    def __post_init__(self) -> None:
        if self.eagle_loss not in ("eagle3", "dspark"):
            raise ValueError(f"eagle_loss must be 'eagle3' or 'dspark', got {self.eagle_loss!r}")


@dataclass(frozen=True)
class HeadStudy:
    """The sizes of the head ablations and timings.

    ablation_steps / ablation_sequences_per_batch / ablation_block_tokens: the training every
        ablation drafter gets (all alike, so they compare with each other; the book prints how
        close to the full recipe's tau they get); anchors per sequence = ablation_block_tokens //
        gamma, so every block size sees the same number of supervised slots.
    depth_layers / deep_dflash_layers / depth_gamma: Figure 3's shallow DSpark depths, its DFlash
        depth, and their block size (one of Figure 4's, so its drafters at the backbone's depth serve
        both). As the paper's Figure 3, a 2-layer DSpark against DFlash at the backbone's 5 layers.
    ablation_gammas: Figure 4's block sizes; as the paper's two (7 and 15), a block and one
        about twice as long (each block size costs a pair of drafters' training).
    ablation_eval_prompts / ablation_eval_samples: the ablations' acceptance measurement.
    race_prompts / race_new_tokens / race_repeats: the end-to-end wall-clock race (per domain).
    overhead_repeats: draft-call timings per gamma for the head's round-latency overhead.
    """

    ablation_steps: int
    ablation_sequences_per_batch: int
    ablation_block_tokens: int
    depth_layers: tuple[int, ...]
    deep_dflash_layers: int
    depth_gamma: int
    ablation_gammas: tuple[int, ...]
    ablation_eval_prompts: int
    ablation_eval_samples: int
    race_prompts: int
    race_new_tokens: int
    race_repeats: int
    overhead_repeats: int


@dataclass(frozen=True)
class CrossoverStudy:
    """The crossover map's sizes (`crossover.sweep`): the baseline's layer shapes, each (MLP width,
    attention heads, head width; None: the target's), DFlash at the recipe's, all on the lean
    recipe of the head ablations; eval_prompts / eval_samples: held-out prompts per domain and
    generations per prompt of each drafter's tau; branch_entropy: the target's entropy (nats) above
    which a slot counts as a branch point for the slots after it (`evaluation.slot_acceptance_split`)."""

    eagle_shapes: tuple[tuple[int, int, int | None], ...]
    eval_prompts: int
    eval_samples: int
    branch_entropy: float


@dataclass(frozen=True)
class ConfidenceStudy:
    """The confidence study's sizes: the recorded rollouts that calibration is measured on.

    rollout_prompts / rollout_samples: held-out prompts per domain and generations per prompt
        whose every round is recorded (confidences c_1..c_gamma and the accepted count).
    frozen_head_steps: steps that train a confidence head alone on the frozen DSpark-Markov drafter.
    calibration_fraction: share of the recorded blocks that fits the calibrators (the rest tests).
    resplits: further random calibration/test splits on which the calibrators are refitted, to
        show how much their test ECE moves with the split.
    thresholds: the static thresholds of the Figure 5 sweep.
    """

    rollout_prompts: int
    rollout_samples: int
    frozen_head_steps: int
    calibration_fraction: float
    thresholds: tuple[float, ...]
    resplits: int


@dataclass(frozen=True)
class ServingStudy:
    """The serving study's sizes: the cost table, the serving simulator and the real batched step.

    profile_points / profile_context / profile_repeats: batch sizes B profiled per concurrency R
        (evenly from R to R(gamma + 1), interpolated between), the requests' cached context
        length, and timings per size (median).
    concurrencies: the R values of the simulator's sweep; sim_steps: steps simulated per R.
    real_concurrencies / real_repeats: the real batched verification step's R values and timings.
    appendix_a_trials: Monte Carlo trials per scheduler in the Appendix A test (the claim needs >= 100k).
    check_instances: random small instances on which Algorithm 1 is checked against its reference
        loop and against brute force.
    sim_replays: independent replays the simulated steps are split into; their spread is the noise.
    ranking_tie: schedulers predicted within this relative gap of each other count as tied when the
        real batched steps' ranking is checked.
    """

    profile_points: int
    profile_context: int
    profile_repeats: int
    concurrencies: tuple[int, ...]
    sim_steps: int
    real_concurrencies: tuple[int, ...]
    real_repeats: int
    appendix_a_trials: int
    check_instances: int
    sim_replays: int
    ranking_tie: float


@dataclass(frozen=True)
class GpuStudy:
    """The GPU study's sizes: Qwen3-4B with the released drafters on a GPU, and the tiny random world
    the measurement falls back to without one (every CPU run, whatever the profile).

    prompts_per_benchmark: prompts per Table 1 benchmark (None: DeepSpec's counts, the full protocol).
    new_tokens / gamma / temperature: generation length per prompt, drafted tokens per round and
        the sampling temperature of target and drafter (the paper: gamma 7, T = 1.0).
    calibration_fraction / thresholds: the STS split and the static-threshold sweep.
    race_prompts / race_new_tokens / race_repeats: the wall-clock race of our engine against
        target-only decoding.
    profile_points / profile_context / profile_repeats: the SPS(B) profiler on the
        target, one table per concurrency; concurrencies / sim_steps / sim_replays: the serving
        simulator re-run with those tables.
    tiny_*: the fallback world: a random Qwen3 target (hidden size, layers, heads of 16) and a
        random DSpark drafter (draft layers, Markov rank) on a BPE vocabulary of tiny_vocab.
    """

    prompts_per_benchmark: int | None
    new_tokens: int
    gamma: int
    temperature: float
    calibration_fraction: float
    thresholds: tuple[float, ...]
    race_prompts: int
    race_new_tokens: int
    race_repeats: int
    profile_points: int
    profile_context: int
    profile_repeats: int
    concurrencies: tuple[int, ...]
    sim_steps: int
    sim_replays: int
    tiny_vocab: int
    tiny_hidden: int
    tiny_layers: int
    tiny_heads: int
    tiny_draft_layers: int
    tiny_head_rank: int
    timed_prompts: int = 4  # per benchmark and drafter: a seeded sample generated with the phase stopwatch on


@dataclass(frozen=True)
class Profile:
    """All sizes of one profile. Chapters read the fields they need.

    regime_sequences: validation replies per domain that the regime table and the logit
        lens read.
    drafter_seeds: how many training seeds each drafter a verdict compares trains from (Table 1's,
        the lean ablation drafters, the confidence drafter), so that every interval
        holds the drafters' training noise (`zoo.drafter_seeds`; `$DSPARK_SEED` picks the base).
    """

    name: str
    corpus: CorpusSize
    target: TargetConfig
    draft_lm: TargetConfig
    decode_prompts: int
    decode_new_tokens: int
    cost_context: int
    cost_max_queries: int
    cost_repeats: int
    spec_prompts: int
    spec_new_tokens: int
    race_repeats: int
    gammas: tuple[int, ...]
    drafter: DrafterRecipe
    heads: HeadStudy
    confidence: ConfidenceStudy
    serving: ServingStudy
    gpu: GpuStudy
    crossover: CrossoverStudy
    regime_sequences: int = 12
    drafter_seeds: int = 3
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_FULL = Profile(
    name="full",
    corpus=CorpusSize(train=5000, validation=200, eval_prompts=40),
    target=TargetConfig(
        vocab_size=2048, hidden_size=128, num_layers=6, num_heads=4, num_kv_heads=2,
        head_dim=32, intermediate_size=384, max_positions=512, seq_len=256,
        batch_size=16, steps=1000, lr=3e-3, warmup_steps=40, compile=True,
    ),
    draft_lm=TargetConfig(
        vocab_size=2048, hidden_size=96, num_layers=2, num_heads=2, num_kv_heads=1,
        head_dim=48, intermediate_size=256, max_positions=512, seq_len=256,
        batch_size=16, steps=200, lr=3e-3, warmup_steps=20,
    ),
    decode_prompts=6,
    decode_new_tokens=96,
    cost_context=192,
    cost_max_queries=32,
    cost_repeats=15,
    spec_prompts=8,
    spec_new_tokens=96,
    race_repeats=5,
    gammas=(1, 2, 3, 4, 6, 8),
    drafter=DrafterRecipe(
        gamma=7, target_layer_ids=(1, 3), dflash_layers=5, eagle_layers=1,
        training_replies=1500, reply_tokens=128, steps=2000, eagle_steps=2000, dspark_steps=2000, sequences_per_batch=4,
        anchors_per_sequence=32, lr=3e-3, warmup_steps=30, ce_weight=0.1, tv_weight=0.9,
        loss_decay=4.0, eval_prompts=40, eval_new_tokens=128, eval_samples=2,
        latency_gammas=(1, 2, 4, 8, 12, 16), latency_repeats=20,
        collision_contexts=20, collision_samples=10, head_rank=8, finetune_steps=500,
        draft_intermediate_size=48, draft_num_heads=1, draft_head_dim=32, eagle_intermediate_size=24, eagle_num_heads=1, eagle_head_dim=8,
    ),
    heads=HeadStudy(
        ablation_steps=1600, ablation_sequences_per_batch=2, ablation_block_tokens=224, depth_layers=(2,),
        deep_dflash_layers=5, depth_gamma=8, ablation_gammas=(8, 16), ablation_eval_prompts=20, ablation_eval_samples=1,
        race_prompts=8, race_new_tokens=128, race_repeats=3, overhead_repeats=40,
    ),
    confidence=ConfidenceStudy(rollout_prompts=40, rollout_samples=3, frozen_head_steps=300, resplits=8,
                               calibration_fraction=0.5, thresholds=tuple(round(0.1 * i, 1) for i in range(10))),
    serving=ServingStudy(
        profile_points=8, profile_context=128, profile_repeats=15,
        concurrencies=(1, 2, 4, 8, 16, 32, 64, 128, 256), sim_steps=300, real_concurrencies=(1, 4, 16), real_repeats=12,
        appendix_a_trials=200_000, check_instances=400, sim_replays=4, ranking_tie=0.10,
    ),
    gpu=GpuStudy(
        prompts_per_benchmark=20, new_tokens=256, gamma=7, temperature=1.0, calibration_fraction=0.5,
        thresholds=tuple(round(0.1 * i, 1) for i in range(10)), race_prompts=4, race_new_tokens=256, race_repeats=3,
        profile_points=8, profile_context=256, profile_repeats=5, concurrencies=(1, 2, 4, 8, 16, 32, 64),
        sim_steps=400, sim_replays=4,
        tiny_vocab=400, tiny_hidden=64, tiny_layers=4, tiny_heads=4, tiny_draft_layers=2, tiny_head_rank=16,
    ),
    crossover=CrossoverStudy(eagle_shapes=((24, 1, 8), (8, 1, 32), (32, 2, None)), eval_prompts=20, eval_samples=1,
                             branch_entropy=0.5),
)

_SMOKE = Profile(
    name="smoke",
    corpus=CorpusSize(train=150, validation=30, eval_prompts=4),
    target=TargetConfig(
        vocab_size=600, hidden_size=32, num_layers=4, num_heads=2, num_kv_heads=1,
        head_dim=16, intermediate_size=96, max_positions=512, seq_len=128,
        batch_size=8, steps=15, lr=3e-3, warmup_steps=3,
    ),
    draft_lm=TargetConfig(
        vocab_size=600, hidden_size=16, num_layers=1, num_heads=1, num_kv_heads=1,
        head_dim=16, intermediate_size=32, max_positions=512, seq_len=128,
        batch_size=8, steps=10, lr=3e-3, warmup_steps=2,
    ),
    decode_prompts=2,
    decode_new_tokens=16,
    cost_context=32,
    cost_max_queries=8,
    cost_repeats=2,
    spec_prompts=2,
    spec_new_tokens=16,
    race_repeats=2,
    gammas=(1, 3),
    drafter=DrafterRecipe(
        gamma=4, target_layer_ids=(1,), dflash_layers=2, eagle_layers=1,
        training_replies=24, reply_tokens=24, steps=8, eagle_steps=6, dspark_steps=6, sequences_per_batch=4,
        anchors_per_sequence=8, lr=3e-3, warmup_steps=2, ce_weight=0.1, tv_weight=0.9,
        loss_decay=4.0, eval_prompts=2, eval_new_tokens=16, eval_samples=1,
        latency_gammas=(1, 4), latency_repeats=2,
        collision_contexts=2, collision_samples=2, head_rank=8, finetune_steps=4,
        draft_intermediate_size=8, draft_num_heads=1, draft_head_dim=16,
    ),
    heads=HeadStudy(
        ablation_steps=3, ablation_sequences_per_batch=2, ablation_block_tokens=16, depth_layers=(1,),
        deep_dflash_layers=2, depth_gamma=4, ablation_gammas=(2, 4), ablation_eval_prompts=1, ablation_eval_samples=1,
        race_prompts=1, race_new_tokens=8, race_repeats=1, overhead_repeats=2,
    ),
    confidence=ConfidenceStudy(rollout_prompts=2, rollout_samples=1, frozen_head_steps=3, resplits=2,
                               calibration_fraction=0.5, thresholds=(0.0, 0.3, 0.6, 0.9)),
    serving=ServingStudy(
        profile_points=3, profile_context=16, profile_repeats=1,
        concurrencies=(1, 2, 4), sim_steps=10, real_concurrencies=(1, 4), real_repeats=1,
        appendix_a_trials=200_000, check_instances=400, sim_replays=4, ranking_tie=0.10,
    ),
    gpu=GpuStudy(
        prompts_per_benchmark=1, new_tokens=40, gamma=7, temperature=1.0, calibration_fraction=0.5,
        thresholds=(0.0, 0.3, 0.6, 0.9), race_prompts=1, race_new_tokens=16, race_repeats=1,
        profile_points=3, profile_context=16, profile_repeats=1, concurrencies=(1, 2), sim_steps=20, sim_replays=2,
        tiny_vocab=400, tiny_hidden=64, tiny_layers=4, tiny_heads=4, tiny_draft_layers=2, tiny_head_rank=16,
    ),
    crossover=CrossoverStudy(eagle_shapes=((8, 1, 8), (16, 2, None)), eval_prompts=1, eval_samples=1, branch_entropy=0.5),
    regime_sequences=2,
    drafter_seeds=2,
)

PROFILES: dict[str, Profile] = {"full": _FULL, "smoke": _SMOKE}


def get_profile(name: str, **overrides: Any) -> Profile:
    """Return the named profile ("full" or "smoke"), with optional top-level overrides."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; expected one of {sorted(PROFILES)}")
    return replace(PROFILES[name], **overrides) if overrides else PROFILES[name]
