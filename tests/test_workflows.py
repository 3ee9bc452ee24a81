"""The forge's workflows (.github/workflows): valid by the workflow schema (check-jsonschema's
vendored GitHub schema, pinned in requirements.txt, no network), every action pinned by version,
tests on pull requests and pushes, the book built and published from main with the artifact cache."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
LINT = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows"]
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@(?:v\d+\.\d+\.\d+|[0-9a-f]{40})$")


def lint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*LINT, *map(str, paths)], capture_output=True, text=True, timeout=120)


def uses(workflow: dict) -> list[str]:
    return [step["uses"] for job in workflow["jobs"].values() for step in job.get("steps", []) if "uses" in step]


def unpinned(workflow: dict) -> list[str]:
    """Actions not pinned to an exact version tag (vX.Y.Z) or a commit."""
    return [action for action in uses(workflow) if not PINNED.match(action)]


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
    return workflow


def test_the_workflows_pass_the_linter() -> None:
    assert {p.name for p in WORKFLOWS} == {"test.yml", "book.yml"}
    result = lint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("broken", [
    "on: push\njobs:\n  test:\n    steps:\n      - run: make test\n",                      # no runs-on
    "on: pushed\njobs:\n  test:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: x\n",   # no such event
    "on: push\njobs:\n  test:\n    runs-on: ubuntu-24.04\n    steps:\n      - uses: a/b@v1\n        run: x\n",
])
def test_a_broken_workflow_fails_the_linter(tmp_path: Path, broken: str) -> None:
    planted = tmp_path / "broken.yml"
    planted.write_text(broken)
    assert lint(planted).returncode != 0


def test_every_action_is_pinned_by_version() -> None:
    for path in WORKFLOWS:
        assert uses(load(path)) and not unpinned(load(path)), (path.name, unpinned(load(path)))
    planted = {"jobs": {"x": {"steps": [{"uses": "actions/checkout@v5"}, {"uses": "actions/cache/save@main"},
                                        {"uses": "actions/checkout@v5.0.0"}]}}}
    assert unpinned(planted) == ["actions/checkout@v5", "actions/cache/save@main"]


def test_pull_requests_and_pushes_run_the_readme_test_command() -> None:
    workflow = load(REPO / ".github" / "workflows" / "test.yml")
    assert {"pull_request", "push"} <= set(workflow["on"])
    runs = [step.get("run") for step in workflow["jobs"]["test"]["steps"]]
    assert ".ci/run" in runs
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_main_builds_publishes_and_keeps_the_cache_keyed_by_the_package() -> None:
    workflow = load(REPO / ".github" / "workflows" / "book.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    steps = {step.get("id") or step.get("name"): step for step in workflow["jobs"]["build"]["steps"]}
    assert steps["book"]["run"] == "make book" and steps["book"]["continue-on-error"] is True
    key = steps["restore"]["with"]["key"]
    assert "dspark_lite/**" in key and "chapters" not in key  # prose changes restore the same cache
    assert steps["restore"]["with"]["path"] == ".cache" and (REPO / ".gitignore").read_text().count(".cache/")
    upload = next(s for s in steps.values() if str(s.get("uses", "")).startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html" and upload["if"].startswith("always()")
    failing = next(s for s in steps.values() if s.get("if") == "steps.book.outcome == 'failure'")
    assert "exit 1" in failing["run"]  # published, and still red
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build" and deploy["if"].startswith("always()")
    assert uses(workflow)[-1].startswith("actions/deploy-pages@")
