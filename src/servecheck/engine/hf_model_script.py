"""Write a small llama checkpoint in Hugging Face format: seeded random bf16 weights and a
byte-level BPE tokenizer trained on the given text.

Run by the python of servecheck's vLLM environment (torch, tokenizers and transformers live
only there), never imported by servecheck itself:

    VENV_PYTHON hf_model_script.py SPEC.json

SPEC.json: {"out", "corpus", "hidden_size", "num_layers", "num_heads", "intermediate_size",
"vocab_size", "max_position_embeddings", "seed", "weight_std", "rms_eps", "rope_theta", "name"}.
The last line on stdout is a JSON summary (vocabulary size, parameters, file hashes).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoTokenizer, LlamaConfig, PreTrainedTokenizerFast

# Beside this script (the folder a script's imports start from): shared with the MLX model's script.
from bpe_tokenizer_script import BOS, CHAT_TEMPLATE, EOS, PAD, train_tokenizer, unspeakable_ids


def weights(spec: dict, vocab: int, silent: list[int]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(int(spec["seed"]))
    hidden, inter, std = spec["hidden_size"], spec["intermediate_size"], spec["weight_std"]
    kv = spec["num_heads"]  # no grouped-query attention: as many KV heads as query heads

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * std).to(torch.bfloat16)

    def ones() -> torch.Tensor:
        return torch.ones(hidden, dtype=torch.bfloat16)

    head_dim = hidden // spec["num_heads"]
    out = {"model.embed_tokens.weight": rand(vocab, hidden)}
    for i in range(spec["num_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = ones()
        out[p + "self_attn.q_proj.weight"] = rand(hidden, hidden)
        out[p + "self_attn.k_proj.weight"] = rand(kv * head_dim, hidden)
        out[p + "self_attn.v_proj.weight"] = rand(kv * head_dim, hidden)
        out[p + "self_attn.o_proj.weight"] = rand(hidden, hidden)
        out[p + "post_attention_layernorm.weight"] = ones()
        out[p + "mlp.gate_proj.weight"] = rand(inter, hidden)
        out[p + "mlp.up_proj.weight"] = rand(inter, hidden)
        out[p + "mlp.down_proj.weight"] = rand(hidden, inter)
    out["model.norm.weight"] = ones()
    head = rand(vocab, hidden)
    head[silent] = 0
    out["lm_head.weight"] = head
    return out


def config(spec: dict, tok: Tokenizer, vocab: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab, hidden_size=spec["hidden_size"], intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_layers"], num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_heads"], max_position_embeddings=spec["max_position_embeddings"],
        rms_norm_eps=spec["rms_eps"], rope_theta=spec["rope_theta"], tie_word_embeddings=False,
        bos_token_id=tok.token_to_id(BOS), eos_token_id=tok.token_to_id(EOS), pad_token_id=tok.token_to_id(PAD),
        torch_dtype="bfloat16", architectures=["LlamaForCausalLM"],
    )


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
    config(spec, tok, vocab).save_pretrained(out)
    tensors = weights(spec, vocab, unspeakable_ids(tok))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    # Read back the way vLLM will, so a checkpoint that does not load is never stamped.
    loaded = AutoTokenizer.from_pretrained(out)
    AutoConfig.from_pretrained(out)
    sample = loaded("0123abcd4567: the server reads weights once per step")["input_ids"]
    summary = {
        "vocab_size": vocab, "params": sum(t.numel() for t in tensors.values()), "sample_tokens": len(sample),
        "model_sha256": sha256(out / "model.safetensors"), "tokenizer_sha256": sha256(out / "tokenizer.json"),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
