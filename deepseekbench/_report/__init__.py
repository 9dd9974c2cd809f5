"""Reports: the scorecard and plots. Renders rows; computes no verdicts.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
