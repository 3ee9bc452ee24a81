"""What every chapter does first (chapters 01 to 06b): say how long it ran in the latest cold build
(`run_time_note`) and set up its run (`start`: the figure theme, the profile's sizes, the device,
the seeds and the toy world), saying where the run is. Generic: a chapter names itself by its
notebook's stem.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..result_files import REPO
from ..toy.profiles import Profile, get_profile
from ..toy.world import ToyWorld, load_toy_world
from ..gpu.devices import runtime_banner
from ...runtime import resolve_device, seed_everything
from . import plots
from .results import say

BUILD_TIMES = REPO / "data" / "build" / "cold_build_times.json"


def run_time_note(chapter: str, times: Path = BUILD_TIMES) -> None:
    """Say in one line how long `chapter` (a notebook stem, "04_markov_head") took in the latest cold
    build (full profile, empty cache; the preface describes that machine) and on a GPU where one has
    run it, from the committed build times."""
    if not Path(times).exists():  # the package installed outside a clone: the timings stay in the repository
        say("**Run time:** timed in the book's repository (`data/build/`); the rendered book shows it.")
        return
    record = json.loads(Path(times).read_text())
    minutes, gpu = record["minutes"].get(chapter), record.get("gpu_minutes", {}).get(chapter)
    cold = (f"{minutes:g} minutes in the latest cold build (empty cache, the preface's machine)"
            if minutes is not None else "not yet timed in a cold build")
    say(f"**Run time:** {cold}; seconds to minutes with the cache warm; "
        + (f"{gpu:g} minutes on a GPU." if gpu is not None else "no GPU run yet."))


def start(profile_name: str, device_name: str, seed: int,
          world: bool = True) -> tuple[Profile, torch.device, torch.Generator, ToyWorld | None]:
    """A chapter's setup, in the book's order: the figure theme, the profile's sizes, the device,
    every generator seeded with `seed` (the returned torch generator is the chapter's) and, with
    `world`, the toy world (loaded from the artifact cache, or trained there once). The cell's first
    output says where the run is: profile, device, weights' dtype, worker processes and threads.
    Returns (profile, device, generator, world or None)."""
    plots.set_theme()
    profile = get_profile(profile_name)
    device = resolve_device(device_name)
    generator = seed_everything(seed, device)
    toy = load_toy_world(profile, seed, device=device) if world else None
    say(f"**This run:** the {profile.name} profile; {runtime_banner(device)}.")
    return profile, device, generator, toy
