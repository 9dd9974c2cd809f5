"""The network seam: the transport, the live gate every connection passes, engine
routes and the reachability probe.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
