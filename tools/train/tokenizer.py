"""Byte-level BPE for the corpus, written as a HF `tokenizer.json` that `flashtree convert` turns
into GGUF `tokenizer.ggml.*` (model `gpt2`, pre-tokenizer `qwen35`).

Pipeline (the one flashtree's tokenizer runs, `host/src/tokenizer/mod.rs`): special tokens matched
in the raw text; NFC; the qwen35 split regex (isolated pieces); byte-level mapping without prefix
space; BPE with `ignore_merges` (a piece that is a whole vocabulary entry is taken as is).
"""
import json

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# host/src/tokenizer/tiktoken.rs QWEN35_PATTERN
QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
EOS = "<|endoftext|>"
SPECIALS = [EOS, "<|im_start|>", "<|im_end|>", "<|MASK|>"]
MASK = "<|MASK|>"

# ChatML, as the Qwen models write it (the demo model is a code completer: chat turns are only
# rendered, never trained).
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def pipeline(tok):
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train(texts, vocab_size):
    """BPE over `texts` (an iterator of strings) with `vocab_size` ids in all, specials last."""
    tok = pipeline(Tokenizer(models.BPE(ignore_merges=True)))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIALS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # Specials after the learned ids (as in Qwen's vocabularies): ids vocab_size-4 .. vocab_size-1.
    tok.add_special_tokens(SPECIALS)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def save(tok, out_dir, max_len):
    """tokenizer.json + tokenizer_config.json + chat_template.jinja into `out_dir`."""
    tok.save(f"{out_dir}/tokenizer.json")
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": EOS,
        "bos_token": None, "model_max_length": max_len, "add_bos_token": False,
    }
    with open(f"{out_dir}/tokenizer_config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    with open(f"{out_dir}/chat_template.jinja", "w") as f:
        f.write(CHAT_TEMPLATE)
