"""core: the shared vocabulary every stage uses: the typed record schema (records), JSON Lines (jsonl),
atomic writes (atomic), token usage (usage), the (sample_id, repeat) key and seeds (keys), the API-key
redactor (secrets), small text and value helpers (text, values), and how library code reports to a person
(output: messages and answers through logging; only cli/ and demo/ print).

May import: nothing from evaluator (layer 0).
"""
