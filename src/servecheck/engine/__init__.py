"""The local engines: find or build `llama-server`, install vLLM and MLX, generate small random-weight
models, and launch servers that are always stopped again (`managed.ManagedServer`).

Each engine is a package that keeps provisioning apart from running: llama.cpp in `llamacpp/build.py` and
`llamacpp/server.py` (its GGUFs in `llamacpp/model.py`), vLLM in `vllm/provision.py` and `vllm/server.py`,
MLX in `mlx_engine/provision.py` and `mlx_engine/server.py`. The Hugging Face-format models stay here,
beside them, because both vLLM and MLX use them: `hf_model.py` (and the script, tokenizer trainer and
corpus it runs inside vLLM's environment) makes vLLM's model, and `mlx_model.py` MLX's from the same
spec, corpus and tokenizer. The process every server runs in, with its ports and safety net, is
`managed.py`; `process.py` re-exports the names it held before the split."""
