"""runtime/metrics.py: the families table, local recording and the pushes to Triton's custom metrics API, the
engines' nv_trt_llm_* values from a real scheduler, and the text-side costs of preprocessing/postprocessing.

Triton's ``pb_utils.MetricFamily`` exists only inside the Python backend's stub, so a stand-in records the calls
(same signatures as python_backend r24.10 ``pb_stub.cc``); the real server is tested in
tests/e2e/test_metrics_served.py.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from engine_fakes import engine_model_config, req_inputs
from test_postprocessing_model import post
from test_preprocessing_model import pre, q

from repo_builder.runtime import metrics as M
from repo_builder.runtime.engine_core import CollectingSink, EngineLimits, ModelIO, RequestGroup, Scheduler
from repo_builder.runtime.engine_request import parse_request
from repo_builder.runtime.params import ModelParams
from repo_builder.runtime.synthetic import SyntheticBackend

IO = ModelIO.from_config(engine_model_config("trtllm-1.2"))
LIMITS = EngineLimits(vocab_size=1000, max_input_len=100, max_seq_len=200, exclude_input_in_output=True)


class FakeMetric:
    def __init__(self, family: FakeFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        self.family, self.labels, self.buckets = family, labels, buckets
        self.calls: list[tuple[str, float]] = []

    def increment(self, v: float) -> None:
        assert v >= 0, "a counter only goes up"
        self.calls.append(("increment", v))

    def set(self, v: float) -> None:
        self.calls.append(("set", v))

    def observe(self, v: float) -> None:
        self.calls.append(("observe", v))

    def total(self) -> float:
        """What Triton would export: counter total, gauge value, histogram sum."""
        if self.family.kind == "GAUGE":
            return self.calls[-1][1] if self.calls else 0.0
        return sum(v for _op, v in self.calls)


class FakeFamily:
    COUNTER, GAUGE, HISTOGRAM = "COUNTER", "GAUGE", "HISTOGRAM"
    made: list[FakeFamily] = []
    refuse: str | None = None

    def __init__(self, name: str, description: str, kind: str) -> None:
        if name == FakeFamily.refuse:
            raise RuntimeError(f"metric family '{name}' already exists with a different kind")
        self.name, self.description, self.kind = name, description, kind
        self.metrics: list[FakeMetric] = []
        FakeFamily.made.append(self)

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> FakeMetric:  # noqa: N802
        if self.kind == "HISTOGRAM":
            assert buckets, "Triton needs buckets for a histogram"
        m = FakeMetric(self, dict(labels or {}), buckets)
        self.metrics.append(m)
        return m


def fake_pb(warnings: list[str] | None = None) -> Any:
    FakeFamily.made = []
    log = warnings.append if warnings is not None else lambda _m: None
    return types.SimpleNamespace(MetricFamily=FakeFamily, Logger=types.SimpleNamespace(log_warn=log))


def series(name: str, **labels: str) -> FakeMetric:
    for fam in FakeFamily.made:
        if fam.name == name:
            for m in fam.metrics:
                if all(m.labels.get(k) == v for k, v in labels.items()):
                    return m
    raise KeyError((name, labels))


# ---------------------------------------------------------------------------------------------- the table
def test_nvidia_families_keep_nvidia_names_labels_and_kinds():
    """tensorrtllm_backend v0.19.0 custom_metrics_reporter.cc: family -> (kind, category label, label values)."""
    nvidia = {
        "nv_trt_llm_request_metrics": (M.GAUGE, "request_type", {"active", "max", "scheduled", "context", "waiting"}),
        "nv_trt_llm_runtime_memory_metrics": (M.GAUGE, "memory_type", {"cpu", "gpu", "pinned"}),
        "nv_trt_llm_kv_cache_block_metrics": (
            M.GAUGE,
            "kv_cache_block_type",
            {"max", "free", "used", "tokens_per", "reused", "fraction"},
        ),
        "nv_trt_llm_disaggregated_serving_metrics": (
            M.COUNTER,
            "disaggregated_serving_type",
            {"kv_cache_transfer_ms", "request_count"},
        ),
        "nv_trt_llm_inflight_batcher_metrics": (
            M.GAUGE,
            "inflight_batcher_specific_metric",
            {"total_context_tokens", "generation_requests", "micro_batch_id", "paused_requests"},
        ),
        "nv_trt_llm_general_metrics": (M.GAUGE, "general_type", {"timestamp", "iteration_counter"}),
        "nv_llm_output_token_len": (M.HISTOGRAM, "response_metric_type", {"total_output_tokens"}),
        "nv_llm_input_token_len": (M.HISTOGRAM, "response_metric_type", {"total_input_tokens"}),
    }
    got = {f.name: (f.kind, f.label, set(f.values)) for f in M.FAMILIES if f.name.startswith("nv_")}
    assert got == nvidia
    ours = [f for f in M.FAMILIES if not f.name.startswith("nv_")]
    assert all(f.name.startswith("repo_builder_") for f in ours)
    assert all(f.name.endswith("_total") == (f.kind == M.COUNTER) for f in ours)  # the naming scheme
    assert len({f.name for f in M.FAMILIES}) == len(M.FAMILIES)


def test_refusal_reasons_map_fields_onto_a_bounded_label_set():
    assert M.refusal_reason("max_tokens") == "max_tokens"
    assert M.refusal_reason("request_output_len") == "max_tokens"
    assert M.refusal_reason("runtime_top_p") == "sampling"
    assert M.refusal_reason("some_new_field") == "other"


# ---------------------------------------------------------------------------------------------- pushes
def test_pushes_send_deltas_once_and_labels_like_nvidia():
    pb = fake_pb()
    m = M.ModelMetrics(pb, "preprocessing", "1", M.PRE, period_s=3600)
    try:
        m.inc("repo_builder_tokenize_seconds_total", 0.25)
        m.inc("repo_builder_tokenize_seconds_total", 0.5)
        m.refused("max_tokens")
        assert m.flush() == 2
        assert m.flush() == 0  # nothing changed: no IPC
        m.inc("repo_builder_tokenize_seconds_total", 1.0)
        assert m.flush() == 1
        s = series("repo_builder_tokenize_seconds_total", model="preprocessing", version="1")
        assert s.calls == [("increment", 0.75), ("increment", 1.0)]
        refused = series("repo_builder_requests_refused_total", reason="max_tokens")
        assert refused.total() == 1 and refused.labels == {
            "model": "preprocessing",
            "version": "1",
            "reason": "max_tokens",
        }
        # preprocessing exports neither the engine's families nor the BLS's
        names = {f.name for f in FakeFamily.made}
        assert "nv_trt_llm_request_metrics" not in names and "repo_builder_streams_cancelled_total" not in names
    finally:
        m.close()


def test_engine_series_name_their_instance_and_text_series_do_not():
    """Two instances of one engine model are two series (Triton's instance name in ``model_instance``); NVIDIA's
    labels stay; a text model's series are shared by its instances (no instance label)."""
    pb = fake_pb()
    params = ModelParams({"name": "tensorrt_llm", "parameters": {}})
    engines = [
        M.for_model(
            pb, {"model_name": "tensorrt_llm", "model_version": "1", "model_instance_name": n}, params, M.ENGINE
        )
        for n in ("tensorrt_llm_0_0", "tensorrt_llm_0_1")
    ]
    pre = M.for_model(pb, {"model_name": "preprocessing", "model_version": "1"}, params, M.PRE)
    try:
        for i, m in enumerate(engines):
            m.set("nv_trt_llm_request_metrics", 3 + i, "active")
            m.flush()
        for i, instance in enumerate(("tensorrt_llm_0_0", "tensorrt_llm_0_1")):
            s = series("nv_trt_llm_request_metrics", request_type="active", model_instance=instance)
            assert s.labels == {
                "model": "tensorrt_llm",
                "version": "1",
                "model_instance": instance,
                "request_type": "active",
            }
            assert s.calls[-1] == ("set", 3 + i)
        pre.inc("repo_builder_tokenize_requests_total")
        pre.flush()
        assert series("repo_builder_tokenize_requests_total").labels == {"model": "preprocessing", "version": "1"}
    finally:
        for m in (*engines, pre):
            m.close()


def test_close_pushes_what_is_left():
    pb = fake_pb()
    m = M.ModelMetrics(pb, "postprocessing", "1", M.POST, period_s=3600)
    m.inc("repo_builder_detokenize_tokens_total", 7)
    m.close()
    assert series("repo_builder_detokenize_tokens_total").total() == 7


def test_the_push_thread_flushes_on_its_own():
    pb = fake_pb()
    m = M.ModelMetrics(pb, "postprocessing", "1", M.POST, period_s=0.01)
    try:
        m.inc("repo_builder_detokenize_tokens_total", 3)
        s = series("repo_builder_detokenize_tokens_total")
        for _ in range(500):
            if s.total() == 3:
                break
            import time

            time.sleep(0.01)
        assert s.total() == 3
    finally:
        m.close()


def test_a_family_triton_refuses_turns_metrics_off_with_a_warning():
    warnings: list[str] = []
    pb = fake_pb(warnings)
    FakeFamily.refuse = "repo_builder_detokenize_tokens_total"
    try:
        params = ModelParams({"name": "postprocessing", "parameters": {}})
        m = M.for_model(pb, {"model_name": "postprocessing", "model_version": "1"}, params, M.POST)
        m.inc("repo_builder_detokenize_tokens_total", 3)
        assert m.flush() == 0
        m.close()
    finally:
        FakeFamily.refuse = None
    assert len(warnings) == 1 and "custom metrics are off" in warnings[0] and "different kind" in warnings[0]


def test_parameter_off_and_old_backends_give_null_metrics():
    args = {"model_name": "preprocessing", "model_version": "1"}
    off = ModelParams({"name": "p", "parameters": {"repo_builder_metrics": {"string_value": "false"}}})
    on = ModelParams({"name": "p", "parameters": {"repo_builder_metrics": {"string_value": "${repo_builder_metrics}"}}})
    assert M.for_model(fake_pb(), args, off, M.PRE) is M.NULL_METRICS
    assert M.for_model(types.SimpleNamespace(), args, on, M.PRE) is M.NULL_METRICS  # no MetricFamily
    m = M.for_model(fake_pb(), args, on, M.PRE)
    assert m.enabled
    m.close()


# ---------------------------------------------------------------------------------------------- the engine
def _group(prompt: list[int], n: int) -> RequestGroup:
    return RequestGroup(parse_request(req_inputs(prompt, n), IO, LIMITS, request_id="r"), CollectingSink(), IO)


def test_engine_gauges_follow_the_scheduler_and_return_to_zero():
    pb = fake_pb()
    metrics = M.ModelMetrics(pb, "tensorrt_llm", "1", M.ENGINE, period_s=3600)
    backend = SyntheticBackend.__new__(SyntheticBackend)
    backend.vocab_size, backend.delay_s, backend._next_due = 1000, 0.0, 0.0
    sched = Scheduler(backend, max_active=2)
    obs = M.EngineMetrics(metrics, max_active=2, max_seq_len=200, tokens_per_block=4)
    sched.observer = obs
    prompts = [[5] * 6, [6] * 3, [7] * 9]  # 3 requests, 2 run at once
    lengths = [5, 2, 4]
    for p, n in zip(prompts, lengths):
        sched.submit(_group(p, n))
    sched.run_step()  # first iteration: two prefills, the third waits
    g = obs.gauges()
    assert g[("nv_trt_llm_request_metrics", "active")] == 3
    assert g[("nv_trt_llm_request_metrics", "scheduled")] == 2
    assert g[("nv_trt_llm_request_metrics", "context")] == 2
    assert g[("nv_trt_llm_request_metrics", "waiting")] == 1
    assert g[("nv_trt_llm_request_metrics", "max")] == 2
    assert g[("nv_trt_llm_inflight_batcher_metrics", "total_context_tokens")] == 9
    # after one token each: ceil((6+1)/4) + ceil((3+1)/4) = 2 + 1 blocks
    assert g[("nv_trt_llm_kv_cache_block_metrics", "used")] == 3
    assert g[("nv_trt_llm_kv_cache_block_metrics", "max")] == 2 * 50
    assert g[("nv_trt_llm_kv_cache_block_metrics", "free")] == 97
    sched.run_step()
    g = obs.gauges()
    assert g[("nv_trt_llm_request_metrics", "context")] == 0
    assert g[("nv_trt_llm_inflight_batcher_metrics", "generation_requests")] == 2
    sched.run_until_idle()
    metrics.flush()
    g = obs.gauges()
    assert g[("nv_trt_llm_request_metrics", "active")] == 0
    assert g[("nv_trt_llm_kv_cache_block_metrics", "used")] == 0
    assert g[("nv_trt_llm_kv_cache_block_metrics", "fraction")] == 0.0
    assert g[("nv_trt_llm_general_metrics", "iteration_counter")] == obs.iterations > 0
    # pushed to Triton: gauges back at zero, every generated token counted once
    assert series("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="used").total() == 0
    assert series("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="tokens_per").total() == 4
    out = series("nv_llm_output_token_len")
    assert out.buckets == list(M.TOKEN_LEN_BUCKETS)
    assert sorted(v for _op, v in out.calls) == sorted(lengths)
    assert series("nv_llm_input_token_len").total() == sum(len(p) for p in prompts)
    assert series("repo_builder_engine_output_tokens_total").total() == sum(lengths)
    assert series("repo_builder_engine_finished_total", reason="length").total() == 3
    assert len(series("repo_builder_engine_first_token_seconds").calls) == 3
    assert series("repo_builder_engine_inter_token_gaps_total").total() == sum(n - 1 for n in lengths)
    metrics.close()


def test_cancelled_and_stopped_requests_are_counted_by_reason():
    metrics = M.ModelMetrics(None, "tensorrt_llm", "1", M.ENGINE)
    backend = SyntheticBackend.__new__(SyntheticBackend)
    backend.vocab_size, backend.delay_s, backend._next_due = 1000, 0.0, 0.0
    sched = Scheduler(backend, max_active=1, cancel_check_period_s=0.0)
    sched.observer = M.EngineMetrics(metrics, max_active=1, max_seq_len=200)
    running, queued = _group([5] * 4, 50), _group([6] * 4, 50)
    sched.submit(running)
    sched.submit(queued)
    sched.run_step()
    running.sink.cancelled = True
    queued.sink.cancelled = True
    sched.run_until_idle()
    assert metrics.value("repo_builder_engine_finished_total", "cancelled") == 2
    metrics.collect()
    assert metrics.value("nv_trt_llm_request_metrics", "active") == 0
    assert metrics.count("nv_llm_output_token_len", "total_output_tokens") == 2


# ---------------------------------------------------------------------------------------------- text side
def test_preprocessing_records_tokenize_and_word_list_time():
    p = pre(max_input_len=2048, max_seq_len=2560)
    p.metrics = m = M.ModelMetrics(None, "preprocessing", "1", M.PRE)
    out = p.process({"QUERY": q("Hello world", "A longer prompt here"), "REQUEST_OUTPUT_LEN": np.array([[4], [4]])})
    n_tokens = int(np.asarray(out["REQUEST_INPUT_LEN"]).sum())
    assert m.value("repo_builder_tokenize_requests_total") == 1
    assert m.value("repo_builder_prompt_tokens_total") == n_tokens
    assert m.value("repo_builder_tokenize_seconds_total") > 0
    assert m.value("repo_builder_word_list_seconds_total") > 0


def test_postprocessing_records_detokenize_time_per_token():
    pp = post()
    pp.metrics = m = M.ModelMetrics(None, "postprocessing", "1", M.POST)
    ids = [1, 22557, 1526, 28723]
    pp.process({"TOKENS_BATCH": np.array([[ids]], np.int32), "SEQUENCE_LENGTH": np.array([[3]], np.int32)})
    assert m.value("repo_builder_detokenize_tokens_total") == 3  # within SEQUENCE_LENGTH only
    assert m.value("repo_builder_detokenize_seconds_total") > 0


@pytest.mark.parametrize("role", [M.ENGINE, M.PRE, M.POST, M.BLS])
def test_every_role_exports_the_refusal_counter(role):
    m = M.ModelMetrics(None, role, "1", role)
    m.refused("text_input")
    assert m.value("repo_builder_requests_refused_total", "text_input") == 1
