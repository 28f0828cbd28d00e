"""core: the shared vocabulary every stage uses: the typed record schema (records), JSON Lines (jsonl),
atomic writes (atomic), token usage (usage), the (sample_id, repeat) key and seeds (keys), the API-key
redactor (secrets), small text and value helpers (text, values).

May import: nothing from evaluator (layer 0).
"""
