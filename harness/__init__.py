"""Upgrade validation harness for LLM text generation."""

__version__ = "0.1.0"
