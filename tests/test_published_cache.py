"""The published trained-artifact cache (issue 53, "Colab and a workstation, first try"): the book
workflow packs the cache beside the HTML (`cache.pack_published`), and a run elsewhere that sets
$DSPARK_CACHE_URL fetches what it lacks, checks every hash, and trains only what is missing or
does not match. Served here over the loopback address by `http.server`; nothing else downloads."""
from __future__ import annotations

import functools
import gzip
import http.server
import io
import json
import tarfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

from dspark_lite.harness.toy import cache

CONFIG = {"rows": 3, "seed": 7}


class Served:
    """A folder served on 127.0.0.1 in a thread, with every path asked for recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.asked = folder, []
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                served.asked.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Served]:
    folder = tmp_path / "site"
    folder.mkdir()
    served = Served(folder)
    yield served
    served.close()


class Builder:
    """A tiny artifact's builder that counts its calls (standing in for a training)."""

    def __init__(self, payload: bytes = b"trained weights") -> None:
        self.calls, self.payload = 0, payload

    def __call__(self, folder: Path) -> None:
        self.calls += 1
        (folder / "weights.bin").write_bytes(self.payload)
        (folder / "nested").mkdir()
        (folder / "nested" / "history.json").write_text(json.dumps({"loss": [3.0, 2.0]}))


def load(folder: Path) -> tuple[bytes, str]:
    return (folder / "weights.bin").read_bytes(), (folder / "nested" / "history.json").read_text()


def publish(built: Path, site: Served) -> dict:
    """Build the tiny artifact into `built` and pack that cache into the served site's cache/."""
    builder = Builder()
    cache.load_or_build("demo", CONFIG, builder, load, root=built)
    assert builder.calls == 1
    return cache.pack_published(site.folder / "cache", root=built)


def test_pack_writes_one_archive_per_current_artifact_and_a_manifest_of_hashes(tmp_path: Path, site: Served) -> None:
    built = tmp_path / "built"
    manifest = publish(built, site)
    folder = cache.artifact_folder("demo", CONFIG, built, builder=__name__)
    (built / "demo-0123456789abcdef").mkdir()  # another code version's folder (no manifest): not packed
    assert json.loads((site.folder / "cache" / cache.PUBLISHED_MANIFEST).read_text()) == manifest
    assert manifest["package_source"] == cache.package_source_hash() and manifest["format"] == cache.PUBLISHED_FORMAT
    assert list(manifest["artifacts"]) == [folder.name] == [p.name for p in cache.current_artifacts(built)]
    entry = manifest["artifacts"][folder.name]
    assert entry["kind"] == "demo" and folder.name == f"demo-{entry['key']}"
    assert sorted(entry["files"]) == ["MANIFEST.json", "nested/history.json", "weights.bin"]
    import hashlib
    assert entry["files"]["weights.bin"] == hashlib.sha256(b"trained weights").hexdigest()
    archive = site.folder / "cache" / entry["archive"]
    assert entry["archive_sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    first = archive.read_bytes()
    cache.pack_published(site.folder / "cache", root=built)
    assert archive.read_bytes() == first  # the same files pack to the same bytes


def test_a_published_artifact_is_fetched_into_an_empty_cache_without_building(
        tmp_path: Path, site: Served, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    publish(tmp_path / "built", site)
    monkeypatch.setenv(cache.URL_VAR, f"{site.url}/cache/")
    empty = tmp_path / "elsewhere"
    builder = Builder(b"would be trained here")
    assert cache.contains("demo", CONFIG, root=empty, builder=__name__)  # fetched, so that the zoo trains only what is missing
    assert cache.load_or_build("demo", CONFIG, builder, load, root=empty)[0] == b"trained weights"
    assert builder.calls == 0
    said = capsys.readouterr().out
    folder = cache.artifact_folder("demo", CONFIG, empty, builder=__name__)
    assert f"Fetching {folder.name}" in said and f"{site.url}/cache/{folder.name}.tar.gz" in said
    assert "sha256 checked" in said
    assert sorted(p.name for p in empty.iterdir() if not p.name.startswith(".")) == [folder.name]
    assert not list(empty.glob(".fetch-*"))
    asked = [p for p in site.asked if p.endswith(".tar.gz")]
    assert asked == [f"/cache/{folder.name}.tar.gz"]  # once: contains fetched it, load_or_build loaded it
    (folder / "weights.bin").write_bytes(b"corrupted here")  # a local copy that fails its manifest is fetched again
    with pytest.warns(UserWarning, match="unusable .*fetching it again"):
        assert cache.contains("demo", CONFIG, root=empty, builder=__name__)
    assert cache.load_or_build("demo", CONFIG, builder, load, root=empty)[0] == b"trained weights"
    assert builder.calls == 0 and len([p for p in site.asked if p.endswith(".tar.gz")]) == 2


def retar(archive: Path, change: dict[str, bytes]) -> None:
    """Rewrite a published archive with some files' bytes changed (a tampered or corrupted copy)."""
    with tarfile.open(archive, "r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    files.update(change)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(gzip.compress(buffer.getvalue()))


@pytest.mark.parametrize("where", ["archive", "file"])
def test_a_tampered_artifact_is_refused_by_its_hash_and_rebuilt(
        tmp_path: Path, site: Served, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """"archive": the archive's bytes differ from the manifest's hash. "file": the manifest's archive
    hash was updated too, so the file's own hash must catch it."""
    manifest = publish(tmp_path / "built", site)
    name = next(iter(manifest["artifacts"]))
    archive = site.folder / "cache" / f"{name}.tar.gz"
    retar(archive, {"weights.bin": b"tampered weights"})
    if where == "file":
        import hashlib
        manifest["artifacts"][name]["archive_sha256"] = hashlib.sha256(archive.read_bytes()).hexdigest()
        manifest["artifacts"][name]["archive_bytes"] = archive.stat().st_size
        (site.folder / "cache" / cache.PUBLISHED_MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setenv(cache.URL_VAR, f"{site.url}/cache")
    empty = tmp_path / "elsewhere"
    builder = Builder(b"retrained here")
    reason = "archive's sha256 differs" if where == "archive" else "weights.bin: its sha256 differs"
    with pytest.warns(UserWarning, match=f"refused {name} .*{reason}.*trained here instead"):
        assert not cache.contains("demo", CONFIG, root=empty, builder=__name__)
    assert not (empty / name).exists() and not list(empty.glob(".fetch-*"))  # nothing of it kept
    assert cache.load_or_build("demo", CONFIG, builder, load, root=empty)[0] == b"retrained here"
    assert builder.calls == 1
    assert len([p for p in site.asked if p.endswith(".tar.gz")]) == 1  # refused once, not fetched again


def test_nothing_is_fetched_while_the_variable_is_unset(tmp_path: Path, site: Served,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    publish(tmp_path / "built", site)
    monkeypatch.delenv(cache.URL_VAR, raising=False)
    builder = Builder(b"trained here")
    empty = tmp_path / "elsewhere"
    assert not cache.contains("demo", CONFIG, root=empty, builder=__name__)
    assert cache.load_or_build("demo", CONFIG, builder, load, root=empty)[0] == b"trained here"
    monkeypatch.setenv(cache.URL_VAR, "")  # empty is unset too
    assert cache.published_url() is None and not cache.contains("other", CONFIG, root=empty, builder=__name__)
    assert builder.calls == 1 and site.asked == []


def test_an_artifact_the_published_cache_lacks_is_built(tmp_path: Path, site: Served,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    publish(tmp_path / "built", site)
    monkeypatch.setenv(cache.URL_VAR, f"{site.url}/cache")
    builder = Builder(b"trained here")
    assert cache.load_or_build("demo", {**CONFIG, "rows": 4}, builder, load, root=tmp_path / "elsewhere")[0] == b"trained here"
    assert builder.calls == 1 and "is not in the published cache: it trains here" in capsys.readouterr().out


def test_an_unreachable_or_bad_address_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.URL_VAR, "ftp://example.org/cache")
    with pytest.raises(ValueError, match="http"):
        cache.contains("demo", CONFIG, root=tmp_path, builder=__name__)
    monkeypatch.setenv(cache.URL_VAR, (tmp_path / "nowhere").as_uri())  # file://, nothing there
    builder = Builder()
    with pytest.warns(UserWarning, match="cannot be read"):
        cache.load_or_build("demo", CONFIG, builder, load, root=tmp_path / "c")
    assert builder.calls == 1


def test_a_fresh_folder_with_the_cache_served_starts_without_training(
        tmp_path: Path, site: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53: a chapter run in a fresh folder (package installed, cache served) starts measuring
    without training. The smoke world is built once and published; then, in an empty cache with the
    address set, chapter 01's call (`load_toy_world`) trains nothing (every builder fails if called)
    and its target computes the same logits as the one that was published."""
    import torch

    from dspark_lite.harness.toy import corpus as toy_corpus, target as toy_target, tokenizer as toy_tokenizer
    from dspark_lite.harness.toy.world import load_toy_world

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path / "built"))
    monkeypatch.delenv(cache.URL_VAR, raising=False)
    built = load_toy_world("smoke", seed=0)
    manifest = cache.pack_published(site.folder / "cache")
    assert {entry["kind"] for entry in manifest["artifacts"].values()} >= {"corpus", "tokenizer", "target"}

    def trains(*args: object, **kwargs: object) -> None:
        raise AssertionError("a training ran although the published cache has the artifact")

    monkeypatch.setattr(toy_target, "train_causal_lm", trains)
    monkeypatch.setattr(toy_tokenizer, "train_tokenizer", trains)
    monkeypatch.setattr(toy_corpus, "write_corpus", trains)
    fresh = tmp_path / "fresh"
    monkeypatch.setenv(cache.ENV_VAR, str(fresh / "cache"))
    monkeypatch.setenv(cache.URL_VAR, f"{site.url}/cache")
    world = load_toy_world("smoke", seed=0)
    ids = world.encode_prompt(world.eval_prompts("chat")[0])
    with torch.no_grad():
        assert torch.equal(world.target(input_ids=ids[None]).logits, built.target(input_ids=ids[None]).logits)
    assert world.target_dir.parent == fresh / "cache"
    fetched = {p.removeprefix("/cache/").removesuffix(".tar.gz") for p in site.asked if p.endswith(".tar.gz")}
    assert world.target_dir.name in fetched and {name.rpartition("-")[0] for name in fetched} == {"corpus", "tokenizer", "target"}


def test_the_book_workflow_publishes_the_cache_where_the_colab_cell_looks(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """book.yml packs the cache into the uploaded site's cache/ (after `make book`, before the upload),
    the folder of the address the Colab cell sets (`colab_cells.published_cache_url`); the script
    packs a cache as `cache.pack_published` does."""
    import yaml

    from ci import pack_cache
    from ci import colab_cells

    repo = Path(__file__).resolve().parents[1]
    steps = yaml.safe_load((repo / ".github" / "workflows" / "book.yml").read_text())["jobs"]["build"]["steps"]
    names = [step.get("id") or step.get("uses", "").split("@")[0] for step in steps]
    pack = next(step for step in steps if "ci/pack_cache.py" in step.get("run", ""))
    upload = names.index("actions/upload-pages-artifact")
    assert names.index("book") < names.index("pack") < upload and pack["if"].startswith("always()")
    out = pack["run"].split("--out ")[1].split()[0]
    assert out == f"{steps[upload]['with']['path']}/cache"
    assert pack["run"].split("--cache ")[1].split()[0] == ".cache/dspark"
    assert colab_cells.published_cache_url(colab_cells.repository_setting()[0]).endswith("/" + Path(out).name)
    cache.load_or_build("demo", CONFIG, Builder(), load, root=tmp_path / "c")
    assert pack_cache.main(["--cache", str(tmp_path / "c"), "--out", str(tmp_path / "site")]) == 0
    assert "1 artifacts" in capsys.readouterr().out
    assert list(json.loads((tmp_path / "site" / cache.PUBLISHED_MANIFEST).read_text())["artifacts"]) == \
        [cache.artifact_folder("demo", CONFIG, tmp_path / "c", builder=__name__).name]
    assert pack_cache.main(["--cache", str(tmp_path / "none"), "--out", str(tmp_path / "site")]) == 1
