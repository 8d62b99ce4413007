"""The client against a real tritonserver serving the text test double (tests/fixtures/client).

The fixture model generates word ``i`` = the ``i``-th prompt word, cycled and upper-cased, with a leading
space; streaming sends one response per word. A prompt containing FAIL gets an error naming the model.
"""

from __future__ import annotations

import pytest
from conftest import free_ports
from fixtures.client.serve import fixture_server

from repo_builder.client import GenerateRequest, LLMClient
from repo_builder.errors import ClientError

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with fixture_server(tmp_path_factory.mktemp("client"), free_ports(3)) as srv:
        yield srv


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    url = server.http_hostport if request.param == "http" else server.grpc_url
    with LLMClient(url, request.param, "fake_llm", timeout_s=60) as c:
        yield c


def test_generate_without_stream_returns_one_response(client):
    result = client.generate(GenerateRequest("hello big world", max_tokens=4))
    assert result.ok, result.error
    assert result.text == "hello big world HELLO BIG WORLD HELLO"  # the prompt is included by default
    assert [e.has_output for e in result.events].count(True) == 1
    assert result.ttft_ms == pytest.approx(result.latency_ms, abs=1e-9)  # one response: TTFT == E2E

    excluded = client.generate(GenerateRequest("hello big world", max_tokens=2, exclude_input_in_output=True))
    assert excluded.text == " HELLO BIG"


def test_stream_yields_one_delta_per_token_with_increasing_timestamps(client):
    req = GenerateRequest(
        "alpha beta gamma",
        max_tokens=5,
        stream=True,
        stop_words=["x", "y"],
        temperature=0.5,
        top_k=1,
        top_p=0.9,
        min_tokens=5,
    )
    events = list(client.iter_events(req))
    deltas = [e.text for e in events if e.has_output]
    assert deltas == [" ALPHA", " BETA", " GAMMA", " ALPHA", " BETA"]
    times = [e.time_ns for e in events]
    assert times == sorted(times)
    assert events[-1].final and not any(e.final for e in events[:-1])

    result = client.generate(req)
    assert result.text == " ALPHA BETA GAMMA ALPHA BETA"
    assert len(result.chunk_times_ns) == 5
    assert 0 < result.ttft_ms <= result.latency_ms
    assert result.start_ns < result.chunk_times_ns[0] <= result.end_ns
    assert result.token_ids is None  # text models return no ids


def test_grpc_stream_routes_concurrent_requests_by_id(server):
    with LLMClient(server.grpc_url, "grpc", "fake_llm") as c:
        reqs = [
            GenerateRequest(f"prompt{i} word{i}", max_tokens=4, stream=True, request_id=f"req-{i}") for i in range(6)
        ]
        results = c.generate_many(reqs)
    for i, res in enumerate(results):
        assert res.request_id == f"req-{i}"
        assert res.ok, res.error
        assert res.text == f" PROMPT{i} WORD{i} PROMPT{i} WORD{i}"
        assert res.events[-1].final


def test_grpc_duplicate_request_ids_refused(server):
    with LLMClient(server.grpc_url, "grpc", "fake_llm") as c:
        with pytest.raises(ClientError) as exc:
            c.generate_many(
                [GenerateRequest("a", stream=True, request_id="7"), GenerateRequest("b", stream=True, request_id="7")]
            )
    assert exc.value.key == "request_id"


@pytest.mark.parametrize("stream", [False, True])
def test_server_error_names_model_and_server_message(client, stream):
    result = client.generate(GenerateRequest("please FAIL now", max_tokens=3, stream=stream))
    assert not result.ok
    assert "fake_llm" in str(result.error)
    assert "the prompt asked this model to fail" in str(result.error)
    with pytest.raises(ClientError, match="fake_llm.*asked this model to fail"):
        list(client.iter_events(GenerateRequest("FAIL", max_tokens=3, stream=stream)))


def test_error_among_concurrent_requests_goes_to_the_failing_one(client):
    reqs = [GenerateRequest(f"ok{i} words", max_tokens=3, stream=True) for i in range(3)]
    reqs.insert(1, GenerateRequest("FAIL here", max_tokens=3, stream=True))
    results = client.generate_many(reqs)
    assert [r.ok for r in results] == [True, False, True, True]
    assert "asked this model to fail" in str(results[1].error)
    assert results[2].text == " OK1 WORDS OK1"


def test_old_profile_dtypes_and_shapes_from_served_config(server):
    # fake_llm_v05: max_tokens/end_id UINT32, text_input dims [-1], max_batch_size 0, bad/stop words required
    for proto, url in (("http", server.http_hostport), ("grpc", server.grpc_url)):
        with LLMClient(url, proto, "fake_llm_v05") as c:
            info = c.model_info()
            assert info.max_batch_size == 0 and info.inputs["max_tokens"].data_type == "TYPE_UINT32"
            res = c.generate(GenerateRequest("old style", max_tokens=3, stream=True, min_tokens=3, end_id=2))
            assert res.ok, res.error
            assert res.text == " OLD STYLE OLD"
            with pytest.raises(ClientError) as exc:
                c.generate(GenerateRequest("old style", end_id=-1))
            assert exc.value.key == "end_id" and "UINT32" in str(exc.value)
            with pytest.raises(ClientError) as exc:
                c.generate(GenerateRequest("old style", exclude_input_in_output=True))
            assert exc.value.key == "exclude_input_in_output"


def test_b30_beam_search_with_streaming_refused(client):
    with pytest.raises(ClientError) as exc:
        client.generate(GenerateRequest("a b", beam_width=2, stream=True))
    assert exc.value.key == "beam_width"
    assert "stream" in str(exc.value)
    # without streaming the same beam width is sent (the fixture ignores it)
    assert client.generate(GenerateRequest("a b", max_tokens=1, beam_width=2)).ok


def test_b29b_generate_endpoint_with_stream_on_decoupled_model_refused(server):
    with LLMClient(server.http_hostport, "http", "fake_llm") as c:
        with pytest.raises(ClientError) as exc:
            c.generate(GenerateRequest("a b", max_tokens=2, stream=True), endpoint="generate")
        assert exc.value.key == "stream"
        assert "generate_stream" in str(exc.value)
        # generate_stream without streaming is fine: one response
        res = c.generate(GenerateRequest("a b", max_tokens=2), endpoint="generate_stream")
        assert res.text == "a b A B"


def test_b29a_stream_on_non_decoupled_model_refused(server):
    for proto, url in (("http", server.http_hostport), ("grpc", server.grpc_url)):
        with LLMClient(url, proto, "fake_llm_sync") as c:
            assert c.generate(GenerateRequest("sync me", max_tokens=2)).text == "sync me SYNC ME"
            with pytest.raises(ClientError) as exc:
                c.generate(GenerateRequest("sync me", stream=True))
            assert exc.value.key == "stream" and "decoupled" in str(exc.value)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_b33_token_ids_go_to_infer_as_1_by_n_int32(server, proto):
    url = server.http_hostport if proto == "http" else server.grpc_url
    with LLMClient(url, proto) as c:
        res = c.infer_token_ids([5, 6, 7], request_output_len=2)
        # the fixture echoes the ids then adds ids[i % N] + 1
        assert res.token_ids == [5, 6, 7, 6, 7]
        assert res.count_output_tokens() == 2  # the echoed prompt is not output (request_output_len 2)
        with pytest.raises(ClientError) as exc:
            c.infer_token_ids([], 2)
        assert exc.value.key == "input_ids"


def test_b33_token_ids_to_decoupled_model_over_http_refused(server):
    with LLMClient(server.http_hostport, "http") as c:
        with pytest.raises(ClientError) as exc:
            c.infer_token_ids([1, 2], 2, model="fake_llm")
    assert exc.value.key == "protocol" and "grpc" in str(exc.value)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_client_timeout_is_an_error_naming_the_option(server, proto):
    # the fixture sleeps 2 ms per word before its single non-streamed response: 400 words take 0.8 s
    url = server.http_hostport if proto == "http" else server.grpc_url
    with LLMClient(url, proto, "fake_llm", timeout_s=0.25) as c:
        res = c.generate(GenerateRequest("slow words", max_tokens=400))
        assert not res.ok and res.error.key == "--timeout" and "0.25 s" in str(res.error)
    with LLMClient(url, proto, "fake_llm", timeout_s=30) as c:  # the server itself is fine
        assert c.generate(GenerateRequest("fast", max_tokens=2)).text == "fast FAST FAST"


def test_output_selection_is_grpc_only_and_checked(server):
    with LLMClient(server.grpc_url, "grpc", "fake_llm") as c:
        res = c.generate(GenerateRequest("pick me", max_tokens=2, stream=True, outputs=["text_output"]))
        assert res.text == " PICK ME" and all(list(e.outputs) in ([], ["text_output"]) for e in res.events)
        with pytest.raises(ClientError) as exc:
            c.generate(GenerateRequest("x", outputs=["no_such_output"]))
        assert exc.value.key == "outputs"
    with LLMClient(server.http_hostport, "http", "fake_llm") as c:
        with pytest.raises(ClientError) as exc:
            c.generate(GenerateRequest("x", outputs=["text_output"]))
        assert exc.value.key == "outputs"


def test_unknown_field_and_model_and_server_refused(server):
    with LLMClient(server.http_hostport, "http", "fake_llm") as c:
        with pytest.raises(ClientError) as exc:
            c.generate(GenerateRequest("x", extra={"bogus_field": 1}))
        assert exc.value.key == "bogus_field"
        with pytest.raises(ClientError) as exc:
            c.generate(GenerateRequest("x", max_tokens=0))
        assert exc.value.key == "max_tokens"
    with LLMClient(server.http_hostport, "http", "no_such_model") as c:
        with pytest.raises(ClientError) as exc:
            c.model_info()
        assert exc.value.key == "--model" and "no_such_model" in str(exc.value)
    port = free_ports(1)[0]
    for proto in ("http", "grpc"):
        with pytest.raises(ClientError) as exc:
            LLMClient(f"127.0.0.1:{port}", proto, "fake_llm").model_info()
        assert exc.value.key == "--url"
