"""Every response of repo-builder's Python models holds only the outputs the caller asked for.

Why (measured on Triton 2.51 with its Python 3.12 stub): python_backend's ``ResponseSender::Send`` drops
unrequested tensors after releasing the GIL, and the stub dies with SIGSEGV in ``_PyObject_Free``; Triton then
answers "Stub process '<model>_0_0' is not healthy". repo_builder/runtime/triton_io.only_requested.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from engine_fakes import FakeRequest, fake_pb_utils

from repo_builder.runtime.triton_io import only_requested, requested_names, respond_each, send_each, tensor_response

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = {"a": np.zeros((1, 1), np.int32), "b": np.ones((1, 2), np.float32)}


def test_only_requested_keeps_the_named_outputs_and_all_when_the_request_cannot_say():
    assert set(only_requested(OUTPUTS, frozenset({"b"}))) == {"b"}
    assert only_requested(OUTPUTS, None) is OUTPUTS
    assert only_requested(OUTPUTS, frozenset({"a", "b", "c"})) is OUTPUTS
    assert dict(only_requested(OUTPUTS, frozenset())) == {}
    assert requested_names(FakeRequest({}, requested=["a"])) == frozenset({"a"})
    assert requested_names(FakeRequest({})) is None
    assert requested_names(object()) is None


def test_tensor_response_builds_only_requested_tensors():
    pb = fake_pb_utils()
    assert set(tensor_response(pb, OUTPUTS, frozenset({"a"})).tensors) == {"a"}
    assert set(tensor_response(pb, OUTPUTS).tensors) == {"a", "b"}


def test_respond_each_and_send_each_answer_with_the_requested_outputs_only():
    pb = fake_pb_utils()
    reqs = [FakeRequest({}, requested=["b"]), FakeRequest({})]
    got = respond_each(pb, reqs, (), lambda inputs, request: dict(OUTPUTS), "m")
    assert [set(r.tensors) for r in got] == [{"b"}, {"a", "b"}]
    sent: list[int] = []
    send_each(pb, reqs, (), lambda inputs, request: dict(OUTPUTS), "m", after_send=lambda: sent.append(1))
    assert [set(r.sender.data()[0].tensors) for r in reqs] == [{"b"}, {"a", "b"}] and sent == [1, 1]


def _builds_tensors_inline(call: ast.Call) -> bool:
    """``*.InferenceResponse(output_tensors=[<a comprehension or a non-empty list>])``."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name != "InferenceResponse":
        return False
    for kw in call.keywords:
        if kw.arg == "output_tensors" and not (isinstance(kw.value, ast.List) and not kw.value.elts):
            return True
    return False


def test_no_model_builds_a_response_of_tensors_past_the_one_helper():
    """The kind, not the example: a response with tensors is built by triton_io.tensor_response (or, for
    BF16 outputs, engine_core.to_response after only_requested), so no model can send what was not asked."""
    allowed = {
        ("repo_builder/runtime/triton_io.py", "tensor_response"),
        ("repo_builder/runtime/triton_io.py", "respond_each"),
        ("repo_builder/runtime/engine_core.py", "to_response"),
    }
    found = []
    for path in [*(ROOT / "repo_builder" / "runtime").glob("*.py"), *(ROOT / "model_templates").rglob("*.py")]:
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and _builds_tensors_inline(node) and (rel, fn.name) not in allowed:
                    found.append(f"{rel}:{node.lineno} ({fn.name})")
    assert sorted(set(found)) == []
