"""The plan (validated pydantic), its workload, tasks and capabilities, and the
schedule: the ordered work items a plan asks for (pure data and validation, no
server needed; what the servers say of themselves is read by the preflight step
in ``_execute``).

Private: public names are re-exported from :mod:`deepseekbench`.
"""
