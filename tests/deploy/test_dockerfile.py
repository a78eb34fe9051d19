"""deploy/Dockerfile and .dockerignore, parsed (no Docker engine needed)."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

Instruction = tuple[str, str]


def _instructions() -> list[Instruction]:
    """(KEYWORD, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def _stages() -> list[list[Instruction]]:
    stages: list[list[Instruction]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _base_image(from_args: str) -> str:
    image = from_args.split(maxsplit=1)[0]
    defaults = dict(
        rest.split("=", 1) for keyword, rest in _instructions() if keyword == "ARG" and "=" in rest
    )
    return re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], image)


def test_multi_stage_on_python_311_slim() -> None:
    stages = _stages()
    assert len(stages) >= 2
    for stage in stages:
        assert _base_image(stage[0][1]).split("@", 1)[0] == "python:3.11-slim"


def test_every_base_image_is_pinned_by_digest() -> None:
    """A tag moves; the digest names the one image the build was tested on."""
    for stage in _stages():
        image = _base_image(stage[0][1])
        assert re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}", image), image


def test_final_stage_runs_as_non_root() -> None:
    users = [rest for keyword, rest in _stages()[-1] if keyword == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


def test_image_user_is_the_one_kubernetes_runs() -> None:
    users = [rest for keyword, rest in _stages()[-1] if keyword == "USER"]
    uid = int(users[-1].split(":")[0])
    api = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "base" / "api.yaml").read_text())
    deployment = next(doc for doc in api if doc["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == uid


def test_entrypoint_is_billing_and_default_command_api() -> None:
    final = dict(_stages()[-1])
    assert json.loads(final["ENTRYPOINT"]) == ["billing"]
    assert json.loads(final["CMD"]) == ["api"]


def test_dependencies_come_from_the_lock_then_the_project_without_deps() -> None:
    build = _stages()[0]
    runs = [rest for keyword, rest in build if keyword == "RUN"]
    copies = [rest for keyword, rest in build if keyword == "COPY"]
    lock_step = next(i for i, r in enumerate(runs) if "requirements.lock" in r)
    project_step = next(i for i, r in enumerate(runs) if "--no-deps" in r)
    assert lock_step < project_step
    assert any("requirements.lock" in c for c in copies)


def test_image_contains_what_the_processes_need() -> None:
    copied = " ".join(rest for keyword, rest in _stages()[0] if keyword == "COPY")
    for path in ("alembic.ini", "migrations/", "libs/", "services/"):
        assert path in copied
        assert (ROOT / path).exists()


def _matches(pattern: str, path: str) -> bool:
    """Docker's rule: a pattern excludes a path or any directory above it; ``**/`` may stand
    for any number of leading directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    if pattern.startswith("**/"):
        tail = pattern.removeprefix("**/")
        return any(
            fnmatch.fnmatch("/".join(parts[i:j]), tail)
            for i in range(len(parts))
            for j in range(i + 1, len(parts) + 1)
        )
    return any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes)


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:  # the last matching pattern wins; "!" re-includes
        negate = pattern.startswith("!")
        if _matches(pattern.removeprefix("!").rstrip("/"), path):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_local_state_out_and_sources_in() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        "var/pg/data",
        "bench/out/run.json",
        "libs/billing_core/__pycache__/x.pyc",
        ".mypy_cache/x",
        ".pytest_cache/x",
    ):
        assert _ignored(path, patterns), path
    for path in (
        "pyproject.toml",
        "requirements.lock",
        "README.md",
        "alembic.ini",
        "migrations/env.py",
        "libs/billing_core/settings.py",
        "services/cli.py",
    ):
        assert not _ignored(path, patterns), path


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_pins_every_runtime_dependency() -> None:
    """The image installs the [project] dependencies constrained by requirements.lock: one the
    lock does not pin would be resolved afresh at build time, to whatever is newest."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {
        _normalised(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])
        for requirement in project["dependencies"]
    }
    pinned = {
        _normalised(line.split("==", 1)[0])
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    assert wanted - pinned == set()
