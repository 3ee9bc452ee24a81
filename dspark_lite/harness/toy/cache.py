"""The trained-artifact cache (chapter 00).

Artifacts (a tokenizer, a trained target, a drafter) are stored in folders named by a hash
of the config that built them and of the code that built them: the source of the builder's
module and of every module of `dspark_lite` it imports, at any depth (`import_closure`, read
from the imports with `ast`, never a hand-kept list). A change of either builds afresh; a change
anywhere else (the book's pages and plots, the GPU path, the serving room, a chapter) keeps
every key, so it is checked by a warm build. The folder is ``$DSPARK_CACHE`` or, inside a checkout of
the book, ``<repo>/.cache/dspark`` (git-ignored); elsewhere ``~/.cache/dspark_lite``.

A folder is built in a work folder beside it (``.partial-<name>``) and renamed only when
complete, with a MANIFEST.json of sha256 sums. A build that is interrupted leaves its work
folder, and the training checkpoint in it (`resume`), for the next run to resume from.
One process builds an artifact at a time (a lock file); another that asks for it waits, then
loads it. A folder that fails its manifest, or fails to load, is reported with its path and
the reason, then rebuilt: never half-loaded.

The published cache. The forge's book workflow packs every artifact its build made
(`pack_published`: one archive a folder, and a manifest of every file's sha256 with the cache keys)
beside the HTML, in the site's ``cache/``. A run elsewhere (Colab, a workstation, a fresh folder
with the package installed) may opt in by setting ``$DSPARK_CACHE_URL`` to that folder's address:
an artifact missing here is then fetched from it (`fetch_published`, with a progress bar and a
line naming what and from where), checked file by file against the published hashes, and refused
(deleted, then trained as usual) when any differs. Nothing is fetched while the variable is unset.
Keys hash the builders' code, so a run of other code than the build's finds only the artifacts
whose builders it shares, and trains the rest.
"""
from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import gzip
import hashlib
import json
import os
import shutil
import sys
import tarfile
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ... import __version__, resume
from ...progress import progress

T = TypeVar("T")
MANIFEST = "MANIFEST.json"
ENV_VAR = "DSPARK_CACHE"
URL_VAR = "DSPARK_CACHE_URL"  # the published cache's address: set it to fetch what is missing here
PUBLISHED_MANIFEST = "cache-manifest.json"  # beside the archives: every file's sha256, with the keys
PUBLISHED_FORMAT = 1


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
    """sha256 of every `.py` file of the package (path and bytes, in sorted order): what a published
    cache was built from, recorded in its manifest. The keys hash less: `builder_hash`."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _module_file(name: str, package: Path) -> Path | None:
    """The file of module `name` inside `package` (a module or a sub-package), or None."""
    parts = name.split(".")
    if parts[0] != package.name:
        return None
    base = package.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file() and (len(parts) > 1 or candidate.name == "__init__.py"):
            return candidate
    return None


def _imported_names(source: str, name: str, is_package: bool) -> set[str]:
    """Every module name an import statement of module `name` may load (at any depth of its code,
    lazy imports inside functions included): for `from x import y`, both x and x.y."""
    home = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = home.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


@functools.lru_cache(maxsize=4096)
def _imports_of(path: Path, name: str, stamp: tuple[int, int]) -> frozenset[str]:
    """`_imported_names` of the file, read again whenever its `stamp` (mtime, size) changes."""
    return frozenset(_imported_names(path.read_text(), name, path.name == "__init__.py"))


def _closure(start: str, start_file: Path, package: Path) -> dict[str, Path]:
    names: dict[str, Path] = {}
    todo = [(start, start_file)]
    while todo:
        name, path = todo.pop()
        if name in names:
            continue
        names[name] = path
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        stat = path.stat()
        imported = _imports_of(path, name, (stat.st_mtime_ns, stat.st_size))
        for other in sorted(imported.union(parents)):  # importing a module runs its packages' __init__
            other_file = _module_file(other, package)
            if other_file is not None and other not in names:
                todo.append((other, other_file))
    return dict(sorted(names.items()))


def import_closure(module: str, package: Path = PACKAGE) -> dict[str, Path]:
    """{module name: file} of `module` and of every module of `package` that importing it runs:
    what it imports (read from its source with `ast`, imports inside functions included), what
    those import, at any depth, and the `__init__.py` of every package on the way. `module` is a
    module of the package (``dspark_lite.harness.toy.zoo``) or an imported one outside it (a
    test's builder), whose own file is included and whose imports are followed into the package.
    A ValueError names a module that is neither."""
    path = _module_file(module, package)
    if path is None:
        loaded = sys.modules.get(module)
        if loaded is None or not getattr(loaded, "__file__", None):
            raise ValueError(f"{module!r} is not a module of {package.name} nor an imported module with a "
                             "source file: the cache keys an artifact by its builder's module (the code "
                             "that builds it, e.g. `__name__` of the module that calls load_or_build)")
        path = Path(loaded.__file__)
    return _closure(module, path.resolve(), package.resolve())


def builder_hash(module: str, package: Path = PACKAGE) -> str:
    """sha256 of the source of `import_closure(module)` (module names and bytes, sorted): what an
    artifact built by `module` depends on, and so what its key hashes."""
    h = hashlib.sha256()
    for name, path in import_closure(module, package).items():
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def artifact_key(kind: str, config: dict[str, Any], *, builder: str) -> str:
    """A short content hash of (kind, config, package version, the source of the builder's module
    and of everything it imports from the package: `builder_hash`)."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    h.update(__version__.encode())
    h.update(builder_hash(builder).encode())
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path, config: dict[str, Any], builder: str | None = None) -> None:
    """Record every file's sha256, the config and the builder's module in folder/MANIFEST.json."""
    files = {
        str(p.relative_to(folder)): _sha256(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps({"config": config, "builder": builder, "files": files}, indent=1, default=str))


def verify_manifest(folder: Path) -> None:
    """Raise CorruptArtifact naming the folder and what is wrong with it."""
    manifest = folder / MANIFEST
    if not manifest.exists():
        raise CorruptArtifact(f"{folder}: no {MANIFEST} (an interrupted write?)")
    try:
        files = json.loads(manifest.read_text())["files"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise CorruptArtifact(f"{manifest}: unreadable manifest ({exc})") from exc
    check_digests(folder, files, "the manifest")


def check_digests(folder: Path, files: dict[str, str], listed_in: str) -> None:
    """Raise CorruptArtifact unless every file of `files` ({name: sha256}) is in `folder` with that
    digest; `listed_in` names the list in the message ("the manifest", "the published manifest")."""
    for name, digest in files.items():
        path = folder / name
        if not path.is_file():
            raise CorruptArtifact(f"{path}: listed in {listed_in} but missing (an interrupted write?)")
        if _sha256(path) != digest:
            raise CorruptArtifact(f"{path}: its sha256 differs from {listed_in}'s (a corrupt or changed file)")


def artifact_folder(kind: str, config: dict[str, Any], root: Path | None = None, *, builder: str) -> Path:
    """Where the artifact for (kind, config), built by module `builder`, is (or would be) cached."""
    root = Path(root) if root is not None else cache_dir()
    return root / f"{kind}-{artifact_key(kind, config, builder=builder)}"


def contains(kind: str, config: dict[str, Any], root: Path | None = None, *, builder: str) -> bool:
    """Whether a complete artifact for (kind, config) built by `builder` is cached (its folder
    passes its manifest).
    With `$DSPARK_CACHE_URL` set, one missing here is first fetched from the published cache
    (`fetch_published`), so that only what it lacks is trained."""
    folder = artifact_folder(kind, config, root, builder=builder)
    with contextlib.suppress(CorruptArtifact):
        verify_manifest(folder)
        return True
    if published_url() is None:
        return False
    with exclusive(folder):
        if folder.exists():  # another process built or fetched it meanwhile, or it is corrupt here
            try:
                verify_manifest(folder)
                return True
            except CorruptArtifact as exc:
                warnings.warn(f"cached {kind} at {folder} is unusable ({exc}); fetching it again", stacklevel=2)
                shutil.rmtree(folder)
        return fetch_published(folder)


def work_folder(kind: str, config: dict[str, Any], root: Path | None = None, *, builder: str) -> Path:
    """The stable folder where the artifact (kind, config) is built: an interrupted build leaves its
    training checkpoint there, and the next build of the same artifact resumes from it."""
    folder = artifact_folder(kind, config, root, builder=builder)
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


def _loaded(kind: str, folder: Path, load: Callable[[Path], T]) -> tuple[bool, T | None]:
    """(True, load(folder)) when the folder passes its manifest and loads; else the reason is
    reported (a warning with its path), the folder removed, and (False, None) returned."""
    try:
        verify_manifest(folder)
        return True, load(folder)
    except Exception as exc:  # corrupt or unloadable: report, then rebuild
        warnings.warn(f"cached {kind} at {folder} is unusable ({exc}); rebuilding it", stacklevel=3)
        shutil.rmtree(folder)
        return False, None


def load_or_build(
    kind: str,
    config: dict[str, Any],
    build: Callable[[Path], None],
    load: Callable[[Path], T],
    root: Path | None = None,
    *,
    builder: str | None = None,
) -> T:
    """Load the artifact for (kind, config) from the cache, building it first if needed.

    `build(folder)` writes the artifact's files into its work folder (`work_folder`; a training
    checkpoints there and resumes from what an interrupted build left); `load(folder)` reads them
    back. The key hashes `builder`'s code (`artifact_key`): the module named, by default the one
    that defines `build`. A corrupt cached folder is reported (warning with path and reason) and rebuilt. With
    `$DSPARK_CACHE_URL` set, an artifact missing here is fetched from the published cache
    (`fetch_published`) before anything is built.
    """
    builder = builder or getattr(build, "__module__", None) or getattr(getattr(build, "func", None), "__module__", "")
    folder = artifact_folder(kind, config, root, builder=builder)
    with exclusive(folder):
        for present in (folder.exists, lambda: fetch_published(folder)):
            if present():
                usable, value = _loaded(kind, folder, load)
                if usable:
                    return value
        work = work_folder(kind, config, root, builder=builder)
        work.mkdir(parents=True, exist_ok=True)
        build(work)
        resume.Checkpointer(work).clear()  # a finished artifact carries no checkpoint
        write_manifest(work, config, builder)
        os.replace(work, folder)
    return load(folder)


# ========================================================================== the published cache


def published_url() -> str | None:
    """The published cache's address from `$DSPARK_CACHE_URL` (http, https or file), or None when
    the variable is unset or empty: then nothing is ever fetched."""
    url = os.environ.get(URL_VAR, "").strip().rstrip("/")
    if not url:
        return None
    if not url.startswith(("http://", "https://", "file://")):
        raise ValueError(f"${URL_VAR} must be an http(s):// or file:// address of a published cache "
                         f"(the folder holding {PUBLISHED_MANIFEST}), got {url!r}")
    return url


def current_artifacts(root: Path | None = None) -> list[Path]:
    """The complete artifact folders of the cache (`root`, default `cache_dir`) that this package's
    source would load: folders that pass their manifest and whose name is the key of their recorded
    config and builder now. Those built by other versions of the code (a restored older cache) are
    left out."""
    root = Path(root) if root is not None else cache_dir()
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        kind, _, key = folder.name.rpartition("-")
        if folder.name.startswith(".") or not folder.is_dir() or not kind:
            continue
        try:
            verify_manifest(folder)
        except CorruptArtifact:
            continue
        manifest = json.loads((folder / MANIFEST).read_text())
        with contextlib.suppress(ValueError):  # no builder recorded, or one this process cannot read
            if artifact_key(kind, manifest["config"], builder=str(manifest.get("builder"))) == key:
                found.append(folder)
    return found


def _write_archive(folder: Path, archive: Path) -> None:
    """folder's files as a gzipped tar, the same bytes for the same files (sorted, no times or owners)."""
    with open(archive, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tarfile.TarInfo(path.relative_to(folder).as_posix())
            info.size, info.mode = path.stat().st_size, 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)


def pack_published(out: Path, root: Path | None = None) -> dict[str, Any]:
    """Pack the cache for publishing (the book workflow, `ci/pack_cache.py`): each of
    `current_artifacts(root)` as `out/<folder>.tar.gz`, and `out/cache-manifest.json` with, for
    each, its kind and key, the archive's size and sha256, and the sha256 of every file in it.
    Returns the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    artifacts = {}
    for folder in current_artifacts(root):
        archive = out / f"{folder.name}.tar.gz"
        _write_archive(folder, archive)
        kind, _, key = folder.name.rpartition("-")
        artifacts[folder.name] = {
            "kind": kind, "key": key, "archive": archive.name, "archive_bytes": archive.stat().st_size,
            "archive_sha256": _sha256(archive),
            "files": {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}}
    manifest = {"format": PUBLISHED_FORMAT, "dspark_lite": __version__, "package_source": package_source_hash(),
                "artifacts": artifacts}
    (out / PUBLISHED_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


_INDEXES: dict[str, dict[str, Any] | None] = {}  # published manifests read in this process, by address
_NOT_FETCHED: set[str] = set()  # "<address> <folder>" not published, or refused: not tried again


def _published_index(url: str) -> dict[str, Any] | None:
    """The published manifest at `url`, read once a process (None, said once, if unreadable)."""
    if url not in _INDEXES:
        try:
            with urllib.request.urlopen(f"{url}/{PUBLISHED_MANIFEST}", timeout=60) as response:
                index = json.loads(response.read())
            if index.get("format") != PUBLISHED_FORMAT or not isinstance(index.get("artifacts"), dict):
                raise ValueError(f"not a format-{PUBLISHED_FORMAT} cache manifest")
        except (OSError, ValueError) as exc:
            warnings.warn(f"the published cache {url}/{PUBLISHED_MANIFEST} cannot be read ({exc}); "
                          "what is missing here is trained here", stacklevel=4)
            index = None
        else:
            same = index.get("package_source") == package_source_hash()
            print(f"Published cache {url}: {len(index['artifacts'])} trained artifacts, built by dspark_lite "
                  f"{index.get('dspark_lite', '?')}" + (
                      "; those missing here are fetched from it and checked against its sha256 hashes." if same else
                      " from other source code than this copy's: one missing here is fetched only where its key "
                      "matches (the same config and builder code), the rest train here."))
        _INDEXES[url] = index
    return _INDEXES[url]


def _download(url: str, dest: Path, size: int, desc: str) -> None:
    """`url` into `dest`, with a progress bar of bytes (rate and time left)."""
    with urllib.request.urlopen(url, timeout=60) as response, open(dest, "wb") as f, \
            progress(total=int(response.headers.get("Content-Length") or size), unit="B", unit_scale=True,
                     unit_divisor=1024, desc=desc, leave=False) as bar:
        for chunk in iter(lambda: response.read(1 << 20), b""):
            f.write(chunk)
            bar.update(len(chunk))


def _unpack_checked(archive: Path, files: dict[str, str], dest: Path) -> None:
    """Extract `archive` into `dest` and check that it holds exactly `files` ({name: sha256});
    raise CorruptArtifact naming the first file that differs."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        strays = [m.name for m in members if m.name not in files or not m.isfile()
                  or m.name.startswith("/") or ".." in m.name.split("/")]
        if strays:
            raise CorruptArtifact(f"the archive holds what its manifest does not list: {strays[:3]}")
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)
    check_digests(dest, files, "the published manifest")
    verify_manifest(dest)


def fetch_published(folder: Path) -> bool:
    """Fetch the artifact `folder` (its name is its kind and key) from the published cache at
    `$DSPARK_CACHE_URL` into the cache, and return whether it is now there. False, with nothing
    fetched, when the variable is unset, the cache unreadable, or the artifact not published; False,
    and nothing kept, when its archive or any file in it differs from the published sha256 (the
    artifact is then trained as usual). Call it holding `exclusive(folder)`."""
    url = published_url()
    if url is None or f"{url} {folder.name}" in _NOT_FETCHED:
        return False
    index = _published_index(url)
    entry = (index or {}).get("artifacts", {}).get(folder.name)
    if entry is None:
        _NOT_FETCHED.add(f"{url} {folder.name}")
        if index is not None:
            print(f"{folder.name} is not in the published cache: it trains here.")
        return False
    source = f"{url}/{entry['archive']}"
    size = entry["archive_bytes"]
    print(f"Fetching {folder.name} ({f'{size / 2 ** 20:.1f} MiB' if size >= 2 ** 20 else f'{size / 1024:.0f} KiB'}) "
          f"from {source}")
    archive, unpacked = folder.parent / f".fetch-{folder.name}.tar.gz", folder.parent / f".fetch-{folder.name}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(unpacked, ignore_errors=True)
    start = time.perf_counter()
    try:
        _download(source, archive, entry["archive_bytes"], f"fetch {folder.name}")
        if _sha256(archive) != entry["archive_sha256"]:
            raise CorruptArtifact("the archive's sha256 differs from the published manifest's")
        _unpack_checked(archive, entry["files"], unpacked)
        os.replace(unpacked, folder)
    except (CorruptArtifact, OSError, tarfile.TarError) as exc:
        warnings.warn(f"refused {folder.name} from {source}: {exc}; it is trained here instead", stacklevel=3)
        shutil.rmtree(unpacked, ignore_errors=True)
        _NOT_FETCHED.add(f"{url} {folder.name}")
        return False
    finally:
        archive.unlink(missing_ok=True)
    print(f"  {len(entry['files'])} files, sha256 checked, in {time.perf_counter() - start:.1f} s")
    return True
