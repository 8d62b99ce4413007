"""The fast one-element TYPE_STRING codec (runtime/triton_io.py) against the Python backend's own functions.

The originals are the real ``triton_python_backend_utils.py`` shipped with the tritonserver of nvidia-pytriton
(imported from its file: it needs only numpy and struct at import time).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from repo_builder.runtime.triton_io import fast_deserialize_bytes, fast_serialize_bytes, use_fast_bytes_codec


@pytest.fixture(scope="module")
def pb():
    pytriton = pytest.importorskip("pytriton")
    path = Path(pytriton.__file__).parent / "tritonserver" / "backends" / "python" / "triton_python_backend_utils.py"
    if not path.is_file():
        pytest.skip(f"{path} not shipped")
    spec = importlib.util.spec_from_file_location("tpbu_for_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _arrays():
    rng = random.Random(5)
    words = [b"", b"a", b"hello world", "Ünïcødé 迭代 😀".encode(), bytes(range(256)), b"\x00\x00\x00\x00"]
    for w in words:
        for shape in ((1,), (1, 1), (1, 1, 1), ()):
            a = np.empty(shape, dtype=object)
            a[...] = w if shape == () else None
            if shape:
                a.reshape(-1)[0] = w
            yield a
    yield np.array([b"x", b"yz"], dtype=object)
    yield np.array(["str, not bytes"], dtype=object)
    yield np.array([7], dtype=object)
    yield np.array([b"abc"], dtype=np.bytes_)
    yield np.empty((0,), dtype=object)
    yield np.array([1, 2, 3], dtype=np.int32)
    for _ in range(50):
        n = rng.choice([1, 1, 1, 2, 5])
        a = np.empty(n, dtype=object)
        for i in range(n):
            a[i] = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        yield a


def test_serialize_gives_the_original_bytes(pb):
    fast = fast_serialize_bytes(pb.serialize_byte_tensor)
    for a in _arrays():
        want = pb.serialize_byte_tensor(a)
        got = fast(a)
        assert type(got) is type(want) and got == want, a


def test_deserialize_gives_the_original_array(pb):
    fast = fast_deserialize_bytes(pb.deserialize_bytes_tensor)
    for a in _arrays():
        if a.dtype != object or not all(type(x) is bytes for x in a.reshape(-1)) or a.size == 0:
            continue
        buf = np.frombuffer(pb.serialize_byte_tensor(a), dtype=np.uint8)
        want, got = pb.deserialize_bytes_tensor(buf), fast(buf)
        assert got.dtype == want.dtype and got.shape == want.shape and got.tolist() == want.tolist()
    for raw in (b"", b"\x01\x00", b"\x05\x00\x00\x00ab", b"\x02\x00\x00\x00abc"):  # short or inconsistent buffers
        buf = np.frombuffer(raw, dtype=np.uint8)
        try:
            want = pb.deserialize_bytes_tensor(buf).tolist()
        except Exception as exc:  # noqa: BLE001 - the fast path must fail the same way
            with pytest.raises(type(exc)):
                fast(buf)
        else:
            assert fast(buf).tolist() == want


def test_install_is_idempotent_and_skips_a_module_without_the_functions():
    calls = []
    module = SimpleNamespace(serialize_byte_tensor=lambda t: calls.append(t) or b"", deserialize_bytes_tensor=len)
    use_fast_bytes_codec(module)
    first = module.serialize_byte_tensor
    use_fast_bytes_codec(module)
    assert module.serialize_byte_tensor is first
    module.serialize_byte_tensor(np.array([1], dtype=np.int32))
    assert len(calls) == 1  # not an object array: the original ran
    use_fast_bytes_codec(SimpleNamespace())  # nothing to wrap: no error
