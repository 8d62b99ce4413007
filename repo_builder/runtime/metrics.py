"""Prometheus metrics of the served Python models, through the Python backend's custom metrics API.

Vendored into every rendered Python model (standard library only; ``triton_python_backend_utils`` is passed in,
so the unit tests run without Triton). Triton serves them on its metrics port (``/metrics``) beside its own
``nv_inference_*`` families.

One table, :data:`FAMILIES` (in :mod:`.metric_families`, re-exported here), names every family: the
``nv_trt_llm_*`` / ``nv_llm_*`` families of NVIDIA's TensorRT-LLM backend with NVIDIA's names, label names, label
values and meanings (tensorrtllm_backend v0.19.0: README "Triton Metrics" and
``inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc``; values from the executor's
iteration stats in ``model_instance_state.cc``), filled by repo-builder's Python engines from their own scheduler
and KV cache; and the ``repo_builder_*`` families of the text side (preprocessing, postprocessing, the BLS) and of
the engines' request outcomes. docs/metrics.md lists them.

Every series carries NVIDIA's labels ``model`` (the model's name) and ``version``; a family with a category
label (``request_type``, ``reason``...) has one series per category value listed in the table. The engines'
series carry one label more, :data:`INSTANCE_LABEL` (Triton's instance name), so two instances of one engine
model are two series: NVIDIA's backend labels only ``model`` and ``version`` (README "Triton Metrics"), and
Triton's core hands a second instance asking for the same labels the same metric, so the instances' gauges
would overwrite each other. The text models' series have no such label: their counters and histograms are
shared by the model's instances and sum over them, which is their meaning.

Cost: a recorded event only updates a Python number under a lock (:meth:`ModelMetrics.inc`, ``observe``);
a daemon thread pushes what changed to Triton every ``period_s`` (:data:`PUSH_PERIOD_S`; each changed series
is one IPC round trip to the tritonserver process, python_backend ``src/metric.cc``), as NVIDIA's backend polls
the executor's stats every ``stats_check_period_ms`` (default 100 ms, but in-process). Gauges of the engine
are read from the scheduler at each push (:class:`EngineMetrics`).
``repo_builder_metrics=false`` (model parameter) turns all of it off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .metric_families import (  # noqa: F401  (re-exported: moved from this module)
    BLS,
    COUNTER,
    ENGINE,
    FAMILIES,
    FAMILY_BY_NAME,
    FINISH_REASONS,
    GAUGE,
    HISTOGRAM,
    LATENCY_BUCKETS,
    POST,
    PRE,
    REFUSAL_REASONS,
    TOKEN_LEN_BUCKETS,
    TOKENS_PER_BLOCK,
    Family,
    refusal_reason,
)

#: seconds between two pushes to Triton. Each changed series costs one IPC round trip in the model's process and
#: in tritonserver; a busy engine changes ~6-10 gauge series per push, so at NVIDIA's 100 ms that is 60-100 round
#: trips a second, at 1 s a tenth (IPC calls per token counted by scripts/bench_metrics.py: 0.12 -> 0.07 at one
#: sequence). A Prometheus scrape (every 1-15 s) sees values at most this old.
PUSH_PERIOD_S = 1.0

#: the label naming the model instance on the engines' series (value: Triton's ``model_instance_name``, e.g.
#: ``tensorrt_llm_0_1``). Not ``instance``: Prometheus sets that one to the scrape target.
INSTANCE_LABEL = "model_instance"

# --------------------------------------------------------------------------------------------------
# recording


@dataclass
class _Series:
    family: Family
    category: str | None
    value: float = 0.0  # counters: total so far; gauges: the latest value
    pushed: float = 0.0  # what Triton has (counters: total pushed; gauges: last value set)
    observations: list[float] = field(default_factory=list)  # histograms: not pushed yet
    observed_sum: float = 0.0
    observed_count: int = 0
    metric: Any = None


class ModelMetrics:
    """The metrics of one model instance: local values, pushed to Triton by a daemon thread.

    Args:
        pb: ``triton_python_backend_utils`` (needs ``MetricFamily``), or None to keep values locally only (tests).
        model: the ``model`` label (the model's name); ``version``: the ``version`` label.
        role: which families (:data:`FAMILIES` ``roles``) this model exports.
        period_s: seconds between pushes to Triton.
        log: called with a warning when Triton refuses a family (metrics then stay off for this model).
        instance: the :data:`INSTANCE_LABEL` value of every series (None: no such label).
    Errors never escape: a family Triton refuses turns this model's metrics off with one warning.
    """

    enabled = True

    def __init__(
        self,
        pb: Any,
        model: str,
        version: str,
        role: str,
        *,
        period_s: float = PUSH_PERIOD_S,
        log: Callable[[str], None] | None = None,
        instance: str | None = None,
    ) -> None:
        self.model, self.version, self.role = model, str(version), role
        self.instance = instance
        self.period_s = max(0.01, float(period_s))
        self._log = log or (lambda _m: None)
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str | None], _Series] = {}
        self._families: list[Any] = []
        self._collectors: list[Callable[[], Mapping[tuple[str, str | None], float]]] = []
        for fam in FAMILIES:
            if role in fam.roles:
                for cat in fam.values or (None,):
                    self._series[(fam.name, cat)] = _Series(fam, cat)
        self._pb = pb
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if pb is not None:
            self._create_in_triton(pb)
        if self._pb is not None:
            self._thread = threading.Thread(target=self._run, name=f"metrics-{model}", daemon=True)
            self._thread.start()

    def _create_in_triton(self, pb: Any) -> None:
        kinds = {COUNTER: pb.MetricFamily.COUNTER, GAUGE: pb.MetricFamily.GAUGE, HISTOGRAM: pb.MetricFamily.HISTOGRAM}
        try:
            made: dict[str, Any] = {}
            for s in self._series.values():
                fam = s.family
                if fam.name not in made:
                    made[fam.name] = pb.MetricFamily(name=fam.name, description=fam.description, kind=kinds[fam.kind])
                    self._families.append(made[fam.name])
                labels = {"model": self.model, "version": self.version}
                if self.instance is not None:
                    labels[INSTANCE_LABEL] = self.instance
                if fam.label is not None and s.category is not None:
                    labels[fam.label] = s.category
                if fam.kind == HISTOGRAM:
                    s.metric = made[fam.name].Metric(labels=labels, buckets=list(fam.buckets or ()))
                else:
                    s.metric = made[fam.name].Metric(labels=labels)
        except Exception as exc:  # noqa: BLE001 - metrics must never take a model down
            self._log(f"{self.model}: custom metrics are off ({type(exc).__name__}: {exc})")
            self._pb = None
            for s in self._series.values():
                s.metric = None
            self._families.clear()

    # -- recording (any thread) --
    def inc(self, name: str, value: float = 1.0, category: str | None = None) -> None:
        """Add ``value`` to a counter (series ``category`` of a family with a category label)."""
        s = self._series.get((name, category))
        if s is not None:
            with self._lock:
                s.value += value

    def set(self, name: str, value: float, category: str | None = None) -> None:
        """Set a gauge."""
        s = self._series.get((name, category))
        if s is not None:
            s.value = float(value)

    def observe(self, name: str, value: float, category: str | None = None) -> None:
        """Record one observation of a histogram."""
        s = self._series.get((name, category))
        if s is not None:
            with self._lock:
                if self._pb is not None:  # kept for the next push (nothing to push to otherwise)
                    s.observations.append(value)
                s.observed_sum += value
                s.observed_count += 1

    def refused(self, field_name: str) -> None:
        """Count a request refused because of client field ``field_name``."""
        self.inc("repo_builder_requests_refused_total", 1.0, refusal_reason(field_name))

    def add_collector(self, collect: Callable[[], Mapping[tuple[str, str | None], float]]) -> None:
        """``collect()`` -> {(family, category): gauge value}, called before every push."""
        self._collectors.append(collect)

    # -- reading (tests, `repo-builder top` reads /metrics instead) --
    def value(self, name: str, category: str | None = None) -> float:
        """A counter's total or a gauge's value; a histogram's sum of observations."""
        s = self._series[(name, category)]
        return s.observed_sum if s.family.kind == HISTOGRAM else s.value

    def count(self, name: str, category: str | None = None) -> int:
        """A histogram's number of observations."""
        return self._series[(name, category)].observed_count

    def names(self) -> list[str]:
        """The families this model exports."""
        return sorted({n for n, _c in self._series})

    # -- pushing --
    def collect(self) -> None:
        """Run the collectors (gauge values); :meth:`flush` calls it."""
        for collect in self._collectors:
            try:
                for key, v in collect().items():
                    s = self._series.get(key)
                    if s is not None:
                        s.value = float(v)
            except Exception as exc:  # noqa: BLE001 - a failing collector must not stop the pushes
                self._log(f"{self.model}: metrics collector failed: {exc!r}")

    def flush(self) -> int:
        """Push what changed since the last push to Triton; returns the number of IPC calls made."""
        self.collect()
        calls = 0
        for s in self._series.values():
            kind = s.family.kind
            if kind == HISTOGRAM:
                if not s.observations:
                    continue
                with self._lock:
                    obs, s.observations = s.observations, []
                if s.metric is not None:
                    for v in obs:
                        s.metric.observe(v)
                    calls += len(obs)
                continue
            with self._lock:
                value = s.value
            if value == s.pushed:
                continue
            if s.metric is not None:
                if kind == COUNTER:
                    s.metric.increment(value - s.pushed)
                else:
                    s.metric.set(value)
                calls += 1
            s.pushed = value
        return calls

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - e.g. the server is going away
                self._log(f"{self.model}: metrics push failed: {exc!r}")

    def close(self) -> None:
        """Stop the push thread, push the last values, release the Triton objects (metrics before families)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._pb is not None:
            try:
                self.flush()
            except Exception:  # noqa: BLE001
                pass
        for s in self._series.values():
            s.metric = None
        self._families.clear()
        self._pb = None


class NullMetrics:
    """Metrics switched off (``repo_builder_metrics=false``): every call does nothing."""

    enabled = False

    def inc(self, name: str, value: float = 1.0, category: str | None = None) -> None:
        pass

    def set(self, name: str, value: float, category: str | None = None) -> None:
        pass

    def observe(self, name: str, value: float, category: str | None = None) -> None:
        pass

    def refused(self, field_name: str) -> None:
        pass

    def add_collector(self, collect: Callable[[], Mapping[tuple[str, str | None], float]]) -> None:
        pass

    def flush(self) -> int:
        return 0

    def close(self) -> None:
        pass


NULL_METRICS = NullMetrics()

Metrics = ModelMetrics | NullMetrics


def metrics_enabled(params: Any) -> bool:
    """The ``repo_builder_metrics`` model parameter (a ``ModelParams``); on when unset."""
    return bool(params.bool("repo_builder_metrics", True))


def for_model(pb: Any, args: Mapping[str, Any], params: Any, role: str, *, period_s: float = PUSH_PERIOD_S) -> Metrics:
    """The metrics of a model being initialized (``args`` of ``initialize``), or :data:`NULL_METRICS` when
    ``repo_builder_metrics`` is false or this Python backend has no custom metrics (``pb.MetricFamily``).
    An engine's (``role`` :data:`ENGINE`) carry :data:`INSTANCE_LABEL` = ``args["model_instance_name"]``."""
    if not metrics_enabled(params) or getattr(pb, "MetricFamily", None) is None:
        return NULL_METRICS
    logger = getattr(pb, "Logger", None)
    log = getattr(logger, "log_warn", None)
    name = str(args.get("model_name") or getattr(params, "model_name", "") or role)
    instance = str(args.get("model_instance_name") or f"{name}_0") if role == ENGINE else None
    return ModelMetrics(
        pb, name, str(args.get("model_version") or "1"), role, period_s=period_s, log=log, instance=instance
    )


class Stopwatch:
    """``with Stopwatch(metrics, family):`` adds the block's duration (seconds) to a counter."""

    __slots__ = ("metrics", "name", "t0")

    def __init__(self, metrics: Metrics, name: str) -> None:
        self.metrics, self.name, self.t0 = metrics, name, 0.0

    def __enter__(self) -> Stopwatch:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.metrics.inc(self.name, time.perf_counter() - self.t0)


# --------------------------------------------------------------------------------------------------
# the engines' scheduler and KV cache -> NVIDIA's families


class EngineMetrics:
    """Fills NVIDIA's ``nv_trt_llm_*`` / ``nv_llm_*`` families and the engine's ``repo_builder_*`` ones from a
    Python engine's scheduler (:class:`.engine_scheduler.Scheduler` calls :meth:`iteration` and :meth:`retired`).

    Meanings follow NVIDIA's backend (values from the executor's ``IterationStats``, tensorrtllm_backend v0.19.0
    ``model_instance_state.cc``): ``active`` = requests the engine holds (running + not yet admitted),
    ``max`` = the most it runs at once (max batch size), ``scheduled`` = requests stepped in the last iteration,
    ``context`` = those of them in their context (prefill) phase, ``waiting`` = active - scheduled;
    ``total_context_tokens`` = prompt tokens prefilled in the last iteration, ``generation_requests`` =
    scheduled - context; KV-cache blocks of :data:`TOKENS_PER_BLOCK` tokens: ``used`` = the blocks the running
    sequences' prompt + generated tokens fill (rounded up per sequence), ``max`` = max batch size x the blocks
    of one ``max_seq_len`` sequence, ``free`` = max - used, ``fraction`` = used / max; ``timestamp`` =
    microseconds since the epoch of the last iteration, ``iteration_counter`` = iterations run. When the engine
    goes idle an iteration of zeros is reported (NVIDIA's keep the last busy iteration's values).
    ``runtime_memory``: the bytes of KV cache the running sequences hold (``cpu`` or ``gpu`` by the engine's
    device) when the engine says its bytes per token (``kv_bytes_per_token``), else 0.
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        max_active: int,
        max_seq_len: int,
        kv_bytes_per_token: int = 0,
        device: str = "cpu",
        tokens_per_block: int = TOKENS_PER_BLOCK,
    ) -> None:
        self.metrics = metrics
        self.tokens_per_block = tpb = max(1, int(tokens_per_block))
        self.max_active = int(max_active)
        self.max_blocks = self.max_active * -(-int(max_seq_len) // tpb)
        self.kv_bytes_per_token = int(kv_bytes_per_token)
        self.memory_type = "gpu" if str(device).startswith("cuda") else "cpu"
        self.iterations = 0
        self.timestamp_us = 0
        self.active = self.scheduled = self.context = self.context_tokens = 0
        self.used_blocks = 0
        self.kv_tokens = 0
        metrics.add_collector(self.gauges)

    def iteration(
        self, active: Iterable[Any], waiting: int, scheduled: int, context: int, context_tokens: int, generated: int = 0
    ) -> None:
        """After an iteration and its retirements: ``active`` the sequences still running (``Sequence``),
        ``waiting`` the sequences not admitted yet; ``scheduled``/``context``/``context_tokens`` of the step and
        the tokens it ``generated`` (counted live in ``repo_builder_engine_output_tokens_total``)."""
        if generated:
            self.metrics.inc("repo_builder_engine_output_tokens_total", generated)
        tpb = self.tokens_per_block
        used = tokens = running = 0
        for seq in active:
            n = len(seq.req.prompt) + len(seq.tokens)
            tokens += n
            used += -(-n // tpb)
            running += 1
        self.iterations += 1
        self.timestamp_us = time.time_ns() // 1000
        if running == 0 and waiting == 0:
            scheduled = context = context_tokens = 0
        self.active = running + int(waiting)
        self.scheduled, self.context, self.context_tokens = scheduled, context, context_tokens
        self.used_blocks, self.kv_tokens = used, tokens

    def retired(self, seq: Any, arrival_ns: int) -> None:
        """A sequence left the engine (``seq.finished`` says how)."""
        m = self.metrics
        reason = seq.finished if seq.finished in FINISH_REASONS else "error"
        m.inc("repo_builder_engine_finished_total", 1.0, reason)
        n_out = len(seq.tokens)
        m.observe("nv_llm_output_token_len", n_out, "total_output_tokens")
        m.observe("nv_llm_input_token_len", len(seq.req.prompt), "total_input_tokens")
        if arrival_ns and seq.first_scheduled_ns:
            m.observe("repo_builder_engine_queue_seconds", max(0, seq.first_scheduled_ns - arrival_ns) / 1e9)
        if arrival_ns and seq.first_token_ns:
            m.observe("repo_builder_engine_first_token_seconds", max(0, seq.first_token_ns - arrival_ns) / 1e9)
        if n_out > 1 and seq.last_token_ns > seq.first_token_ns:
            m.inc("repo_builder_engine_inter_token_seconds_total", (seq.last_token_ns - seq.first_token_ns) / 1e9)
            m.inc("repo_builder_engine_inter_token_gaps_total", n_out - 1)

    def gauges(self) -> dict[tuple[str, str | None], float]:
        """The gauge values now (the push thread calls this, NVIDIA's backend polls its executor likewise)."""
        req, kv = "nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics"
        ifb, gen = "nv_trt_llm_inflight_batcher_metrics", "nv_trt_llm_general_metrics"
        mem = "nv_trt_llm_runtime_memory_metrics"
        used, max_blocks = self.used_blocks, self.max_blocks
        return {
            (req, "active"): self.active,
            (req, "max"): self.max_active,
            (req, "scheduled"): self.scheduled,
            (req, "context"): self.context,
            (req, "waiting"): self.active - self.scheduled,
            (kv, "max"): max_blocks,
            (kv, "free"): max(0, max_blocks - used),
            (kv, "used"): used,
            (kv, "tokens_per"): self.tokens_per_block,
            (kv, "reused"): 0,
            (kv, "fraction"): used / max_blocks if max_blocks else 0.0,
            (ifb, "total_context_tokens"): self.context_tokens,
            (ifb, "generation_requests"): self.scheduled - self.context,
            (ifb, "micro_batch_id"): 0,
            (ifb, "paused_requests"): 0,
            (gen, "timestamp"): self.timestamp_us,
            (gen, "iteration_counter"): self.iterations,
            (mem, self.memory_type): self.kv_tokens * self.kv_bytes_per_token,
        }


def attach_engine_metrics(
    pb: Any, args: Mapping[str, Any], params: Any, scheduler: Any, backend: Any, limits: Any
) -> Metrics:
    """Metrics of a Python engine (``tensorrt_llm`` slot): :class:`EngineMetrics` observing ``scheduler``,
    pushed every :data:`PUSH_PERIOD_S`."""
    metrics = for_model(pb, args, params, ENGINE)
    if metrics.enabled:
        device = getattr(backend, "device", "cpu")
        scheduler.observer = EngineMetrics(
            metrics,
            max_active=scheduler.max_active,
            max_seq_len=int(limits.max_seq_len),
            kv_bytes_per_token=int(getattr(backend, "kv_bytes_per_token", 0) or 0),
            device=str(getattr(device, "type", device)),
        )
    return metrics
