"""data: what is asked. The benchmarks (registry, schema, messages, parsers), the hub revision and HF
cache (hub), parquet files to samples and the manifest (parquet), answer parsing (parsing, think), the
prompt files shipped as package data (prompts/, read by prompt_files) and the digest of a question's
messages (messages).

May import: core.
"""
