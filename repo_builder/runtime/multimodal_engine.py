"""The ``tensorrt_llm`` model of layout multimodal (vendored with the rest of ``runtime/``): the prompt-table
engine (:class:`PromptTableEngine`: text embedding plus image rows, KV-cache decoding, greedy or
:class:`Sampling`) and its Triton side (:class:`PromptTableEngineModel`, decoupled with ``render --streaming``).
Step 3 of the flow in :mod:`.multimodal`; moved here from that module, which re-exports every name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import RequestError
from .multimodal_common import (
    QWEN2_VL,
    _import_torch,
    _load_model,
    _params,
    _real,
    _scalar,
    _text_model,
)
from .triton_io import error_response, get_inputs, requested_names, respond_each, tensor_response


class Sampling:
    """The sampling inputs of one request (NVIDIA's ``temperature``, ``runtime_top_p``, ``seed``).

    Args:
        temperature: > 0 samples (None or 0: greedy).
        top_p: nucleus mass in (0, 1] (None: 1).
        seed: the request's random seed (None: 0, NVIDIA's default ``random_seed``).
    Raises:
        RequestError: a negative temperature, a top_p outside (0, 1] (names the field).
    """

    def __init__(self, temperature: float | None = None, top_p: float | None = None, seed: int | None = None):
        if temperature is not None and not temperature >= 0:
            raise RequestError("temperature", f"must be >= 0, got {temperature}")
        if top_p is not None and not 0 < top_p <= 1:
            raise RequestError("top_p", f"must be in (0, 1], got {top_p}")
        self.temperature, self.top_p, self.seed = temperature, top_p, seed

    def chooser(self, torch: Any) -> Any:
        """``choose(logits [1, vocab]) -> token id``: argmax when greedy; else transformers' own temperature and
        top-p warpers, softmax and one ``torch.multinomial`` draw from a generator seeded with ``seed``, the
        steps of ``generate(do_sample=True, top_k=0)`` after ``torch.manual_seed(seed)`` (same tokens)."""
        if not self.temperature:
            return lambda logits: int(logits[0].argmax())
        from transformers.generation import TemperatureLogitsWarper, TopPLogitsWarper

        warpers: list[Any] = [TemperatureLogitsWarper(self.temperature)]
        if self.top_p is not None and self.top_p < 1:
            warpers.append(TopPLogitsWarper(self.top_p))
        generator = torch.Generator().manual_seed(int(self.seed or 0))

        def choose(logits: Any) -> int:
            scores = logits.float()
            for warp in warpers:
                scores = warp(None, scores)
            return int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator))

        return choose


class PromptTableEngine:
    """The language model of a LLaVA checkpoint with NVIDIA's prompt-table splice (no Triton; tested
    in-process): greedy decoding with the KV cache, equal to transformers' ``generate(pixel_values=...)``."""

    def __init__(self, checkpoint: str | Path, threads: int | None = None) -> None:
        import inspect

        self.torch = _import_torch()
        if threads:
            self.torch.set_num_threads(threads)
        self.model = _load_model(checkpoint)
        config = self.model.config
        text = getattr(config, "text_config", config)
        self.vocab_size = int(text.vocab_size)
        self.max_positions = int(text.max_position_embeddings)
        self.qwen = config.model_type == QWEN2_VL
        forward = inspect.signature(self.model.forward).parameters
        self.cache_kw = "cache" if "cache" in forward else "past_key_values"
        if self.qwen:
            self.head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
            self.text_model = _text_model(self.model)
            self.rotary = _given_rotary(self.torch, self.text_model.rotary_emb)
            self.text_model.rotary_emb = self.rotary

    def embed(self, ids: list[int], table: np.ndarray | None, table_rows: int) -> Any:
        """``[1, len, hidden]`` input embeddings: text rows for ids < vocab_size, table rows above.

        Raises:
            RequestError: a fake id without a table row (``prompt_embedding_table``).
        """
        torch = self.torch
        tensor = torch.tensor([ids], dtype=torch.long)
        fake = tensor >= self.vocab_size
        embeds = self.model.get_input_embeddings()(tensor.clamp(max=self.vocab_size - 1))
        if bool(fake.any()):
            rows = tensor[fake] - self.vocab_size
            top = int(rows.max())
            if table is None or top >= min(table_rows, table.shape[0]):
                have = 0 if table is None else min(table_rows, table.shape[0])
                raise RequestError(
                    "prompt_embedding_table", f"input id {self.vocab_size + top} needs row {top}, the table has {have}"
                )
            values = torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32))
            embeds[fake] = values[rows].to(embeds.dtype)
        return embeds

    def generate(
        self,
        ids: list[int],
        max_new: int,
        end_id: int | None,
        table: np.ndarray | None = None,
        table_rows: int = 0,
        mrope: tuple[np.ndarray | None, int] | None = None,
        on_token: Any = None,
        sampling: Sampling | None = None,
    ) -> list[int]:
        """The generated ids (up to ``max_new``, ending with ``end_id`` when generated): greedy, or sampled when
        ``sampling`` has a temperature > 0 (:meth:`Sampling.choose`).

        Args:
            mrope: Qwen2-VL only: ``(mrope_rotary_cos_sin, mrope_position_deltas)`` of
                :meth:`VisionEncoder.mrope_cos_sin`.
            on_token: called with the ids so far after each generated token (streaming), or None.
        Raises:
            RequestError: empty ids, ``max_new`` < 1, over ``max_position_embeddings``, or see :meth:`embed`;
                Qwen2-VL: ``mrope_rotary_cos_sin`` missing or not ``2 x len(ids) x head_dim`` values.
        """
        torch = self.torch
        if not ids:
            raise RequestError("input_ids", "is empty")
        if max_new < 1:
            raise RequestError("request_output_len", f"must be >= 1, got {max_new}")
        if len(ids) + max_new > self.max_positions:
            raise RequestError(
                "request_output_len",
                f"{len(ids)} prompt + {max_new} tokens exceed max_position_embeddings {self.max_positions}",
            )
        choose = (sampling or Sampling()).chooser(torch)
        if self.qwen:
            return self._generate_mrope(ids, max_new, end_id, table, table_rows, mrope, on_token, choose)
        out: list[int] = []
        with torch.inference_mode():
            step: dict[str, Any] = {"inputs_embeds": self.embed(ids, table, table_rows)}
            past = None
            for _ in range(max_new):
                result = self.model(**step, use_cache=True, **{self.cache_kw: past})
                past = getattr(result, "cache", None) or result.past_key_values
                token = choose(result.logits[:, -1, :])
                out.append(token)
                if on_token is not None:
                    on_token(list(out))
                if end_id is not None and token == end_id:
                    break
                step = {"input_ids": torch.tensor([[token]], dtype=torch.long)}
        return out

    def _generate_mrope(
        self,
        ids: list[int],
        max_new: int,
        end_id: int | None,
        table: np.ndarray | None,
        table_rows: int,
        mrope: tuple[np.ndarray | None, int] | None,
        on_token: Any = None,
        choose: Any = None,
    ) -> list[int]:
        """Qwen2-VL: the prefill takes the given cos/sin (the encoder's 3-D positions), each decode step the
        1-D position ``len(ids) + step + delta`` on all three axes (what transformers' generate does)."""
        torch = self.torch
        cos_sin, delta = mrope if mrope is not None else (None, 0)
        want = 2 * len(ids) * self.head_dim
        if cos_sin is None or np.asarray(cos_sin).size != want:
            got = 0 if cos_sin is None else np.asarray(cos_sin).size
            raise RequestError(
                "mrope_rotary_cos_sin",
                f"needs 2 x {len(ids)} prompt positions x head_dim {self.head_dim} = {want} values, got {got}",
            )
        given = torch.from_numpy(np.ascontiguousarray(cos_sin, np.float32).reshape(2, 1, len(ids), self.head_dim))
        out: list[int] = []
        with torch.inference_mode():
            embeds = self.embed(ids, table, table_rows)
            positions = torch.arange(len(ids)).view(1, 1, -1).expand(3, 1, -1)
            self.rotary.given = (given[0], given[1])
            try:
                result = self.text_model(inputs_embeds=embeds, position_ids=positions, use_cache=True)
            finally:
                self.rotary.given = None
            for step in range(max_new):
                past = getattr(result, "cache", None) or result.past_key_values
                token = choose(self.model.lm_head(result.last_hidden_state[:, -1]))
                out.append(token)
                if on_token is not None:
                    on_token(list(out))
                if (end_id is not None and token == end_id) or step == max_new - 1:
                    break
                position = torch.full((3, 1, 1), len(ids) + step + int(delta), dtype=torch.long)
                result = self.text_model(
                    input_ids=torch.tensor([[token]], dtype=torch.long),
                    position_ids=position,
                    use_cache=True,
                    **{self.cache_kw: past},
                )
        return out


def _given_rotary(torch: Any, inner: Any) -> Any:
    """A wrapper of a rotary embedding module returning ``given`` ``(cos, sin)`` while it is set, else ``inner``'s
    (the engine sets it for a Qwen2-VL prefill: the positions come from the encoder, as NVIDIA's engine takes
    ``mrope_rotary_cos_sin``)."""

    class GivenRotary(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.given: tuple[Any, Any] | None = None

        def forward(self, x: Any, position_ids: Any) -> Any:
            if self.given is not None:
                cos, sin = self.given
                return cos.to(x.dtype), sin.to(x.dtype)
            return self.inner(x, position_ids)

    return GivenRotary()


class PromptTableEngineModel:
    """The Triton side of ``tensorrt_llm``: parameter ``engine_dir`` (the checkpoint folder)."""

    INPUTS = (
        "input_ids",
        "input_lengths",
        "request_output_len",
        "end_id",
        "pad_id",
        "prompt_embedding_table",
        "prompt_vocab_size",
        "mrope_rotary_cos_sin",
        "mrope_position_deltas",
        "temperature",
        "runtime_top_p",
        "seed",
    )

    def __init__(self, pb: Any, args: dict[str, Any]) -> None:
        self.pb = pb
        params = _params(args)
        engine_dir = params.get("engine_dir") or str(Path(args["model_repository"]) / args["model_version"] / "engine")
        self.engine = PromptTableEngine(engine_dir, threads=1)
        policy = json.loads(args["model_config"]).get("model_transaction_policy") or {}
        self.decoupled = bool(policy.get("decoupled"))

    def process(
        self, inputs: dict[str, np.ndarray | None], request: Any, on_token: Any = None
    ) -> dict[str, np.ndarray]:
        raw = inputs["input_ids"]
        if raw is None:
            raise RequestError("input_ids", "is required")
        ids = [int(i) for i in np.asarray(raw).reshape(-1)]
        max_new = _scalar(inputs["request_output_len"])
        if max_new is None:
            raise RequestError("request_output_len", "is required")
        table = inputs["prompt_embedding_table"]
        if table is not None:
            table = np.asarray(table, np.float32)
            table = table.reshape(-1, table.shape[-1]) if table.size else None
        rows = _scalar(inputs["prompt_vocab_size"], 0 if table is None else table.shape[0]) or 0
        mrope = None
        if self.engine.qwen:
            mrope = (inputs["mrope_rotary_cos_sin"], _scalar(inputs["mrope_position_deltas"], 0) or 0)
        sampling = Sampling(_real(inputs["temperature"]), _real(inputs["runtime_top_p"]), _scalar(inputs["seed"]))
        out = self.engine.generate(
            ids, max_new, _scalar(inputs["end_id"]), table, rows, mrope, on_token=on_token, sampling=sampling
        )
        return self.outputs(out)

    @staticmethod
    def outputs(tokens: list[int]) -> dict[str, np.ndarray]:
        """``output_ids`` INT32 ``[1, 1, n]`` and ``sequence_length`` INT32 ``[1, 1]`` of the generated tokens."""
        return {
            "output_ids": np.array([[tokens]], np.int32),
            "sequence_length": np.array([[len(tokens)]], np.int32),
        }

    def execute(self, requests: list[Any]) -> list[Any] | None:
        if not self.decoupled:
            return respond_each(self.pb, requests, self.INPUTS, self.process, "tensorrt_llm")
        for request in requests:
            self.stream(request)
        return None

    def stream(self, request: Any) -> None:
        """Decoupled mode (``render --streaming``): one response per generated token, each with every token so
        far, the last one flagged final (so a client without empty final responses sees the end); a failure is
        one final error response naming the field."""
        pb = self.pb
        sender = request.get_response_sender()

        requested = requested_names(request)

        def response(outputs: dict[str, np.ndarray]) -> Any:
            return tensor_response(pb, outputs, requested)

        held: list[list[int]] = []

        def send_previous(tokens: list[int]) -> None:  # the newest is sent after it, or as the final response
            if held:
                sender.send(response(self.outputs(held.pop())))
            held.append(tokens)

        try:
            final = self.process(get_inputs(pb, request, self.INPUTS), request, on_token=send_previous)
            sender.send(response(final), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except RequestError as exc:
            sender.send(error_response(pb, exc), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        except Exception as exc:  # noqa: BLE001 - reported to the client, the other requests go on
            failure = RuntimeError(f"tensorrt_llm failed: {type(exc).__name__}: {exc}")
            sender.send(error_response(pb, failure), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
