"""The curl walkthrough of docs/API.md, run as it is against the API under uvicorn."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from billing_core.settings import CoreSettings
from services.api.admin import create_api_key
from tests.integration.api.conftest import ApiServer, start_api_server, stop_api_server

ROOT = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"<!-- walkthrough -->\n```bash\n(.*?)```\n<!-- /walkthrough -->", re.S)


def walkthrough() -> str:
    found = BLOCK.search((ROOT / "docs/API.md").read_text())
    assert found, "docs/API.md has no walkthrough block"
    return found.group(1)


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[ApiServer]:
    started = start_api_server()
    try:
        yield started
    finally:
        stop_api_server(started)


def test_the_walkthrough_runs_against_the_live_api(
    server: ApiServer, settings: CoreSettings
) -> None:
    assert shutil.which("curl"), "the walkthrough needs curl (apt-get install curl)"
    key = create_api_key(settings, "walkthrough")
    script = "set -euo pipefail\n" + walkthrough()
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "BASE": server.base_url, "KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout
    assert '"code":"PRO_MONTHLY"' in out
    assert re.search(r'(?im)^etag: "\d+"', out), out
    assert '"kind":"RENEWAL"' in out
    assert '"cancelAtPeriodEnd":true' in out
    problem = json.loads(out.strip().splitlines()[-1])
    assert problem["type"] == "urn:problem-type:billing:subscription-not-found"
