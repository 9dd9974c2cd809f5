"""Shared vocabulary: the axes, requests, acceptance records, parity records and rows
every stage speaks. Plain data and pure functions only: no I/O and no HTTP client.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
