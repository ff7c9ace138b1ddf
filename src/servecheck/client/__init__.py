"""API dialects (OpenAI, llama.cpp native, Ollama native), pure stream parsers and dialect detection."""
