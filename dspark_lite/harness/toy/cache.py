"""The trained-artifact cache (chapter 00).

Artifacts (a tokenizer, a trained target, a drafter) are stored in folders named by a hash
of the config that built them and of the source of the whole `dspark_lite` package (every
module, so no list of "the modules that built it" can forget one), so a change of either
builds afresh. The folder is ``$DSPARK_CACHE`` or, inside a checkout of
the book, ``<repo>/.cache/dspark`` (git-ignored); elsewhere ``~/.cache/dspark_lite``.

A folder is built in a work folder beside it (``.partial-<name>``) and renamed only when
complete, with a MANIFEST.json of sha256 sums. A build that is interrupted leaves its work
folder, and the training checkpoint in it (`resume`), for the next run to resume from.
One process builds an artifact at a time (a lock file); another that asks for it waits, then
loads it. A folder that fails its manifest, or fails to load, is reported with its path and
the reason, then rebuilt: never half-loaded.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ... import __version__, resume

T = TypeVar("T")
MANIFEST = "MANIFEST.json"
ENV_VAR = "DSPARK_CACHE"


class CorruptArtifact(RuntimeError):
    """A cached artifact folder that does not match its manifest."""


def cache_dir() -> Path:
    """The cache root: $DSPARK_CACHE, else <repo>/.cache/dspark in a checkout, else ~/.cache."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    repo = Path(__file__).resolve().parents[3]
    if (repo / "_toc.yml").exists():
        return repo / ".cache" / "dspark"
    return Path.home() / ".cache" / "dspark_lite"


PACKAGE = Path(__file__).resolve().parents[2]  # the whole dspark_lite package, harness included


def package_source_hash(package: Path = PACKAGE) -> str:
    """sha256 of every `.py` file of the package (path and bytes, in sorted order)."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def artifact_key(kind: str, config: dict[str, Any]) -> str:
    """A short content hash of (kind, config, package version, the whole package's source)."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    h.update(__version__.encode())
    h.update(package_source_hash().encode())
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path, config: dict[str, Any]) -> None:
    """Record every file's sha256 (and the config) in folder/MANIFEST.json."""
    files = {
        str(p.relative_to(folder)): _sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps({"config": config, "files": files}, indent=1, default=str))


def verify_manifest(folder: Path) -> None:
    """Raise CorruptArtifact naming the folder and what is wrong with it."""
    manifest = folder / MANIFEST
    if not manifest.exists():
        raise CorruptArtifact(f"{folder}: no {MANIFEST} (an interrupted write?)")
    try:
        files = json.loads(manifest.read_text())["files"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise CorruptArtifact(f"{manifest}: unreadable manifest ({exc})") from exc
    for name, digest in files.items():
        path = folder / name
        if not path.exists():
            raise CorruptArtifact(f"{path}: listed in the manifest but missing")
        if _sha256(path) != digest:
            raise CorruptArtifact(f"{path}: checksum differs from the manifest (corrupt file)")


def artifact_folder(kind: str, config: dict[str, Any], root: Path | None = None) -> Path:
    """Where the artifact for (kind, config) is (or would be) cached."""
    root = Path(root) if root is not None else cache_dir()
    return root / f"{kind}-{artifact_key(kind, config)}"


def contains(kind: str, config: dict[str, Any], root: Path | None = None) -> bool:
    """Whether a complete artifact for (kind, config) is cached (its folder passes its manifest)."""
    try:
        verify_manifest(artifact_folder(kind, config, root))
    except CorruptArtifact:
        return False
    return True


def work_folder(kind: str, config: dict[str, Any], root: Path | None = None) -> Path:
    """The stable folder where the artifact (kind, config) is built: an interrupted build leaves its
    training checkpoint there, and the next build of the same artifact resumes from it."""
    folder = artifact_folder(kind, config, root)
    return folder.parent / f".partial-{folder.name}"


@contextlib.contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock named after `folder` (one builder per artifact across processes);
    the lock files live in the cache's hidden `.locks/`."""
    locks = folder.parent / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_or_build(
    kind: str,
    config: dict[str, Any],
    build: Callable[[Path], None],
    load: Callable[[Path], T],
    root: Path | None = None,
) -> T:
    """Load the artifact for (kind, config) from the cache, building it first if needed.

    `build(folder)` writes the artifact's files into its work folder (`work_folder`; a training
    checkpoints there and resumes from what an interrupted build left); `load(folder)` reads them
    back. A corrupt cached folder is reported (warning with path and reason) and rebuilt.
    """
    folder = artifact_folder(kind, config, root)
    with exclusive(folder):
        if folder.exists():
            try:
                verify_manifest(folder)
                return load(folder)
            except Exception as exc:  # corrupt or unloadable: report, then rebuild
                warnings.warn(f"cached {kind} at {folder} is unusable ({exc}); rebuilding it", stacklevel=2)
                shutil.rmtree(folder)
        work = work_folder(kind, config, root)
        work.mkdir(parents=True, exist_ok=True)
        build(work)
        resume.Checkpointer(work).clear()  # a finished artifact carries no checkpoint
        write_manifest(work, config)
        os.replace(work, folder)
    return load(folder)
