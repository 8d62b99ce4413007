"""The CPU reference engine against transformers' own generate() on the tiny random LLaMA checkpoint
(real LLaMA-2 tokenizer): greedy equality, KV-cache isolation between interleaved sequences, the
logits rules (end_id, min_tokens, bad words, bias, penalties), seeded sampling and load errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
from engine_fakes import FakeRequest, engine_model_config, fake_pb_utils, init_args, req_inputs

from repo_builder.runtime.engine_core import (
    CollectingSink,
    EngineLimits,
    EngineLoadError,
    ModelIO,
    RequestGroup,
    Scheduler,
    TritonEngineModel,
    parse_request,
)
from repo_builder.runtime.reference import ReferenceBackend

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

IO = ModelIO.from_config(engine_model_config("trtllm-1.2"))
PROMPTS = ["What is machine learning?", "I like the summer", "Tell me about forests"]


@pytest.fixture(scope="module")
def tok(tiny_llama):
    return transformers.AutoTokenizer.from_pretrained(str(tiny_llama))


@pytest.fixture(scope="module")
def hf_model(tiny_llama):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def backend(tiny_llama):
    return ReferenceBackend(tiny_llama)


def hf_generate(hf_model, ids, n, **kwargs):
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0, **kwargs)
    return out[0, len(ids) :].tolist()


def generate(backend, *requests):
    limits = EngineLimits(
        vocab_size=backend.vocab_size, max_input_len=256, max_seq_len=512, exclude_input_in_output=True
    )
    sched = Scheduler(backend)
    sinks = []
    for inputs in requests:
        sink = CollectingSink()
        sched.submit(RequestGroup(parse_request(inputs, IO, limits), sink, IO))
        sinks.append(sink)
    sched.run_until_idle()
    results = []
    for sink in sinks:
        outputs, final, error = sink.responses[-1]
        assert final and error is None, error
        n = int(outputs["sequence_length"][0, 0])
        results.append((outputs["output_ids"][0, 0, :n].tolist(), outputs))
    return results


def test_linear_weights_are_stored_input_major_with_the_same_values(backend, hf_model):
    """Every nn.Linear weight reaches MKL as a row-major [in, out] block (docs/performance.md 6.2) and still
    holds the checkpoint's values; generate() equality below checks the outputs."""
    linears = {n: m for n, m in backend.model.named_modules() if isinstance(m, torch.nn.Linear)}
    reference = dict(hf_model.named_modules())
    assert linears and backend.relaid_weights == len(linears)
    for name, module in linears.items():
        w = module.weight
        assert w.t().is_contiguous() and not w.is_contiguous(), name
        assert torch.equal(w, reference[name].weight), name


def test_growing_cache_layer_equals_concatenation_through_reallocations_and_replaced_keys():
    """The in-place cache layer returns what DynamicLayer's torch.cat returns, across buffer growth, after a
    method replaced its keys (batch select: a reordered copy) and after a crop (a shorter view)."""
    from transformers.cache_utils import DynamicLayer

    from repo_builder.runtime.reference import CACHE_GROW_MIN, _growing_layer_class

    gen = torch.Generator().manual_seed(0)
    plain, growing = DynamicLayer(), _growing_layer_class()()

    def step(q: int) -> None:
        k, v = torch.randn(3, 2, q, 4, generator=gen), torch.randn(3, 2, q, 4, generator=gen)
        want = plain.update(k, v)
        got = growing.update(k, v)
        assert all(torch.equal(a, b) for a, b in zip(want, got))

    step(5)  # a prefill
    buffer = growing._buf_k
    for _ in range(CACHE_GROW_MIN + 1):  # room for the prompt + CACHE_GROW_MIN columns, then one more
        step(1)
    assert growing._buf_k is not buffer  # it grew, by copying once
    idx = torch.tensor([2, 0, 1])  # a reorder (beam search's kind): same shape, other values
    plain.batch_select_indices(idx)
    growing.batch_select_indices(idx)
    step_k = torch.randn(3, 2, 1, 4, generator=gen)
    assert torch.equal(plain.update(step_k, step_k)[0], growing.update(step_k, step_k)[0])
    plain.crop(-3)
    growing.crop(-3)
    assert torch.equal(plain.update(step_k, step_k)[1], growing.update(step_k, step_k)[1])


def test_sequence_caches_grow_in_place(backend, tok):
    """Prefilled and stacked caches use the growing layer (a decode step writes one column, no torch.cat)."""
    from repo_builder.runtime.reference import _growing_layer_class

    sched = Scheduler(backend)
    limits = EngineLimits(vocab_size=backend.vocab_size, max_input_len=256, max_seq_len=512)
    groups = [
        RequestGroup(parse_request(req_inputs(tok(p)["input_ids"], 6), IO, limits), CollectingSink(), IO)
        for p in PROMPTS
    ]
    for group in groups:
        sched.submit(group)
    sched.run_step()  # the prefill
    kinds = {type(layer) for g in groups for s in g.seqs for layer in s.state.cache.layers}
    sched.run_step()  # the first batched decode
    stacked = {type(layer) for layer in backend._group[2].layers}
    sched.run_until_idle()
    assert kinds == stacked == {_growing_layer_class()}


def test_greedy_matches_transformers_generate_token_for_token(backend, hf_model, tok):
    requests = [req_inputs(tok(p)["input_ids"], 24) for p in PROMPTS]
    # all three run interleaved in one batch: each keeps its own KV cache
    got = generate(backend, *requests)
    for p, (ids, _) in zip(PROMPTS, got):
        assert ids == hf_generate(hf_model, tok(p)["input_ids"], 24), p


@pytest.fixture(scope="module")
def new_token(hf_model, tok):
    """(prompt ids, greedy 24 tokens, k): the first prompt whose greedy output has, at some 1 <= k <= 20, a token
    not generated before it (random weights repeat one token for a while; which prompt qualifies depends on the
    checkpoint and its vocabulary)."""
    for prompt in PROMPTS + ["Deep learning is fun", "Once upon a time", "The cat sat on the mat"]:
        ids = tok(prompt)["input_ids"]
        greedy = hf_generate(hf_model, ids, 24)
        k = next((i for i in range(1, 21) if greedy[i] not in greedy[:i]), None)
        if k is not None:
            return ids, greedy, k
    pytest.fail("no prompt whose greedy output has a new token within its first 21")


def test_end_id_stops_before_it_and_min_tokens_forbids_it(backend, new_token):
    ids, greedy, k = new_token
    end_id = greedy[k]  # a token that was not generated before position k
    n, least = len(greedy), k + 3
    ((stopped, _), (forced, _)) = generate(
        backend, req_inputs(ids, n, end_id=[end_id]), req_inputs(ids, n, end_id=[end_id], min_tokens=[least])
    )
    assert stopped == greedy[:k]
    assert len(forced) >= least and forced[:k] == greedy[:k] and end_id not in forced[:least]


def test_bad_words_and_embedding_bias_steer_the_choice(backend, hf_model, tok):
    ids = tok("What is machine learning?")["input_ids"]
    greedy = hf_generate(hf_model, ids, 4)
    bad = np.array([[[greedy[0]], [1]]], np.int32)
    bias = np.zeros((1, backend.vocab_size), np.float32)
    bias[0, 1234] = 1e4
    ((banned, _), (biased, _)) = generate(
        backend, req_inputs(ids, 4, bad_words_list=bad), req_inputs(ids, 4, embedding_bias=bias)
    )
    assert greedy[0] not in banned
    assert biased == [1234] * 4


def test_multi_token_bad_word_bans_only_after_its_prefix(backend, new_token):
    ids, greedy, k = new_token
    greedy = greedy[: k + 2]
    # banning [greedy[k-1], greedy[k]] changes nothing before k: greedy[k] was never chosen before it
    prefix = greedy[k - 1] if k > 0 else ids[-1]
    banned = np.array([[[prefix, greedy[k]], [2, -1]]], np.int32)
    never = next(t for t in range(99, 200) if t not in greedy and t not in ids)
    unmatched = np.array([[[never, greedy[k]], [2, -1]]], np.int32)  # a prefix that never occurs
    ((out, _), (same, _)) = generate(
        backend, req_inputs(ids, k + 2, bad_words_list=banned), req_inputs(ids, k + 2, bad_words_list=unmatched)
    )
    assert out[:k] == greedy[:k] and out[k] != greedy[k]
    assert same == greedy


def test_repetition_penalty_matches_transformers(backend, hf_model, tok):
    ids = tok("What is machine learning?")["input_ids"]
    expected = hf_generate(hf_model, ids, 16, repetition_penalty=1.8)
    assert expected != hf_generate(hf_model, ids, 16)
    ((got, _),) = generate(backend, req_inputs(ids, 16, repetition_penalty=[1.8]))
    assert got == expected


def test_log_probs_are_the_chosen_tokens_log_softmax(backend, hf_model, tok):
    ids = tok("Tell me about forests")["input_ids"]
    with torch.inference_mode():
        out = hf_model.generate(
            torch.tensor([ids]),
            max_new_tokens=5,
            do_sample=False,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
    chosen = out.sequences[0, len(ids) :].tolist()
    expected = [float(torch.log_softmax(lg[0].float(), -1)[t]) for lg, t in zip(out.logits, chosen)]
    ((got, outputs),) = generate(backend, req_inputs(ids, 5, return_log_probs=[True]))
    assert got == chosen
    assert outputs["output_log_probs"][0, 0].tolist() == pytest.approx(expected, abs=1e-4)
    assert outputs["cum_log_probs"][0, 0] == pytest.approx(sum(expected), abs=1e-3)


def test_sampling_is_reproducible_per_seed(backend, tok):
    ids = tok("Tell me about forests")["input_ids"]
    sample = dict(runtime_top_k=[50], temperature=[1.5])
    a, b, c = generate(
        backend,
        req_inputs(ids, 16, seed=np.array([11], np.uint64), **sample),
        req_inputs(ids, 16, seed=np.array([11], np.uint64), **sample),
        req_inputs(ids, 16, seed=np.array([12], np.uint64), **sample),
    )
    assert a[0] == b[0]
    assert a[0] != c[0]


def test_top_p_keeps_only_the_nucleus(backend, tok):
    ids = tok("Tell me about forests")["input_ids"]
    logits = torch.zeros(backend.vocab_size)
    logits[7] = 12.0  # ~0.78 of the mass: the 0.5 nucleus is this token alone
    logits[8] = 9.5  # ~0.06: sampled now and then without top_p
    from repo_builder.runtime.engine_core import GenerationRequest, SamplingParams, Sequence

    class _G:
        pass

    for seed in range(20):
        req = GenerationRequest(prompt=ids, max_new_tokens=1, sampling=SamplingParams(top_p=0.5, seed=seed))
        seq = Sequence(req, _G())
        from repo_builder.runtime.reference import _SeqState

        st = _SeqState()
        st.generator = torch.Generator().manual_seed(seed)
        token, _ = backend.choose(logits, seq, st)
        assert token == 7
    picked = set()
    for seed in range(100):  # control: top_k=2 without top_p does sample token 8
        seq = Sequence(GenerationRequest(prompt=ids, max_new_tokens=1, sampling=SamplingParams(top_k=2)), _G())
        st = _SeqState()
        st.generator = torch.Generator().manual_seed(seed)
        picked.add(backend.choose(logits, seq, st)[0])
    assert picked == {7, 8}


def test_served_through_the_adapter_streaming_and_not(tiny_llama, hf_model, tok):
    ids = tok("Tell me about forests")["input_ids"]
    expected = hf_generate(hf_model, ids, 8)
    cfg = engine_model_config(
        params={
            "engine_dir": str(tiny_llama),
            "max_beam_width": "1",
            "exclude_input_in_output": "true",
            "max_input_len": "256",
            "max_seq_len": "512",
        }
    )
    model = TritonEngineModel(fake_pb_utils(), init_args(cfg), ReferenceBackend.from_params)
    stream, whole = FakeRequest(req_inputs(ids, 8, streaming=[True])), FakeRequest(req_inputs(ids, 8))
    model.execute([stream, whole])
    assert stream.sender.done.wait(60) and whole.sender.done.wait(60)
    model.finalize()
    assert [t for r in stream.sender.data() for t in r.tensors["output_ids"][0, 0].tolist()] == expected
    (resp,) = whole.sender.data()
    assert resp.tensors["output_ids"][0, 0].tolist() == expected


def test_reference_engine_threads_parameter(tiny_llama):
    """0 (the rendered default) takes every CPU of the process's affinity mask, a positive value is used as
    given, and a bad value fails the load naming the parameter."""
    before = torch.get_num_threads()

    def load(value: str) -> int:
        params = {"engine_dir": str(tiny_llama), "max_beam_width": "1", "reference_engine_threads": value}
        model = TritonEngineModel(
            fake_pb_utils(), init_args(engine_model_config(params=params)), ReferenceBackend.from_params
        )
        model.finalize()
        return torch.get_num_threads()

    try:
        assert load("0") == len(os.sched_getaffinity(0))
        assert load("1") == 1
        assert load("3") == 3
        for bad in ("-1", "two"):
            with pytest.raises(EngineLoadError, match="reference_engine_threads"):
                load(bad)
    finally:
        torch.set_num_threads(before)


def test_load_errors_name_the_engine_dir(tmp_path):
    with pytest.raises(EngineLoadError, match="is not a directory") as info:
        ReferenceBackend(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(info.value)
    with pytest.raises(EngineLoadError, match="has no config.json"):
        ReferenceBackend(tmp_path)
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    with pytest.raises(EngineLoadError, match="cannot load the Hugging Face checkpoint") as info:
        ReferenceBackend(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_batched_decode_with_joining_and_leaving_sequences_matches_generate(backend, hf_model, tok):
    """Sequences of different prompt lengths and output lengths, one joining mid-flight: the stacked,
    left-padded batch is re-stacked when one joins or leaves and every stream stays equal to generate()."""
    limits = EngineLimits(
        vocab_size=backend.vocab_size, max_input_len=256, max_seq_len=512, exclude_input_in_output=True
    )
    sched = Scheduler(backend)
    plan = [(PROMPTS[0], 5), (PROMPTS[1], 20), (PROMPTS[2] + " and rivers in the north", 12)]
    sinks = []
    before = backend.batched_forwards
    for i, (prompt, n) in enumerate(plan):
        if i == 2:
            for _ in range(3):
                sched.run_step()
        sink = CollectingSink()
        sched.submit(RequestGroup(parse_request(req_inputs(tok(prompt)["input_ids"], n), IO, limits), sink, IO))
        sinks.append(sink)
    sched.run_until_idle()
    assert backend.batched_forwards > before  # the batched path ran
    for (prompt, n), sink in zip(plan, sinks):
        outputs, final, error = sink.responses[-1]
        assert final and error is None, error
        got = outputs["output_ids"][0, 0, : int(outputs["sequence_length"][0, 0])].tolist()
        assert got == hf_generate(hf_model, tok(prompt)["input_ids"], n), prompt


def hf_generate_log_probs(hf_model, ids, n):
    """generate()'s greedy tokens and the log-softmax of each at its step."""
    with torch.inference_mode():
        out = hf_model.generate(
            torch.tensor([ids]),
            max_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
    chosen = out.sequences[0, len(ids) :].tolist()
    return chosen, [float(torch.log_softmax(lg[0].float(), -1)[t]) for lg, t in zip(out.logits, chosen)]


def run_waves(engine, tok, waves, **extra):
    """Submit each wave of (prompt, tokens), run 3 iterations after each, then run until idle; returns the
    (output ids, outputs) of every request in order."""
    limits = EngineLimits(
        vocab_size=engine.vocab_size, max_input_len=256, max_seq_len=512, exclude_input_in_output=True
    )
    sched = Scheduler(engine)
    sinks = []
    for wave in waves:
        for prompt, n in wave:
            sink = CollectingSink()
            inputs = req_inputs(tok(prompt)["input_ids"], n, **extra)
            sched.submit(RequestGroup(parse_request(inputs, IO, limits), sink, IO))
            sinks.append(sink)
        for _ in range(3):
            sched.run_step()
    sched.run_until_idle()
    results = []
    for sink in sinks:
        outputs, final, error = sink.responses[-1]
        assert final and error is None, error
        results.append((outputs["output_ids"][0, 0, : int(outputs["sequence_length"][0, 0])].tolist(), outputs))
    return results


def test_batched_prefills_of_different_lengths_match_generate(tiny_llama, backend, hf_model, tok):
    """Several new sequences with prompts of different lengths start in one iteration: their prompts run in one
    left-padded prefill forward, a second group joins mid-flight the same way while the first decodes, and a
    budget of padded prompt tokens cuts a group into several forwards; every stream equals generate(), token
    for token and in its log probs (the random weights repeat one token, so the log probs are what would show
    a wrong position or mask)."""
    first = [
        ("Hi", 14),
        (PROMPTS[2] + " and rivers in the north of the old country", 16),
        (PROMPTS[0], 9),
        ("The cat sat on the mat and looked at the birds in the garden", 10),
    ]
    joining = [(PROMPTS[1], 11), ("Once upon a time there was a", 7)]
    # room for the two short prompts together and the two long ones together, not for three: two forwards
    small = ReferenceBackend(tiny_llama, max_prefill_tokens=2 * max(len(tok(p)["input_ids"]) for p, _ in first))
    expected = [hf_generate_log_probs(hf_model, tok(p)["input_ids"], n) for p, n in first + joining]
    for engine, expected_prefills in ((backend, 2), (small, 3)):
        before = engine.batched_prefills, engine.batched_forwards
        got = run_waves(engine, tok, (first, joining), return_log_probs=[True])
        assert engine.batched_prefills - before[0] == expected_prefills
        assert engine.batched_forwards > before[1]
        for (prompt, _), (ids, outputs), (want, want_lp) in zip(first + joining, got, expected):
            assert ids == want, prompt
            assert outputs["output_log_probs"][0, 0].tolist() == pytest.approx(want_lp, abs=1e-4), prompt


def test_batched_prefills_on_real_weights_match_generate(smollm2_dir):
    """SmolLM2-135M-Instruct (real weights, whose greedy text changes with every token): four chat prompts of
    different lengths prefilled in one forward and decoded together equal generate() token for token."""
    tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32).eval()
    questions = [
        "Hi!",
        "What is the capital of France?",
        "Write a haiku about the sea.",
        "Explain in two sentences why the sky is blue and why sunsets are red.",
    ]
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in questions
    ]
    assert len({len(tok(p)["input_ids"]) for p in prompts}) == len(prompts)
    engine = ReferenceBackend(smollm2_dir)
    got = run_waves(engine, tok, ([(p, 24) for p in prompts],), end_id=np.array([-1], np.int32))
    assert engine.batched_prefills == 1
    for prompt, (ids, _) in zip(prompts, got):
        assert ids == hf_generate(model, tok(prompt)["input_ids"], 24, eos_token_id=None), prompt
