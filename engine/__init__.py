"""Sequoia Live engine: exact tree speculative decoding on Hugging Face causal-LM pairs.

Knows nothing about Gradio; the app only renders what this package emits."""
