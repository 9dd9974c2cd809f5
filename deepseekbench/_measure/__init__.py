"""One request measured: SSE decoding, timed deltas, the client self-check, token
counting and the server's metrics scraped around a window.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
