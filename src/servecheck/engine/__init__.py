"""The local engines: find or build `llama-server`, install vLLM and MLX, generate small random-weight
models, and launch servers that are always stopped again (`managed.ManagedServer`).

Each engine keeps provisioning apart from running: llama.cpp in `llamacpp/build.py` and `llamacpp/server.py`,
vLLM in `vllm/provision.py` and `vllm/server.py`, MLX in `mlx_engine/provision.py` and
`mlx_engine/server.py`; the process every server runs in, with its ports and safety net, is
`managed.py`. `process.py` re-exports the names it held before the split."""
