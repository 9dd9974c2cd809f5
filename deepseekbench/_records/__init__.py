"""The records every stage shares, below the stages: what one request measured and
the figures derived from it.

Holds the measurement record (:mod:`._measurement`: ``StreamMeasurement``, its
faults and their severity), the per-request figures (:mod:`._figures`), the
client-health and client-clock derivations over a row's requests
(:mod:`._client_health`, :mod:`._client_clock`) and the follow-up record of a
divergence to explain (:mod:`._follow_up`). Pure data and arithmetic: no I/O; it
imports only ``_version``, ``_errors``, ``_userfile`` and ``_types``.

Private: public names are re-exported from :mod:`deepseekbench`.
"""
