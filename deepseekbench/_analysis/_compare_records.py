"""What differs between two runs' records: the factors a comparison attributes changes to.

Read from what a results file records about its run: the deepseekbench version
(``run_start``), the model, each route's engine version, exact launch command and
speculative configuration (``[routes.launch]``, copied onto the rows), the client
(its cores, from the rows) and every plan key (the workload included). Each
difference is one :class:`Factor`. Things that differ between any two runs by
construction are not factors: the results path, and the port of a loopback
``base_url`` or a launch command's ``--port`` (a launched or embedded engine gets
a free port each run). Plan keys under a route's ``launch`` are named through the
launch command's flags when the rows carry the command (one factor, not two).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from deepseekbench._types._row import Row

__all__ = ["Factor", "RouteRecord", "RunRecords", "diff_records", "records_of"]

_LONG = 80
_LOOPBACK_PORT = re.compile(r"^(\w+://(?:127\.0\.0\.1|localhost|\[::1\])):\d+")
_IGNORED_FLAGS = frozenset({"--port"})
_IGNORED_PLAN_KEYS = frozenset({"results"})


class Factor(BaseModel):
    """One recorded difference between run A and run B.

    Attributes:
        kind: ``engine version``, ``launch flag``, ``launch program``,
            ``speculative config``, ``model``, ``deepseekbench version``, ``client``
            or ``plan key``.
        name: what differs (``--verify-token-ms``, ``workload.prompts``).
        route: the route label it belongs to (``None``: the whole run).
        a, b: the value in each run, as text (``None``: absent there); a value
            longer than 80 characters is shown as its SHA-256 prefix and length.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    name: str
    route: str | None = None
    a: str | None = None
    b: str | None = None

    def __str__(self) -> str:
        what = " ".join(x for x in (self.kind, self.name) if x)
        where = f" ({self.route})" if self.route else ""
        return f"{what}{where}: {self.a or '—'} → {self.b or '—'}"


@dataclass(frozen=True, slots=True)
class RouteRecord:
    """What a run recorded about one route's engine (``None``: not recorded)."""

    engine_version: str | None = None
    command: tuple[str, ...] | None = None
    spec_config: str | None = None


@dataclass(frozen=True, slots=True)
class RunRecords:
    """What a run recorded about itself (see the module's docstring).

    Attributes:
        library_version: the deepseekbench version that wrote the file.
        model: the plan's model. plan: the plan as JSON (``model_dump(mode="json")``).
        routes: per route label, its engine's records (from the rows).
        client_cores: the client's usable cores (the most any row recorded).
    """

    library_version: str | None = None
    model: str | None = None
    plan: Mapping[str, Any] = field(default_factory=dict)
    routes: Mapping[str, RouteRecord] = field(default_factory=dict)
    client_cores: int | None = None


def records_of(
    rows: Iterable[Row], *, plan: Mapping[str, Any], model: str, library_version: str | None
) -> RunRecords:
    """The records of a run: ``plan`` (as JSON), ``model``, ``library_version``, and per
    route label the first recorded engine version, command and speculative config; the
    largest client core count among the rows."""
    routes: dict[str, RouteRecord] = {}
    cores: int | None = None
    for row in rows:
        label = row.route_label or row.speculative.value
        old = routes.get(label, RouteRecord())
        routes[label] = RouteRecord(
            engine_version=old.engine_version or row.engine_version,
            command=old.command or row.engine_command,
            spec_config=old.spec_config or row.spec_config,
        )
        if row.client_cores is not None:
            cores = max(cores or 0, row.client_cores)
    return RunRecords(
        library_version=library_version,
        model=model,
        plan=plan,
        routes=routes,
        client_cores=cores,
    )


def _shown(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else _json(value)
    if len(text) <= _LONG:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"sha256:{digest} ({len(text)} characters)"


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Dotted keys of a JSON value; a list of labelled mappings is keyed by label."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif (
        isinstance(value, list)
        and value
        and all(isinstance(v, Mapping) and "label" in v for v in value)
    ):
        for v in value:
            _flatten(v, f"{prefix}[{v['label']}]", out)
    else:
        out[prefix] = value


def _normal_url(value: Any) -> Any:
    return _LOOPBACK_PORT.sub(r"\1:<port>", value) if isinstance(value, str) else value


def _plan_factors(a: Mapping[str, Any], b: Mapping[str, Any], launched: set[str]) -> list[Factor]:
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    _flatten(a, "", fa)
    _flatten(b, "", fb)
    out: list[Factor] = []
    for key in sorted(set(fa) | set(fb)):
        if key in _IGNORED_PLAN_KEYS:
            continue
        route = key[len("routes[") : key.index("]")] if key.startswith("routes[") else None
        if route is not None and route in launched and ".launch." in key:
            continue  # named through the launch command's flags
        va, vb = fa.get(key), fb.get(key)
        if key.endswith(".base_url"):
            va, vb = _normal_url(va), _normal_url(vb)
        if va != vb:
            out.append(Factor(kind="plan key", name=key, a=_shown(va), b=_shown(vb)))
    return out


def _flags(argv: Sequence[str]) -> tuple[str, dict[str, str]]:
    """``(program, {flag: value})`` of a command line (a bare flag's value is ``on``)."""
    program_parts: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv) and not argv[i].startswith("-"):
        program_parts.append(argv[i].rsplit("/", 1)[-1] if i == 0 else argv[i])
        i += 1
    while i < len(argv):
        name = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if nxt is not None and not (nxt.startswith("-") and not _numeric(nxt)):
            flags[name] = nxt
            i += 2
        else:
            flags[name] = "on"
            i += 1
    return " ".join(program_parts), flags


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _spec_keys(text: str | None) -> dict[str, Any] | None:
    """A recorded speculative config's keys (``None``: not a JSON object)."""
    import orjson

    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    flat: dict[str, Any] = {}
    _flatten(value, "", flat)
    return flat


def _spec_factors(label: str, a: RouteRecord, b: RouteRecord, flags: set[str]) -> list[Factor]:
    """The speculative config's differences, key by key when both are JSON objects; a key
    whose launch flag (``--key-name``) already differs is that flag, not a second factor
    (a launch records its engine arguments in both)."""
    if a.spec_config == b.spec_config:
        return []
    ka, kb = _spec_keys(a.spec_config), _spec_keys(b.spec_config)
    if ka is None or kb is None:
        return [
            Factor(kind="speculative config", name="", route=label, a=_shown(a.spec_config),
                   b=_shown(b.spec_config))
        ]  # fmt: skip
    out: list[Factor] = []
    for key in sorted(set(ka) | set(kb)):
        va, vb = ka.get(key), kb.get(key)
        if va == vb or "--" + key.replace("_", "-") in flags:
            continue
        out.append(
            Factor(kind="speculative config", name=key, route=label, a=_shown(va), b=_shown(vb))
        )
    return out


def _route_factors(label: str, a: RouteRecord, b: RouteRecord) -> list[Factor]:
    out: list[Factor] = []
    if a.engine_version != b.engine_version:
        out.append(
            Factor(
                kind="engine version", name="", route=label, a=a.engine_version, b=b.engine_version
            )
        )
    if a.command is None or b.command is None:
        out += _spec_factors(label, a, b, set())
        if (a.command is None) != (b.command is None):
            out.append(
                Factor(
                    kind="launch command",
                    name="",
                    route=label,
                    a=_shown(" ".join(a.command or ())) if a.command else None,
                    b=_shown(" ".join(b.command or ())) if b.command else None,
                )
            )
        return out
    prog_a, flags_a = _flags(a.command)
    prog_b, flags_b = _flags(b.command)
    if prog_a != prog_b:
        out.append(Factor(kind="launch program", name="", route=label, a=prog_a, b=prog_b))
    changed_flags: set[str] = set()
    for flag in sorted(set(flags_a) | set(flags_b)):
        if flag in _IGNORED_FLAGS or flags_a.get(flag) == flags_b.get(flag):
            continue
        changed_flags.add(flag)
        out.append(
            Factor(
                kind="launch flag",
                name=flag,
                route=label,
                a=_shown(flags_a.get(flag)),
                b=_shown(flags_b.get(flag)),
            )
        )
    return out + _spec_factors(label, a, b, changed_flags)


def diff_records(a: RunRecords, b: RunRecords) -> tuple[Factor, ...]:
    """Every recorded difference between run A and run B, one :class:`Factor` each: the
    deepseekbench version, the model, per route (in A's order, then B's new ones) its
    engine version, speculative config, launch program and each launch flag, the
    client's cores, then each plan key (sorted)."""
    out: list[Factor] = []
    if a.library_version != b.library_version:
        out.append(
            Factor(kind="deepseekbench version", name="", a=a.library_version, b=b.library_version)
        )
    if a.model != b.model:
        out.append(Factor(kind="model", name="", a=a.model, b=b.model))
    labels = [*a.routes, *(k for k in b.routes if k not in a.routes)]
    launched: set[str] = set()
    for label in labels:
        ra, rb = a.routes.get(label), b.routes.get(label)
        if ra is None or rb is None:
            continue  # a route of one run only: its lines are listed as such
        if ra.command is not None and rb.command is not None:
            launched.add(label)
        out += _route_factors(label, ra, rb)
    ca, cb = a.client_cores, b.client_cores
    if ca is not None and cb is not None and ca != cb:
        out.append(Factor(kind="client", name="cores", a=str(ca), b=str(cb)))
    out += _plan_factors(a.plan, b.plan, launched)
    return tuple(out)
