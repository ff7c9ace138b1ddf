"""The byte-level BPE tokenizer servecheck's generated Hugging Face-format models share (vLLM's and
MLX's): trained with `tokenizers` on the given text, special tokens <s> </s> <pad>.

Imported by the model scripts, which run with an engine environment's python (`tokenizers` lives
only there); servecheck itself never imports it.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIALS = [BOS, EOS, PAD]
# Enough for the openai-chat dialect; the model's words make no sense either way.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def train_tokenizer(corpus: str, vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus.splitlines(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]),
    ])
    return tok


def unspeakable_ids(tok: Tokenizer) -> list[int]:
    """Special tokens and lone non-ASCII bytes: ids whose text alone is empty or not UTF-8.

    Their output rows are zero, so greedy decoding of random weights never picks them and every
    generated token streams as visible text."""
    byte_decoder = {ch: b for b, ch in _bytes_to_unicode().items()}
    out = []
    for piece, idx in tok.get_vocab().items():
        if piece in SPECIALS:
            out.append(idx)
            continue
        raw = bytes(byte_decoder[ch] for ch in piece if ch in byte_decoder)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            out.append(idx)
    return sorted(out)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which the ByteLevel pre-tokenizer uses."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, (chr(c) for c in chars), strict=True))
