"""The in-flight scheduler of the Python engines: every iteration steps all active sequences by one token; new
requests join between iterations; ``stop`` requests and client cancellation are honoured between steps."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .engine_outputs import GenerationBackend, RequestGroup, Sequence

# --------------------------------------------------------------------------------------------------
# Scheduler


class Scheduler:
    """In-flight batching: every iteration steps all active sequences by one token.

    New requests join between iterations, so a long request never blocks a short one. Runs on its own
    thread (:meth:`start`) or, for tests, in the caller's thread (:meth:`run_until_idle`).

    Args:
        backend: produces tokens (see :class:`GenerationBackend`).
        max_active: most sequences stepped together; more wait in FIFO order.
        cancel_check_period_s: how often (seconds) each request's ``is_cancelled`` is polled
            (TRT-LLM's ``cancellation_check_period_ms`` default is 100 ms).
        log: called with warning/error text (e.g. ``pb_utils.Logger.log_error``).
    """

    def __init__(
        self,
        backend: GenerationBackend,
        *,
        max_active: int = 64,
        cancel_check_period_s: float = 0.1,
        log: Callable[[str], None] | None = None,
        info: Callable[[str], None] | None = None,
    ) -> None:
        self.backend = backend
        self.max_active = max(1, int(max_active))
        self.cancel_check_period_s = cancel_check_period_s
        self.log = log or (lambda _msg: None)
        self.info = info or (lambda _msg: None)
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._waiting: list[Sequence] = []
        self._active: list[Sequence] = []
        self._groups: list[RequestGroup] = []
        self._thread: threading.Thread | None = None
        self._shutdown = False
        self.steps = 0
        #: gets every iteration and every retired sequence (:class:`.metrics.EngineMetrics`), or None
        self.observer: Any = None

    # -- submission (any thread) --
    def submit(self, group: RequestGroup) -> None:
        """Queue a request group; thread-safe."""
        self._inbox.put(("submit", group))

    def stop_request(self, request_id: str) -> None:
        """Finish the in-flight requests whose Triton request id is ``request_id`` (``stop`` input)."""
        self._inbox.put(("stop", request_id))

    @property
    def alive(self) -> bool:
        """True while the scheduling thread runs (or when no thread was started)."""
        return self._thread is None or self._thread.is_alive()

    def start(self) -> None:
        """Run the scheduling loop on a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="repo-builder-engine", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the loop; requests still running get an error response."""
        self._inbox.put(("shutdown", None))
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self._drain(block=False)

    # -- loop --
    def _loop(self) -> None:
        while not self._shutdown:
            self._drain(block=not (self._active or self._waiting))
            if self._shutdown:
                break
            if self._active or self._waiting:
                try:
                    self.run_step()
                except Exception as exc:  # noqa: BLE001 - keep serving; fail what was running
                    self.log(f"tensorrt_llm: scheduler step failed: {exc!r}")
                    for g in self._groups:
                        g.fail(f"tensorrt_llm: internal error: {exc}")
                    self._retire()
        for g in self._groups:
            g.fail("tensorrt_llm: the model is shutting down")
        self._groups.clear()

    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, value = item
            if kind == "submit":
                group: RequestGroup = value
                self._groups.append(group)
                self._waiting.extend(group.seqs)
                if not group.seqs:
                    group.emit([])
            elif kind == "stop":
                for g in self._groups:
                    if value and g.request_id == value:
                        g.stop_requested = True
            elif kind == "shutdown":
                self._shutdown = True
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def run_until_idle(self, max_steps: int = 1_000_000) -> int:
        """Process the inbox and step until nothing is left (in the caller's thread). Returns steps run."""
        n = 0
        self._drain(block=False)
        while (self._active or self._waiting) and n < max_steps:
            self.run_step()
            n += 1
            self._drain(block=False)
        return n

    def run_step(self) -> None:
        """One iteration: take new requests, admit waiting sequences, honour stop/cancel, step, emit."""
        self._drain(block=False)
        while self._waiting and len(self._active) < self.max_active:
            seq = self._waiting.pop(0)
            seq.first_scheduled_ns = time.time_ns()
            self._active.append(seq)
        now = time.monotonic()
        for g in self._groups:
            if g.done:
                continue
            if g.stop_requested:
                for s in g.seqs:
                    if s.finished is None:
                        s.finished = "stopped"
                self.info(
                    f"tensorrt_llm: request '{g.request_id}' stopped by a stop request after "
                    f"{sum(len(s.tokens) for s in g.seqs)} generated token(s)"
                )
                g.emit(g.seqs)
            elif now - g.last_cancel_check >= self.cancel_check_period_s:
                g.last_cancel_check = now
                try:
                    cancelled = g.sink.is_cancelled()
                except Exception:  # noqa: BLE001 - a broken sender counts as cancelled
                    cancelled = True
                if cancelled:
                    self.info(
                        f"tensorrt_llm: request '{g.request_id}' cancelled by the client after "
                        f"{sum(len(s.tokens) for s in g.seqs)} generated token(s)"
                    )
                    g.drop()
        self._retire()
        obs = self.observer
        if not self._active:
            if obs is not None:
                obs.iteration((), len(self._waiting), 0, 0, 0)
            return
        batch = list(self._active)
        context = [s for s in batch if not s.first_token_ns] if obs is not None else []
        held = sum(len(s.tokens) for s in batch) if obs is not None else 0
        results: list[tuple[int, float] | None]
        try:
            results = list(self.backend.step(batch))
        except Exception as exc:  # noqa: BLE001 - isolate the failing sequence(s)
            results = self._step_isolated(batch, exc)
        self.steps += 1
        touched: dict[int, tuple[RequestGroup, list[Sequence]]] = {}
        for seq, res in zip(batch, results):
            if res is None or seq.group.done:
                continue
            seq.accept(*res)
            touched.setdefault(id(seq.group), (seq.group, []))[1].append(seq)
        for group, seqs in touched.values():
            group.emit(seqs)
        self._retire()
        if obs is not None:
            obs.iteration(
                self._active,
                len(self._waiting),
                len(batch),
                len(context),
                sum(len(s.req.prompt) for s in context),
                sum(len(s.tokens) for s in batch) - held,
            )

    def _step_isolated(self, batch: list[Sequence], first_exc: Exception) -> list[tuple[int, float] | None]:
        self.log(f"tensorrt_llm: batched step failed ({first_exc!r}); retrying sequences one by one")
        results: list[tuple[int, float] | None] = []
        for seq in batch:
            try:
                results.append(self.backend.step([seq])[0])
            except Exception as exc:  # noqa: BLE001
                seq.group.fail(f"tensorrt_llm: generation failed: {exc}")
                results.append(None)
        return results

    def _retire(self) -> None:
        keep: list[Sequence] = []
        obs = self.observer
        for seq in self._active:
            if seq.finished is not None or seq.group.done:
                try:
                    self.backend.release(seq)
                except Exception:  # noqa: BLE001
                    pass
                if obs is not None:
                    obs.retired(seq, seq.group.arrival_ns)
            else:
                keep.append(seq)
        self._active = keep
        waiting = [s for s in self._waiting if not s.group.done and s.finished is None]
        if obs is not None and len(waiting) != len(self._waiting):
            for seq in self._waiting:
                if seq.group.done or seq.finished is not None:
                    obs.retired(seq, seq.group.arrival_ns)
        self._waiting = waiting
        self._groups = [g for g in self._groups if not g.done]
