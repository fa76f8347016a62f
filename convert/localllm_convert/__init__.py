"""Hugging Face checkpoint -> GGUF converter with one-step quantization."""
