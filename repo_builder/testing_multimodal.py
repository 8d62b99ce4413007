"""A tiny random-weight LLaVA checkpoint for the tests of layout ``multimodal`` (``render --layout multimodal``).

:func:`make_tiny_llava` writes a ``LlavaForConditionalGeneration`` checkpoint built from transformers' own
config classes: a CLIP vision tower (hidden 32, 2 layers, 56 px images, 14 px patches: 16 patches + CLS) and a
Llama text model (hidden 64, 2 layers), joined by LLaVA's two-layer GELU projector; about 4.2 M parameters.
Beside it: the tokenizer it is given with ``<image>`` added as a special token (id 32000 for a 32000-piece
LLaMA / Mistral SentencePiece vocabulary, as llava-1.5's), and a ``CLIPImageProcessor`` (56 px), so the
folder is a complete ``--engine-dir`` for the layout. Its text is gibberish: the weights are random
(std 0.3 so that the output depends on the image).
"""

from __future__ import annotations

from pathlib import Path

IMAGE_TOKEN = "<image>"


def make_tiny_llava(out_dir: str | Path, tokenizer_dir: str | Path, *, seed: int = 0, image_size: int = 56) -> Path:
    """Write the tiny LLaVA checkpoint (see the module docstring) to ``out_dir``.

    Args:
        tokenizer_dir: a LLaMA-style tokenizer folder (``AutoTokenizer``); ``<image>`` is added to it.
        image_size: pixels of the (square) vision input; a multiple of the 14 px patch.
    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    image_id = int(tok.convert_tokens_to_ids(IMAGE_TOKEN))  # type: ignore[arg-type]
    vocab = (len(tok) + 63) // 64 * 64  # padded like llava-1.5's 32064
    text = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=0,
        initializer_range=0.3,
    )
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=14,
        projection_dim=32,
        initializer_range=0.3,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_id,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        image_seq_length=(image_size // 14) ** 2,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = 0
    model.save_pretrained(str(out))
    images = CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    images.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def make_tiny_qwen2_vl(out_dir: str | Path, tokenizer_dir: str | Path, *, seed: int = 0) -> Path:
    """Write a tiny random ``Qwen2VLForConditionalGeneration`` checkpoint to ``out_dir``.

    Text model: hidden 128, 1 head of 128 (Qwen2-VL's ``mrope_section`` [16, 24, 24] needs head_dim 128),
    2 layers, vocabulary 151936 (Qwen2-VL-2B's: not NVIDIA's hard-coded 7B 152064), tied embeddings; vision
    tower: depth 1, embed 32, patch 14, spatial merge 2 (a 56 x 56 image -> grid [1, 4, 4] -> 4 image tokens);
    about 20 M parameters, almost all embedding. Beside it: the given Qwen tokenizer (``<|vision_start|>``
    151652, ``<|image_pad|>`` 151655, ``<|vision_end|>`` 151653) and a ``Qwen2VLImageProcessor`` whose pixel
    bounds keep test images small (min 56 x 56, max 112 x 112 pixels). Weights std 0.3, so outputs depend on
    the image.

    Args:
        tokenizer_dir: a Qwen2 / Qwen3 tokenizer folder with the vision tokens.
    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    ids = {name: int(tok.convert_tokens_to_ids(name)) for name in QWEN2_VL_TOKENS.values()}  # type: ignore[arg-type]
    text = {
        "vocab_size": 151936,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "max_position_embeddings": 1024,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 24, 24]},
        "tie_word_embeddings": True,
        "initializer_range": 0.3,
        "eos_token_id": tok.eos_token_id,
        "bos_token_id": None,
        "pad_token_id": tok.pad_token_id,
    }
    vision = {
        "depth": 1,
        "embed_dim": 32,
        "hidden_size": 128,
        "num_heads": 2,
        "mlp_ratio": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "initializer_range": 0.3,
    }
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids[QWEN2_VL_TOKENS["image"]],
        video_token_id=ids[QWEN2_VL_TOKENS["video"]],
        vision_start_token_id=ids[QWEN2_VL_TOKENS["vision_start"]],
        vision_end_token_id=ids[QWEN2_VL_TOKENS["vision_end"]],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).eval()
    model.save_pretrained(str(out))
    Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112, patch_size=14, merge_size=2).save_pretrained(
        str(out)
    )
    tok.save_pretrained(str(out))
    return out


#: The Qwen2-VL special tokens by role (Qwen2-VL's tokenizer_config.json).
QWEN2_VL_TOKENS = {
    "vision_start": "<|vision_start|>",
    "vision_end": "<|vision_end|>",
    "image": "<|image_pad|>",
    "video": "<|video_pad|>",
}
