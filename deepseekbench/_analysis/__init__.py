"""Analysis: rows, statistics, speed-ups, parity verdicts and breakdowns, computed
only from the stored records (pure).

Private: public names are re-exported from :mod:`deepseekbench`.
"""
