"""Write a small llama checkpoint in MLX's format: seeded random weights made with mlx-lm's own
model class, and the byte-level BPE tokenizer the vLLM model has (`bpe_tokenizer_script`).

Run by the python of servecheck's MLX environment (mlx, mlx-lm, tokenizers and transformers live
only there), never imported by servecheck itself:

    VENV_PYTHON mlx_model_script.py SPEC.json

SPEC.json: {"out", "corpus", "hidden_size", "num_layers", "num_heads", "intermediate_size",
"vocab_size", "max_position_embeddings", "seed", "weight_std", "rms_eps", "rope_theta", "dtype", "name"}.
The last line on stdout is a JSON summary (vocabulary size, parameters, EOS ids, file hashes).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map
from mlx_lm.models.llama import Model, ModelArgs
from mlx_lm.utils import load
from transformers import PreTrainedTokenizerFast

# Beside this script (the folder a script's imports start from): shared with the vLLM model's script.
from bpe_tokenizer_script import BOS, CHAT_TEMPLATE, EOS, PAD, train_tokenizer, unspeakable_ids


def config(spec: dict, tok_ids: dict[str, int], vocab: int) -> dict:
    """config.json as mlx-lm reads it (`model_type` picks mlx_lm.models.llama)."""
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab,
        "hidden_size": spec["hidden_size"], "intermediate_size": spec["intermediate_size"],
        "num_hidden_layers": spec["num_layers"], "num_attention_heads": spec["num_heads"],
        "num_key_value_heads": spec["num_heads"], "max_position_embeddings": spec["max_position_embeddings"],
        "rms_norm_eps": spec["rms_eps"], "rope_theta": spec["rope_theta"], "tie_word_embeddings": False,
        "bos_token_id": tok_ids[BOS], "eos_token_id": tok_ids[EOS], "pad_token_id": tok_ids[PAD],
        "torch_dtype": spec["dtype"],
    }


def weights(model: Model, spec: dict, silent: list[int]) -> dict[str, mx.array]:
    """Seeded normal matrices, norms at one; the output rows of `silent` ids at zero."""
    mx.random.seed(int(spec["seed"]))
    dtype = getattr(mx, spec["dtype"])
    std = float(spec["weight_std"])

    def fill(p: mx.array) -> mx.array:
        if p.ndim == 1:  # the RMS norms
            return mx.ones(p.shape, dtype=dtype)
        return (mx.random.normal(p.shape) * std).astype(dtype)

    params = dict(tree_flatten(tree_map(fill, model.parameters())))
    head = params["lm_head.weight"]
    keep = mx.ones((head.shape[0], 1), dtype=dtype)
    if silent:
        keep[mx.array(silent)] = 0
    params["lm_head.weight"] = head * keep
    return params


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(Path(spec["corpus"]).read_text(encoding="utf-8"), int(spec["vocab_size"]))
    vocab = tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = spec["max_position_embeddings"]
    fast.save_pretrained(out)
    ids = {s: tok.token_to_id(s) for s in (BOS, EOS, PAD)}
    cfg = config(spec, ids, vocab)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    model = Model(ModelArgs.from_dict(cfg))
    # The EOS row stays random, as a trained model's would: what keeps a request at its length is
    # the client's logit_bias, and the length checks see it (the other ids whose text alone is
    # empty are silenced, so every generated token streams as visible text).
    silent = [i for i in unspeakable_ids(tok) if i != ids[EOS]]
    tensors = weights(model, spec, silent)
    mx.save_safetensors(str(out / "model.safetensors"), tensors, metadata={"format": "mlx"})
    # Read back the way mlx_lm.server will, so a checkpoint that does not load is never stamped.
    loaded, wrapper = load(str(out))
    sample = wrapper.encode("0123abcd4567: the server reads weights once per step")
    summary = {
        "vocab_size": vocab, "params": sum(v.size for v in tensors.values()), "sample_tokens": len(sample),
        "eos_token_ids": sorted(int(i) for i in wrapper.eos_token_ids), "dtype": spec["dtype"],
        "model_sha256": sha256(out / "model.safetensors"), "tokenizer_sha256": sha256(out / "tokenizer.json"),
        "mlx_version": mx.__version__,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
