"""The results store: append-only JSONL records, their digest chain, resume state and the file lock.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
