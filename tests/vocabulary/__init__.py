"""Tests of ``deepseekbench/_types`` (the shared vocabulary); not named ``types``, which
would shadow the standard library module wherever ``tests/`` is put on ``sys.path``."""
