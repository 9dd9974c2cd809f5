"""Launchers for real serving engines (vLLM, llama.cpp) used by tests and benchmarks;
beside the pipeline, they import only the network seam below them.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
