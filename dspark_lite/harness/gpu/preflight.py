"""Chapter 07's setup, checked before any weight is read: `check_setup` checks every input (mode
and device, prompt source, results folder, model sources, dtype, GPU memory) and names the
parameter to set; the notebook and the command line both call it. Also the run's environment and
its results file.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
import transformers
from transformers import Qwen3Config

from ...runtime import pick_dtype
from ..result_files import committed_results_dir, describe_path, results_dir, write_result
from ..toy.profiles import GpuStudy, get_profile
from . import checkpoints, evalsets
from .loading import DRAFTER_IDS, QWEN3_4B, TARGET_ID, World, gpu_name, resolve_mode, slug
from .measure import PAPER_NEW_TOKENS, comparable_to_paper, load_prompts, run_protocol
from .memory import affordable_concurrencies, free_memory_bytes, memory_table, profile_step_bytes

# ========================================================================== environment and results


def environment(world: World, study: GpuStudy, seed: int, counts: Mapping[str, int],
                prompt_source: str = "fixture") -> dict[str, Any]:
    """Where and how the run was measured: GPU, versions, dtype, mode, prompt source, sources,
    prompt counts, generation length, end ids, seed."""
    env = {"mode": world.mode, "device": str(world.device), "gpu": gpu_name(world.device),
           "dtype": str(world.dtype).replace("torch.", ""), "torch": torch.__version__,
           "transformers": transformers.__version__, "cuda": torch.version.cuda, "seed": seed,
           "prompt_source": prompt_source, "comparable_to_paper": comparable_to_paper(world.mode, prompt_source),
           "protocol": run_protocol(world.mode, prompt_source, counts, study.new_tokens, study.temperature,
                                    study.gamma) or "none",
           "prompt_counts": dict(counts), "gamma": study.gamma, "temperature": study.temperature,
           "new_tokens": study.new_tokens, "paper_new_tokens": PAPER_NEW_TOKENS, "eos_token_ids": world.eos_token_ids,
           "sources": dict(world.sources),
           "measured_where": ("GPU" if world.device.type == "cuda" else "CPU") + {
               "real": "", "random-weights": " (random weights: acceptance numbers meaningless)",
               "smoke": " (tiny random models: every number meaningless)"}[world.mode]}
    if world.device.type == "cuda":
        props = torch.cuda.get_device_properties(world.device)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["gpu_count"] = torch.cuda.device_count()
        env["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(world.device)))
    return env


def results_file(mode: str, device: torch.device, prompt_source: str = "deepspec", subset: bool = False) -> Path:
    """data/results/qwen3_4b_<gpu>.json for a real GPU run of DeepSpec's full protocol, with a
    suffix otherwise: ..._subset.json (real weights on DeepSpec's prompts at smaller sizes),
    ..._fixture.json (real weights on the fixture prompts: never Table 1), ..._random_weights.json;
    $DSPARK_RESULTS/qwen3_4b_<mode>.json on a CPU (a CPU run never writes into data/results)."""
    if device.type == "cuda" and mode in ("real", "random-weights"):
        suffix = ("_random_weights" if mode == "random-weights" else "_fixture" if prompt_source == "fixture"
                  else "_subset" if subset else "")
        return committed_results_dir() / f"qwen3_4b_{slug(gpu_name(device))}{suffix}.json"
    return results_dir() / f"qwen3_4b_{mode.replace('-', '_')}.json"


def result_path(world: World, prompt_source: str = "deepspec", subset: bool = False) -> Path:
    """`results_file` of a loaded world."""
    return results_file(world.mode, world.device, prompt_source, subset)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def save_results(world: World, payload: Mapping[str, Any], profile: str, path: Path | None = None,
                 prompt_source: str = "deepspec") -> Path:
    """Write the run's payload with its provenance and environment to `path` (default:
    `result_path`, a subset run's name when the payload says "subset"); returns the path."""
    path = path or result_path(world, prompt_source, "subset" in payload)
    return write_result(path, _jsonable(dict(payload)), profile, str(world.device))


# ========================================================================== the setup, checked before any weight is read

DTYPES: dict[str, torch.dtype | None] = {"auto": None, "bfloat16": torch.bfloat16, "float32": torch.float32}
REFUSED_DTYPES = ("float16", "fp16", "half")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")  # owner/name
PROMPT_TOKENS_ESTIMATE = 1024  # a long benchmark prompt (LiveCodeBench's reach about a thousand tokens)
MEMORY_SLACK_GIB = 1.0  # activations, the verify step's logits, the allocator's slack
# Where each setting comes from: (the notebook's parameter, the command line's flag).
SETTINGS: dict[str, tuple[str, str]] = {
    "mode": ("MODE", "--mode"),
    "device": ("DEVICE", "--device"),
    "prompts": ("EVAL_FOLDER, DOWNLOAD_PROMPTS or ALLOW_FIXTURE", "--eval-folder, --download-prompts or --allow-fixture"),
    "eval_folder": ("EVAL_FOLDER", "--eval-folder"),
    "out": ("OUT", "--out"),
    "target": ("TARGET", "--target"),
    "drafter": ('DRAFTERS["{kind}"]', "--{kind}"),
    "drafters": ("DRAFTERS", "one of the drafter flags"),
    "dtype": ("DTYPE", "--dtype"),
    "count": ("PROMPTS_PER_BENCHMARK", "--prompts"),
    "new_tokens": ("NEW_TOKENS", "--new-tokens"),
}


class SetupError(ValueError):
    """A GPU run's setting that cannot work, found before any weight is read; the
    message says what is wrong and which parameter to set (the notebook's and the command line's)."""


def _refuse(setting: str, problem: str, kind: str = "") -> SetupError:
    name, flag = (text.format(kind=kind) for text in SETTINGS[setting])
    return SetupError(f"{problem}. Set {name} (command line: {flag})")


@dataclass(frozen=True)
class Setup:
    """The GPU run's settings once `check_setup` accepted them: the mode, device and dtype, the
    study with its prompt count and generation length, the prompts per benchmark and their source,
    where the results go, the model sources, the protocol the run will be filed under ("table1",
    "subset" or None: `run_protocol`), the memory estimate and notes for the reader."""

    mode: str
    device: torch.device
    dtype: torch.dtype
    study: GpuStudy
    counts: Mapping[str, int]
    prompt_source: str
    eval_folder: Path | None
    out: Path | None
    results_folder: Path
    target: str
    drafters: Mapping[str, str]
    protocol: str | None
    need_gib: float | None = None
    free_gib: float | None = None
    notes: tuple[str, ...] = ()

    def load_prompts(self) -> tuple[dict[str, list[str]], str]:
        """The prompts from the checked source (`load_prompts`) and its name."""
        return load_prompts(dict(self.counts), self.eval_folder, self.prompt_source == "hub",
                            self.prompt_source == "fixture")

    def describe(self) -> list[str]:
        """The setup in a few printable lines, without machine paths."""
        filed = {"table1": "Table 1 (DeepSpec's full protocol)", "subset": "a subset of Table 1's protocol",
                 None: "not comparable with the paper"}[self.protocol]
        sizes = sorted(set(self.counts.values()))
        lines = [f"mode {self.mode}, {str(self.dtype).replace('torch.', '')}, prompts from {self.prompt_source} "
                 f"({'-'.join(map(str, sizes[::max(1, len(sizes) - 1)]))} a benchmark), {self.study.new_tokens} new "
                 f"tokens a prompt: filed as {filed}",
                 f"results go to {describe_path(self.out) if self.out else describe_path(self.results_folder)}"]
        if self.need_gib is not None:
            lines.append(f"GPU memory: about {self.need_gib:.1f} GiB needed, {self.free_gib:.1f} GiB free")
        return lines + list(self.notes)


def _count(value: Any, study: GpuStudy) -> int | None:
    if value == "profile":
        return study.prompts_per_benchmark
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise _refuse("count", f"prompts per benchmark must be a whole number >= 1, None for DeepSpec's counts or "
                               f"'profile', got {value!r}")
    return int(value)


def _new_tokens(value: Any, study: GpuStudy) -> int:
    if value == "profile":
        return study.new_tokens
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise _refuse("new_tokens", f"new tokens per prompt must be a whole number >= 1 (DeepSpec: {PAPER_NEW_TOKENS}) "
                                    f"or 'profile', got {value!r}")
    return int(value)


def _check_prompt_source(mode: str, eval_folder: Any, download: bool, allow_fixture: bool) -> tuple[str, Path | None]:
    if eval_folder is not None:
        given = Path(eval_folder).expanduser()
        if not given.is_dir():
            raise _refuse("eval_folder", f"the evaluation folder {describe_path(given)} does not exist; expected a clone "
                                         "of deepseek-ai/DeepSpec or its eval_datasets/")
        folder = evalsets.eval_folder(given)
        missing = [n for n in evalsets.TABLE1_ORDER if not (folder / f"{n}.jsonl").is_file()]
        if missing:
            raise _refuse("eval_folder", f"the evaluation folder {describe_path(folder)} lacks {len(missing)} of the nine "
                                         f"benchmark files ({', '.join(f'{n}.jsonl' for n in missing)}); expected a clone "
                                         "of deepseek-ai/DeepSpec, whose eval_datasets/ holds them")
        return "deepspec", folder
    if download:
        if checkpoints.hub_offline() or os.environ.get("HF_DATASETS_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
            raise _refuse("eval_folder", "downloading the prompts was asked for, but the hub is offline (HF_HUB_OFFLINE "
                                         "or HF_DATASETS_OFFLINE): nothing can be downloaded; pass a clone of "
                                         "deepseek-ai/DeepSpec instead")
        import importlib.util

        if importlib.util.find_spec("datasets") is None:
            raise _refuse("eval_folder", "downloading the prompts needs the `datasets` package (pip install datasets), "
                                         "which is not installed; or pass a clone of deepseek-ai/DeepSpec")
        return "hub", None
    if allow_fixture or mode != "real":
        return "fixture", None
    raise _refuse("prompts", "no evaluation prompts: Table 1 needs DeepSpec's evaluation files (a clone of "
                             "deepseek-ai/DeepSpec) or the hub to rebuild them; the book's fixture prompts are not the "
                             "benchmarks, and a run on them is saved as a fixture run, never compared with the paper")


def _check_dtype(value: Any, device: torch.device, mode: str) -> tuple[torch.dtype, tuple[str, ...]]:
    name = str(value).replace("torch.", "").lower()
    if name in REFUSED_DTYPES:
        raise _refuse("dtype", f"dtype {name} is refused: DeepSpec evaluates in bf16 only, and Qwen3's activations "
                               "overflow fp16 (inf, then NaN logits). Use 'bfloat16' (emulated and slow below compute "
                               "capability 8.0) or 'float32' (twice the memory: it may not fit), or 'auto'")
    if name not in DTYPES:
        raise _refuse("dtype", f"unknown dtype {value!r}; expected one of {', '.join(DTYPES)}")
    chosen = DTYPES[name] or (torch.float32 if mode == "smoke" else pick_dtype(device))
    notes: list[str] = []
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        where = f"compute capability {capability[0]}.{capability[1]}"
        if capability < (8, 0) and chosen == torch.bfloat16:
            notes.append(f"bfloat16 on {where}: emulated (no bf16 tensor cores), so every step is several times "
                         "slower than on an Ampere or newer GPU; DeepSpec's dtype, half of float32's memory")
        elif capability < (8, 0) and chosen == torch.float32:
            notes.append(f"float32 on {where} (no fast bf16 there): twice bf16's memory and not DeepSpec's dtype "
                         "(bf16), so tau may differ slightly from the paper's")
    return chosen, tuple(notes)


def _check_model(setting: str, source: str, kind: str = "") -> Path | None:
    """A model source that will load: a folder with config.json and safetensors weights (and, for the
    target, a tokenizer), or a hub id that, offline, is in the local hub cache (nothing downloads).
    Returns the local folder when there is one (None: online hub id, fetched when loaded)."""
    path = Path(source).expanduser()
    if not path.is_dir():
        if not HUB_ID.match(str(source)):
            raise _refuse(setting, f"{source!r} is neither a folder nor a hub id (owner/name)", kind)
        if not checkpoints.hub_offline():
            return None
        try:
            path = checkpoints.resolve_source(str(source), download=False)
        except FileNotFoundError as error:
            raise _refuse(setting, str(error), kind) from None
    wants = ["config.json"] + (["tokenizer_config.json"] if setting == "target" else [])
    missing = [name for name in wants if not (path / name).is_file()]
    if not any(path.glob("*.safetensors")):
        missing.append("*.safetensors weights")
    if missing:
        raise _refuse(setting, f"{describe_path(path)} ({source}) lacks {', '.join(missing)}; expected a model folder "
                               "as `hf download` writes it", kind)
    return path


def _check_out(path: Path) -> Path:
    if path.is_dir():
        raise _refuse("out", f"the results file {describe_path(path)} is a folder; expected a file name ending in .json")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise _refuse("out", f"cannot write the results file into {describe_path(folder)} "
                             f"({error.strerror or type(error).__name__})") from None
    return folder


def _memory_folders(mode: str, target: str, drafters: Mapping[str, str], local: Mapping[str, Path | None]
                    ) -> tuple[Path | None, dict[str, Path] | None]:
    """The target config and drafter folders whose config.json size the run (committed copies of the
    released ones for their hub ids); None when one is not at hand without downloading."""
    def committed(kind: str) -> Path:
        return QWEN3_4B / Path(DRAFTER_IDS[kind]).name

    if mode == "random-weights" or str(target) == TARGET_ID:
        config = QWEN3_4B / "config.json"
    else:
        config = local["target"] / "config.json" if local.get("target") is not None else None
    folders: dict[str, Path] = {}
    for kind, source in drafters.items():
        if mode == "random-weights" or source == DRAFTER_IDS.get(kind):
            folders[kind] = committed(kind)
        elif local.get(kind) is not None:
            folders[kind] = local[kind]
        else:
            return config, None
    return config, folders


def _check_memory(mode: str, device: torch.device, dtype: torch.dtype, config_file: Path | None,
                  folders: Mapping[str, Path] | None, study: GpuStudy, profile: bool
                  ) -> tuple[float | None, float | None, tuple[str, ...]]:
    free = free_memory_bytes(device)
    if free is None or mode == "smoke":
        return None, None, ()
    if config_file is None or folders is None:
        return None, free / 2**30, ("GPU memory not checked: a model's config is not at hand before it downloads",)
    config = Qwen3Config(**json.loads(Path(config_file).read_text()))
    tokens = PROMPT_TOKENS_ESTIMATE + study.new_tokens
    table = memory_table(config, folders, dtype, tokens)
    dtype_bytes = torch.finfo(dtype).bits // 8
    weights, kv = float(table["GiB"].iloc[:-1].sum()), float(table["GiB"].iloc[-1])
    fraction = inspect.signature(affordable_concurrencies).parameters["fraction"].default
    smallest = min(study.concurrencies)
    costs_gib = profile_step_bytes(config, smallest, study.gamma, study.profile_context, dtype_bytes) / fraction / 2**30
    need = weights + kv + MEMORY_SLACK_GIB + (costs_gib if profile else 0.0)
    have = free / 2**30
    if need <= have:
        return need, have, ()
    name = str(dtype).replace("torch.", "")
    parts = (f"weights {weights:.1f}, the KV cache of a {tokens}-token request {kv:.2f}"
             + (f", the cost profile at R = {smallest} {costs_gib:.1f}" if profile else "") + f", slack {MEMORY_SLACK_GIB:g}")
    problem = f"the run needs about {need:.1f} GiB of GPU memory in {name} ({parts}), but {have:.1f} GiB are free"
    if dtype == torch.float32 and weights / 2 + kv / 2 + MEMORY_SLACK_GIB <= have:
        raise _refuse("dtype", problem + "; 'bfloat16' halves it (DeepSpec's dtype; emulated and slower below compute "
                                         "capability 8.0)")
    if weights + MEMORY_SLACK_GIB <= have:
        raise _refuse("new_tokens", problem + "; fewer new tokens shrink the KV cache (the command line's --no-profile "
                                              "skips the cost profile)")
    raise _refuse("device", problem + "; the weights alone do not fit: use a GPU with more free memory")


def check_setup(mode: str = "auto", device: torch.device | str = "cpu", profile: str = "full", *,
                study: GpuStudy | None = None, target: str | Path = TARGET_ID,
                drafters: Mapping[str, str | Path] | None = None, eval_folder: str | Path | None = None,
                download_prompts: bool = False, allow_fixture: bool = False,
                prompts_per_benchmark: int | str | None = "profile", new_tokens: int | str = "profile",
                dtype: str | torch.dtype = "auto", out: str | Path | None = None, profile_costs: bool = True) -> Setup:
    """Every input of a GPU run, checked before any weight is read (the notebook's first cell
    after its parameters and `python -m dspark_lite.harness.gpu` both call it): the mode against the
    device; the prompt source (an evaluation folder holding the nine files, a download the hub can
    serve, or the fixture knowingly); the results folder is writable; the target and drafter sources
    (local folders with config.json and weights; hub ids, offline, in the local hub cache); the dtype
    (fp16 refused; "auto" falls back from float32 to bf16 where float32 does not fit); GPU memory for
    the chosen sizes against the free memory. SetupError names the
    parameter to set. `study` defaults to the profile's on a GPU and the smoke one on a CPU; its
    prompt count and generation length are replaced by `prompts_per_benchmark` ("profile", None for
    DeepSpec's counts, or a count) and `new_tokens` ("profile" or a count)."""
    device = torch.device(device)
    try:
        mode = resolve_mode(mode, device)
    except ValueError as error:
        raise _refuse("mode", str(error)) from None
    if study is None:
        study = get_profile(profile).gpu if device.type == "cuda" else get_profile("smoke").gpu
    count = _count(prompts_per_benchmark, study)
    study = dataclasses.replace(study, prompts_per_benchmark=count, new_tokens=_new_tokens(new_tokens, study))
    counts = dict(evalsets.DEEPSPEC_COUNTS) if count is None else dict.fromkeys(evalsets.TABLE1_ORDER, count)
    source, folder = _check_prompt_source(mode, eval_folder, download_prompts, allow_fixture)
    chosen, notes = _check_dtype(dtype, device, mode)
    drafters = {str(k): str(v) for k, v in dict(DRAFTER_IDS if drafters is None else drafters).items()}
    unknown = sorted(set(drafters) - set(DRAFTER_IDS))
    if unknown or not drafters:
        raise _refuse("drafters", f"drafter kinds {unknown or 'none'}; expected some of {', '.join(DRAFTER_IDS)}")
    local: dict[str, Path | None] = {}
    if mode == "real":
        local["target"] = _check_model("target", str(target))
        for kind, src in drafters.items():
            local[kind] = _check_model("drafter", src, kind)
    protocol = run_protocol(mode, source, counts, study.new_tokens, study.temperature, study.gamma)
    out_path = Path(out).expanduser() if out is not None else None
    results_folder = _check_out(out_path or results_file(mode, device, source, protocol == "subset"))
    config_file, folders = _memory_folders(mode, str(target), drafters, local)
    try:
        need, free, more = _check_memory(mode, device, chosen, config_file, folders, study, profile_costs)
    except SetupError:
        if DTYPES.get(str(dtype).replace("torch.", "").lower(), torch.float32) is not None or chosen != torch.float32:
            raise  # a dtype the reader chose is kept: the error says what would fit
        chosen = torch.bfloat16  # "auto" picked float32 (below compute capability 8.0), which does not fit
        need, free, more = _check_memory(mode, device, chosen, config_file, folders, study, profile_costs)
        notes = tuple(n for n in notes if not n.startswith("float32 on")) + ("float32 does not fit this GPU's free memory, so DTYPE='auto' chose bfloat16 (DeepSpec's "
                         "dtype; emulated and slower below compute capability 8.0)",)
    return Setup(mode, device, chosen, study, counts, source, folder, out_path, results_folder, str(target), drafters,
                 protocol, need, free, notes + more)
