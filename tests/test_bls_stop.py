"""String stop sequences in the BLS: non-streaming truncation and streaming hold-back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from repo_builder.runtime.bls import StopStringFilter, truncate_at_stop


def stream_through(chunks, stops, prefix=""):
    f = StopStringFilter(stops, prefix)
    out = []
    for c in chunks:
        text, stopped = f.feed(c)
        out.append(text)
        if stopped:
            return "".join(out), True, out
    out.append(f.flush())  # a stop string held back for a longer candidate is found here
    return "".join(out), f.stopped, out


def test_truncate_first_stop_wins():
    # the stop string is kept, nothing after it (NVIDIA's rule, the same as the engine's token-level stop)
    assert truncate_at_stop("hello world. bye\n\nUser:", ["User:", "\n\n"]) == ("hello world. bye\n\n", True)
    assert truncate_at_stop("no stop here", ["STOP"]) == ("no stop here", False)
    assert truncate_at_stop("abc STOP def STOP", ["STOP"], start=5) == ("abc STOP def STOP", True)
    assert truncate_at_stop("Paris or London and more", ["London"]) == ("Paris or London", True)


def test_stream_holds_back_partial_stop_across_chunks():
    f = StopStringFilter(["</end>"])
    assert f.feed("Hello </") == ("Hello ", False)  # "</" could start "</end>": held back
    assert f.feed("e") == ("", False)
    assert f.feed("nd> more") == ("</end>", True)
    assert f.stopped


def test_stream_releases_held_text_that_is_not_a_stop():
    f = StopStringFilter(["</end>"])
    assert f.feed("a </") == ("a ", False)
    assert f.feed("b>") == ("</b>", False)
    assert f.feed("x<") == ("x", False)
    assert f.flush() == "<"


def test_stream_stop_inside_one_chunk():
    assert stream_through(["The answer is 4.\nQ: next"], ["\nQ:"])[:2] == ("The answer is 4.\nQ:", True)


def test_protected_prompt_prefix_is_not_searched():
    prompt = "Q: say hi\nA:"
    chunks = ["Q: say", " hi\nA:", " hi\nQ:", " more"]
    assert stream_through(chunks, ["\nQ:", "Q:"], prefix=prompt)[:2] == ("Q: say hi\nA: hi\nQ:", True)
    # without the protection the echoed prompt itself would stop the stream
    assert stream_through(chunks, ["Q:"])[:2] == ("Q:", True)


def test_no_stops_passes_through():
    f = StopStringFilter([])
    assert f.feed("abc") == ("abc", False)
    assert f.flush() == ""


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab<>/e nd", max_size=40),
    stops=st.lists(st.text(alphabet="ab<>/e nd", min_size=1, max_size=5), min_size=1, max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
)
def test_streaming_equals_non_streaming(text, stops, cuts):
    points = sorted({c for c in cuts if c <= len(text)} | {0, len(text)})
    chunks = [text[a:b] for a, b in zip(points, points[1:])]
    expected, stopped = truncate_at_stop(text, stops)
    got, got_stopped, _ = stream_through(chunks, stops)
    assert got == expected
    assert got_stopped == stopped
