"""`repo-builder generate` against a real tritonserver serving the text test double."""

from __future__ import annotations

import re

import pytest
from cli_support import assert_refused
from conftest import asset, free_ports
from fixtures.client.serve import fixture_server
from typer.testing import CliRunner

from repo_builder.cli import app

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with fixture_server(tmp_path_factory.mktemp("client_cli"), free_ports(3)) as srv:
        yield srv


def _url(server, proto):
    return server.http_hostport if proto == "http" else server.grpc_url


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_generate_streams_text_then_reports_ttft_and_tokens(server, proto):
    from transformers import AutoTokenizer

    tok_dir = asset("mistral_v1_tokenizer")
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "--url",
            _url(server, proto),
            "--protocol",
            proto,
            "--model",
            "fake_llm",
            "--text",
            "one two three",
            "--stream",
            "--max-tokens",
            "5",
            "--stop-word",
            "zzz",
            "--request-id",
            "42",
            "--tokenizer-dir",
            str(tok_dir),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == " ONE TWO THREE ONE TWO\n"
    expected = len(
        AutoTokenizer.from_pretrained(str(tok_dir)).encode(" ONE TWO THREE ONE TWO", add_special_tokens=False)
    )
    assert (
        f"tokens generated: {expected} (counted from one tokenization of the whole text with {tok_dir})"
        in result.stderr
    )
    assert "request id: 42" in result.stderr
    assert re.search(r"time to first token: \d+\.\d ms", result.stderr)
    assert "responses: 5" in result.stderr


def test_generate_without_tokenizer_says_tokens_unknown(server):
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "--url",
            _url(server, "http"),
            "--model",
            "fake_llm",
            "--text",
            "a b",
            "--max-tokens",
            "2",
            "--exclude-input",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == " A B\n"
    assert "tokens generated: unknown" in result.stderr


@pytest.mark.parametrize(
    "args, key",
    [
        (["--model", "fake_llm", "--stream", "--beam-width", "2"], "beam_width"),  # B30
        (["--model", "fake_llm_sync", "--stream"], "stream"),  # B29a
        (["--model", "fake_llm_v05", "--end-id", "-1"], "end_id"),  # UINT32 input
    ],
)
def test_generate_refusals_exit_2_naming_the_field(server, args, key):
    result = CliRunner().invoke(app, ["generate", "--url", _url(server, "http"), "--text", "x y", *args])
    assert_refused(result, f"{key}:")


def test_generate_server_error_exit_2_with_model_message(server):
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "--url",
            _url(server, "grpc"),
            "--protocol",
            "grpc",
            "--model",
            "fake_llm",
            "--text",
            "FAIL please",
            "--stream",
        ],
    )
    assert_refused(result, "fake_llm", "asked this model to fail")
