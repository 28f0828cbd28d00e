"""data: what is asked. The benchmarks (registry, schema, messages, parsers), the hub revision and HF
cache (hub), parquet files to samples and the manifest (parquet), answer parsing (parsing), the
reasoning mode and inline think blocks (reasoning), the prompt files shipped as package data (prompts/,
read by benchmarks.base) and the digest of a question's messages (parquet).

May import: core.
"""
