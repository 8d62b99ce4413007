"""The CPU stand-in of ``tensorrt_llm.LLM`` (repo_builder/runtime/llmapi_standin.py) called the way NVIDIA's
1.2.1 llmapi model.py calls it: ``generate_async(prompt, SamplingParams(**kwargs), streaming)`` with the
streaming flag in the third (``lora_request``) position, and ``stop`` as the raw numpy array of the request."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from repo_builder.runtime.llmapi_standin import LLM, GenerationError, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_llama):
    model = LLM(str(tiny_llama), num_threads=1)
    yield model
    model.shutdown()


def _items(llm, *args, **kwargs) -> list[tuple[str, bool]]:
    async def run() -> list[tuple[str, bool]]:
        out = []
        async for state in llm.generate_async(*args, **kwargs):
            out.append((state.outputs[0].text, state.finished))
        return out

    return asyncio.run(run())


@pytest.mark.parametrize("flag", [False, True])
def test_positional_streaming_flag_is_no_adapter_and_one_final_item(llm, flag) -> None:
    """NVIDIA's call shape: one final item with the whole text, as TensorRT-LLM 1.2.1 answers it (no error, no
    token-by-token stream), equal to the keyword call without streaming."""
    kwargs = {"max_tokens": 6, "exclude_input_from_output": True, "best_of": 1, "return_perf_metrics": False}
    got = _items(llm, "Hello there", SamplingParams(**kwargs, stop=None), flag)
    assert len(got) == 1 and got[0][1] is True
    assert got == _items(llm, "Hello there", SamplingParams(**kwargs), streaming=False)
    streamed = _items(llm, "Hello there", SamplingParams(**kwargs), streaming=True)
    assert len(streamed) == 6 and streamed[-1] == got[0]


def test_stop_as_the_requests_numpy_array(llm) -> None:
    """helpers.py passes ``sampling_param_stop`` as the request's numpy BYTES array; an empty one stops nothing."""
    full = _items(llm, "Hello there", SamplingParams(max_tokens=6, exclude_input_from_output=True), False)
    empty = _items(
        llm, "Hello there", SamplingParams(max_tokens=6, exclude_input_from_output=True, stop=np.array([b""])), False
    )
    assert empty == full


def test_a_real_lora_request_is_refused_naming_it(llm) -> None:
    async def run() -> None:
        llm.generate_async("Hello", SamplingParams(max_tokens=2), object())

    with pytest.raises(GenerationError, match="lora_request"):
        asyncio.run(run())


def test_perf_metrics_times_are_timedeltas_in_order(llm) -> None:
    """``request_perf_metrics.timing_metrics``: ``datetime.timedelta`` values as the LLM API gives them (NVIDIA's
    model.py reads them with ``pandas.Timedelta(...).value``), arrival <= first scheduled <= first token <= last."""
    import datetime
    import time

    async def run():
        return await llm.generate_async("Hello", SamplingParams(max_tokens=3, return_perf_metrics=True)).aresult()

    before = time.time()
    timing = asyncio.run(run()).outputs[0].request_perf_metrics.timing_metrics
    times = [timing.arrival_time, timing.first_scheduled_time, timing.first_token_time, timing.last_token_time]
    assert all(isinstance(t, datetime.timedelta) for t in times)
    assert before - 1 <= times[0].total_seconds() and times == sorted(times)


def test_perf_times_reach_the_outputs_to_the_microsecond() -> None:
    """The model's nanoseconds of a timedelta since the epoch are exact (a float product loses ~0.2 us)."""
    import datetime

    from repo_builder.runtime.llmapi_model import _ns

    t = datetime.timedelta(seconds=1796411569, microseconds=191163)
    assert _ns(t) == 1796411569191163000
    assert _ns(1.5) == 1_500_000_000
