"""String stop sequences: non-streaming trim and the streaming matcher with hold-back across chunks."""

from __future__ import annotations

from _text_support import tokenizer as load
from hypothesis import given, settings
from hypothesis import strategies as st

from repo_builder.runtime.detokenizer import DetokenizerFactory
from repo_builder.runtime.stopstrings import StopStringMatcher, find_stop, trim_at_stop


def run(matcher: StopStringMatcher, chunks: list[str]) -> tuple[str, list[str]]:
    emitted = []
    for c in chunks:
        r = matcher.feed(c)
        emitted.append(r.text)
        if r.stopped:
            return "".join(emitted), emitted
    emitted.append(matcher.flush())
    return "".join(emitted), emitted


def test_trim_non_streaming():
    assert trim_at_stop("Hello\nUser: hi", ["User:", "\n"]) == ("Hello", "\n")
    assert trim_at_stop("Hello\nUser: hi", ["User:"], include_stop=True) == ("Hello\nUser:", "User:")
    assert trim_at_stop("no stop here", ["###"]) == ("no stop here", None)
    assert trim_at_stop("prompt ### answer ### x", ["###"], start=8) == ("prompt ### answer ", "###")
    assert find_stop("abcd", ["bc", "bcd", "cd"]) == (1, "bcd")  # earliest, then longest


def test_stop_split_over_chunks_is_found_and_never_half_emitted():
    m = StopStringMatcher(["</answer>"])
    assert m.feed("The result is 4</an").text == "The result is 4"
    r = m.feed("swer> trailing")
    assert r.stopped and r.stop == "</answer>" and r.text == "" and r.position == len("The result is 4")
    assert m.feed("more").text == "" and m.flush() == ""


def test_false_start_is_released():
    m = StopStringMatcher(["\nUser:"])
    assert m.feed("line one\nUs").text == "line one"
    assert m.feed("ually fine").text == "\nUsually fine"
    assert m.flush() == ""


def test_held_text_is_released_at_the_end():
    m = StopStringMatcher(["STOP"])
    assert m.feed("almost ST").text == "almost "
    assert m.flush() == "ST"


def test_include_stop():
    m = StopStringMatcher(["##"], include_stop=True)
    assert m.feed("a#").text == "a"
    r = m.feed("#b")
    assert r.stopped and r.text == "##"


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="abc\n #", max_size=40),
    stops=st.lists(st.text(alphabet="abc\n #", min_size=1, max_size=4), min_size=0, max_size=30),
    cuts=st.lists(st.integers(0, 40), max_size=8),
)
def test_streaming_equals_non_streaming(text, stops, cuts):
    points = sorted({c for c in cuts if c <= len(text)} | {0, len(text)})
    chunks = [text[a:b] for a, b in zip(points, points[1:])]
    streamed, _ = run(StopStringMatcher(stops), chunks)
    assert streamed == trim_at_stop(text, stops)[0]
    # the held text never exceeds the longest stop string minus one character
    m, fed, emitted = StopStringMatcher(stops), 0, 0
    longest = max((len(s) for s in stops), default=1)
    for chunk in chunks:
        r = m.feed(chunk)
        if r.stopped:
            break
        fed, emitted = fed + len(chunk), emitted + len(r.text)
        assert fed - emitted <= longest - 1


def test_with_the_detokenizer_one_token_at_a_time():
    tok = load("mistral_v1_tokenizer")
    ids = tok.encode("The answer is 42.\nUser: next question", add_special_tokens=False)
    detok = DetokenizerFactory(tok)()
    m = StopStringMatcher(["\nUser:"])
    out = []
    for i in ids:
        r = m.feed(detok.add([i]))
        out.append(r.text)
        if r.stopped:
            break
    assert "".join(out) == "The answer is 42."


def test_longer_stop_starting_earlier_wins_across_chunks():
    """Found by hypothesis: '#aa' with stops 'a' and '#aa', fed as '#a' + 'a'. The non-streaming cut is at 0
    ('#aa' starts before 'a'), so streaming must not emit '#' when it sees 'a' while '#aa' can still complete."""
    m = StopStringMatcher(["a", "#aa"])
    first = m.feed("#a")
    assert first.text == "" and not first.stopped
    r = m.feed("a")
    assert r.stopped and r.stop == "#aa" and r.text == "" and r.position == 0
    assert trim_at_stop("#aa", ["a", "#aa"]) == ("", "#aa")
    # the longer candidate never completes: the shorter stop found meanwhile still cuts, at flush
    m = StopStringMatcher(["a", "#ab"])
    assert m.feed("#a").text == ""
    assert m.flush() == "#" and m.stopped and m.stop == "a"
