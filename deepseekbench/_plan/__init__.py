"""The plan (validated pydantic), its workload, tasks and capabilities, and the
schedule: the ordered work items a plan asks for (pure, no server needed).

Private: public names are re-exported from :mod:`deepseekbench`.
"""
