"""Which worker processes answer, and what their metrics say: the console asks each configured
process's ``/readyz`` and reads its ``/metrics`` (the numbers Prometheus scrapes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class ProcessState:
    name: str
    url: str
    ready: bool
    detail: str
    rate_limited: int | None  # 429 answers counted by this process (collectors), if it says


def parse_processes(spec: str) -> list[tuple[str, str]]:
    """``name=http://host:port,...`` → [(name, base URL)]; malformed entries raise ValueError."""
    pairs: list[tuple[str, str]] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = entry.partition("=")
        if not sep or not name.strip() or not url.strip().startswith(("http://", "https://")):
            raise ValueError(f"expected name=http://host:port, got {entry!r}")
        pairs.append((name.strip(), url.strip().rstrip("/")))
    return pairs


def _rate_limited(metrics_text: str) -> int | None:
    total: float | None = None
    for family in text_string_to_metric_families(metrics_text):
        if "rate_limited" in family.name and family.type == "counter":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    total = (total or 0.0) + sample.value
    return None if total is None else int(total)


async def _probe(client: httpx.AsyncClient, name: str, url: str) -> ProcessState:
    try:
        ready = await client.get(f"{url}/readyz")
    except httpx.HTTPError as exc:
        return ProcessState(name, url, False, f"not answering ({type(exc).__name__})", None)
    limited: int | None = None
    try:
        scraped = await client.get(f"{url}/metrics")
        if scraped.status_code == 200:
            limited = _rate_limited(scraped.text)
    except (httpx.HTTPError, ValueError):
        limited = None
    ok = ready.status_code == 200
    detail = "ready" if ok else f"not ready ({ready.status_code})"
    return ProcessState(name, url, ok, detail, limited)


async def probe_all(processes: list[tuple[str, str]], timeout: float = 1.0) -> list[ProcessState]:
    async with httpx.AsyncClient(timeout=timeout) as client:
        return list(await asyncio.gather(*(_probe(client, n, u) for n, u in processes)))
