"""llama.cpp, the engine servecheck builds: provisioning (`build`: find or build `llama-server` from the
sources vendored in the llama-cpp-python sdist), the models it runs (`model`: GGUFs generated with
`gguf`), and running it (`server`: `LlamaServer` on `managed.LocalServer`)."""
