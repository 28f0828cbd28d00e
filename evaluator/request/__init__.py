"""request: one question on the wire. The request body and its hash (body), the request-shape flags and
presets (shape, presets/), endpoint URLs (endpoint), the HTTP client (client), its
retries and refusal and rate-limit classification (ratelimit), pacing (pacing) and the circuit breaker (breaker).

May import: core, data.
"""
