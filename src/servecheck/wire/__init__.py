"""The wire: the API dialects servecheck speaks (OpenAI, llama.cpp native, Ollama native), their pure stream
parsers and dialect detection. The HTTP client that sends them is `load.driver`."""
