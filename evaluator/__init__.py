"""Reproducible evaluation of semantic counting with vision-language models."""

__version__ = "0.1.0"
