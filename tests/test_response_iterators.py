"""runtime/response_iterators: finished BLS response iterators are let go of only after the hold, on a Python
thread (python_backend r24.10 would otherwise destroy them without the GIL; the module says why)."""

from __future__ import annotations

import gc
import weakref

import pytest

from repo_builder.runtime.response_iterators import IteratorHold, held


class _Responses:
    """A stand-in for ``exec(decoupled=True)``'s iterator (weak-referenceable, so the test sees it go)."""

    def __init__(self, n: int) -> None:
        self._items = iter(range(n))

    def __iter__(self):
        return self

    def __next__(self) -> int:
        return next(self._items)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_retired_iterator_lives_for_the_hold_and_goes_with_a_later_call():
    clock = _Clock()
    hold = IteratorHold(hold_s=3.0, clock=clock)
    first = _Responses(1)
    gone = weakref.ref(first)
    hold.retire(first)
    del first
    gc.collect()
    assert gone() is not None and len(hold) == 1
    clock.now = 2.9
    hold.retire(None)
    assert gone() is not None
    clock.now = 3.0
    hold.retire(_Responses(1))
    gc.collect()
    assert gone() is None and len(hold) == 1
    hold.clear()
    assert len(hold) == 0


@pytest.mark.parametrize("how", ["exhausted", "break", "error"])
def test_held_retires_the_iterator_however_the_loop_ends(monkeypatch, how):
    from repo_builder.runtime import response_iterators

    hold = IteratorHold(hold_s=60.0)
    monkeypatch.setattr(response_iterators, "HOLD", hold)
    it = _Responses(3)

    def loop() -> list[int]:
        got = []
        for item in held(it):
            got.append(item)
            if how == "break":
                break
            if how == "error":
                raise ValueError("a failed step")
        return got

    if how == "error":
        with pytest.raises(ValueError):
            loop()
    else:
        assert loop() == ([0, 1, 2] if how == "exhausted" else [0])
    gc.collect()
    assert len(hold) == 1
