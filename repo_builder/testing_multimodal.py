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
