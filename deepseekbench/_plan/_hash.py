"""A plan's identity: the digest a results file resumes by.

Holds :func:`plan_hash` and what it leaves out: where results go and how the load
is sent (:data:`NOT_HASHED`), the parity verdict's rule, a route's declared
determinism, and keys added since 0.1 while at the default that sends the same
requests as before they existed (so older results files still resume).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from deepseekbench._plan._plan import BenchmarkPlan

__all__ = ["NOT_HASHED", "plan_hash"]

# Where results go and how the load is sent: a run resumed with more workers is
# the same plan.
NOT_HASHED = {
    "base_dir",
    "results",
    "client_lag_threshold_ms",
    "workers",
    "executor",
    "ray_address",
    "probe_routes",
    "clock",  # judging, not measuring
}


_ADDED_AT_DEFAULT: dict[tuple[str, ...], Any] = {
    ("search",): None,
    ("stopping",): None,
    ("workload", "shared_prefix"): None,
    ("workload", "trace"): None,
    ("workload", "speed_bench_by"): "category",
    ("workload", "output_tokens"): None,
    ("workload", "require_all_items"): False,  # validation only, never a request
    ("arrival", "ramp_ms"): 0.0,  # all at once: the start pattern before the key existed
}
"""Keys added since 0.1 whose default sends the same requests as before they existed:
left out of the plan hash at that default, so older results files still resume."""


def _as_before(data: dict[str, Any]) -> None:
    """Edit a plan dump in place so a plan that measures what it measured before the
    keys of :data:`_ADDED_AT_DEFAULT` and ``workload.output_length`` existed hashes as it
    did then: keys at their default are dropped, and ``forced`` / ``natural`` output
    lengths hash as the ``reach_max_tokens`` true / false they replace (``pinned`` sends
    other requests, so its plans hash anew)."""
    for path, default in _ADDED_AT_DEFAULT.items():
        *parents, key = path
        node: Any = data
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node and node[key] == default:
            del node[key]
    workload = data.get("workload")
    if isinstance(workload, dict) and workload.get("output_length") in ("forced", "natural"):
        workload["reach_max_tokens"] = workload.pop("output_length") == "forced"


_PARITY_NOT_HASHED = {
    "exact",
    "tau_nats",
    "forensics",
    "profile_outputs",
    "lossy_rate",
    "witness",
    "witness_top_k",
    "witness_min_tokens",
    "witness_max_top1",
    "witness_max_requests",
    "witness_max_tokens",
}
"""The within-noise parity keys change the verdict's rule, never a measured request."""


def plan_hash(plan: BenchmarkPlan) -> str:
    """The 16-hex-digit digest :meth:`BenchmarkPlan.plan_hash` returns (its docstring
    says what is left out)."""
    exclude: dict[str, Any] = {k: True for k in NOT_HASHED}
    exclude["parity"] = _PARITY_NOT_HASHED
    exclude["routes"] = {"__all__": {"deterministic"}}  # changes no request
    data = plan.model_dump(mode="json", exclude=exclude)
    _as_before(data)
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
