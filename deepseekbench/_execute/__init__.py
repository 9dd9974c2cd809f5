"""The executor stage: prepares the workload, sends each scheduled block at the right
moment (in-process, worker pool or Ray) and measures it. The only async stage.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
