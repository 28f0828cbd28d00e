"""core: the shared vocabulary every stage uses: the typed record schema, the (sample_id, repeat) key and
seeds (records), JSON Lines and JSON value checks (jsonl), atomic writes (atomic), token usage (usage), the
trust boundary and API-key redactor (boundary, unescape, secrets), text helpers (text), exit codes and
errors (errors), closed vocabularies (vocab), and how library code reports to a person (output).

May import: nothing from evaluator (layer 0).
"""
