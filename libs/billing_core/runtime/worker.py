"""The one worker loop every background process uses.

``tick()`` does one unit of work (a batch, in its own transaction) and returns True when more work
may be waiting right now (a full batch), False when the process may sleep for ``poll_interval``.
SIGTERM/SIGINT stop the loop after the current tick; a tick that outlives ``shutdown_timeout``
is cancelled, which rolls its transaction back (nothing half done: the next replica retries it).
Errors are logged and retried with exponential backoff, so a database or broker outage pauses the
process instead of killing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Iterator

from billing_core.logging import get_logger

Tick = Callable[[], Awaitable[bool]]

log = get_logger(__name__)


class Worker:
    def __init__(
        self,
        name: str,
        tick: Tick,
        *,
        poll_interval: float,
        error_backoff: float = 0.5,
        max_error_backoff: float = 30.0,
        shutdown_timeout: float = 10.0,
        stop_event: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self._tick = tick
        self._poll_interval = poll_interval
        self._error_backoff = error_backoff
        self._max_error_backoff = max_error_backoff
        self._shutdown_timeout = shutdown_timeout
        self.stop_event = stop_event or asyncio.Event()
        self.ticks = 0
        self.consecutive_errors = 0
        self.stop_requested_at: float | None = None  # monotonic time the stop was seen

    def stop(self) -> None:
        self.stop_event.set()

    @property
    def healthy(self) -> bool:
        return not self.stop_event.is_set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), timeout=seconds)

    async def _loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                more = await self._tick()
                self.ticks += 1
                self.consecutive_errors = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.consecutive_errors += 1
                delay = min(
                    self._max_error_backoff,
                    self._error_backoff * 2 ** min(self.consecutive_errors - 1, 10),
                )
                log.warning(
                    "tick_failed",
                    worker=self.name,
                    error=repr(exc),
                    consecutive_errors=self.consecutive_errors,
                    retry_in_s=delay,
                )
                await self._sleep(delay)
                continue
            if not more:
                await self._sleep(self._poll_interval)

    async def run(self) -> None:
        """Run until stopped (signal or :meth:`stop`), then finish or cancel the current tick."""
        task = asyncio.create_task(self._loop(), name=f"{self.name}-loop")
        await self.stop_event.wait()
        self.stop_requested_at = time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=self._shutdown_timeout)
        except TimeoutError:
            log.warning("shutdown_timeout_cancelling_tick", worker=self.name)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        log.info("worker_stopped", worker=self.name, ticks=self.ticks)


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGTERM/SIGINT while inside the block; restore the handlers after."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
