"""The local llama.cpp engine: find or build `llama-server`, generate small random-weight models,
and launch servers that are always stopped again (`process.ManagedServer`, `process.LlamaServer`)."""
