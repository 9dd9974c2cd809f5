"""Model capability probe: how many MTP (NextN) layers a checkpoint carries.

A plan that asks for ``speculative=mtp`` on a model without multi-token-prediction
layers cannot measure anything meaningful, so plan validation refuses it before any
request. The depth is read from the model files themselves:

* GGUF (llama.cpp): the ``<arch>.nextn_predict_layers`` key, where ``<arch>`` is the
  value of ``general.architecture`` (key spelled as in the ``gguf`` package's
  ``Keys.LLM.NEXTN_PREDICT_LAYERS``, written by llama.cpp's ``convert_hf_to_gguf.py``
  for DeepSeek V3-style and GLM-4.5-style checkpoints).
* Hugging Face ``config.json``: ``num_nextn_predict_layers``, as DeepSeek V3/V4
  checkpoints carry it (also looked up inside a nested ``text_config``).

Absent key means depth 0. Reading GGUF needs the optional ``gguf`` package (extra
``engine``); it is imported lazily so the rest of the library works without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from deepseekbench._errors import ModelCapabilityError
from deepseekbench._userfile import SMALL_FILE_MAX_BYTES, check_user_file, read_user_bytes

__all__ = [
    "ModelCapability",
    "ModelCapabilityError",
    "mtp_depth_from_gguf",
    "mtp_depth_from_hf_config",
    "probe_model_capability",
]

_HF_KEY = "num_nextn_predict_layers"
_GGUF_ARCH_KEY = "general.architecture"
_GGUF_NEXTN_SUFFIX = ".nextn_predict_layers"


class ModelCapability(BaseModel):
    """What a model checkpoint can do for speculative decoding, as read from its files.

    Fields:
        source: the path that was read (``"<dict>"`` for an in-memory HF config).
        format: ``"gguf"`` or ``"hf_config"``.
        architecture: GGUF ``general.architecture`` or the HF ``model_type``; ``None``
            when the file does not name one.
        mtp_depth: number of MTP / NextN prediction layers (layers, >= 0); 0 means the
            model cannot serve ``speculative=mtp``.

    Raises:
        pydantic.ValidationError: a negative ``mtp_depth``, an unknown ``format``, or
            an unknown field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    format: Literal["gguf", "hf_config"]
    architecture: str | None = None
    mtp_depth: int = Field(ge=0)

    @property
    def supports_mtp(self) -> bool:
        """True when the model carries at least one MTP layer (``mtp_depth > 0``)."""
        return self.mtp_depth > 0


def _check_depth(value: object, *, key: str, source: str) -> int:
    # bool is an int subclass; a depth of True is a malformed file, not depth 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelCapabilityError(
            f"{source}: {key} must be a non-negative integer, got {value!r}", source=source
        )
    return value


def _import_gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ModelCapabilityError(
            "reading GGUF metadata needs the optional 'gguf' package: "
            "pip install 'deepseekbench[engine]'",
            source="gguf",
        ) from exc
    return gguf


def _read_gguf(path: str | os.PathLike[str]) -> tuple[str, str, int]:
    """Return (source, architecture, mtp_depth) of a GGUF file."""
    source = os.fspath(path)

    def fail(line: str) -> ModelCapabilityError:
        return ModelCapabilityError(line, source=source)

    check_user_file(source, what="GGUF file", fail=fail)
    gguf = _import_gguf()
    try:
        reader = gguf.GGUFReader(source, "r")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ModelCapabilityError(
            f"{source}: not a readable GGUF file ({type(exc).__name__}: {exc})", source=source
        ) from exc
    arch_field = reader.get_field(_GGUF_ARCH_KEY)
    if arch_field is None:
        raise ModelCapabilityError(f"{source}: GGUF has no {_GGUF_ARCH_KEY}", source=source)
    arch = arch_field.contents()
    if not isinstance(arch, str) or not arch:
        raise ModelCapabilityError(f"{source}: {_GGUF_ARCH_KEY} is not a string", source=source)
    key = arch + _GGUF_NEXTN_SUFFIX
    field = reader.get_field(key)
    depth = 0 if field is None else _check_depth(field.contents(), key=key, source=source)
    return source, arch, depth


def mtp_depth_from_gguf(path: str | os.PathLike[str]) -> int:
    """MTP (NextN) depth of a GGUF model file, in layers.

    Reads ``<arch>.nextn_predict_layers`` where ``<arch>`` is ``general.architecture``
    (llama.cpp's GGUF key, ``gguf.Keys.LLM.NEXTN_PREDICT_LAYERS``); 0 when the key is
    absent. Only the header is interpreted; tensors are memory-mapped, not loaded.

    Raises:
        ModelCapabilityError: missing or unreadable file, not GGUF, no
            ``general.architecture``, a negative or non-integer depth, or the optional
            ``gguf`` package is not installed.
    """
    return _read_gguf(path)[2]


def _load_hf_config(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any],
) -> tuple[str, Mapping[str, Any]]:
    if isinstance(path_or_dict, Mapping):
        return "<dict>", path_or_dict
    p = Path(path_or_dict)
    if p.is_dir():
        p = p / "config.json"
    source = os.fspath(p)

    def fail(line: str) -> ModelCapabilityError:
        return ModelCapabilityError(line, source=source)

    raw = read_user_bytes(p, what="HF config", fail=fail, max_bytes=SMALL_FILE_MAX_BYTES)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ModelCapabilityError(f"{source}: not valid JSON ({exc})", source=source) from exc
    if not isinstance(data, dict):
        raise ModelCapabilityError(f"{source}: HF config is not a JSON object", source=source)
    return source, data


def _hf_depth(source: str, config: Mapping[str, Any]) -> int:
    if _HF_KEY in config:
        return _check_depth(config[_HF_KEY], key=_HF_KEY, source=source)
    nested = config.get("text_config")
    if isinstance(nested, Mapping) and _HF_KEY in nested:
        return _check_depth(nested[_HF_KEY], key=f"text_config.{_HF_KEY}", source=source)
    return 0


def mtp_depth_from_hf_config(path_or_dict: str | os.PathLike[str] | Mapping[str, Any]) -> int:
    """MTP depth from a Hugging Face config, in layers.

    ``path_or_dict`` is a ``config.json`` path, a checkpoint directory holding one, or
    the already-parsed mapping. Reads ``num_nextn_predict_layers`` (DeepSeek V3/V4
    ``config.json``; also looked up in a nested ``text_config``); 0 when absent.

    Raises:
        ModelCapabilityError: unreadable file, invalid JSON, not a JSON object, or a
            depth that is not a non-negative integer.
    """
    source, config = _load_hf_config(path_or_dict)
    return _hf_depth(source, config)


def probe_model_capability(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any],
) -> ModelCapability:
    """Read a model's :class:`ModelCapability` from a GGUF file or an HF config.

    A path ending in ``.gguf`` is read as GGUF; any other path (a ``config.json`` or
    a checkpoint directory) and any mapping is read as a Hugging Face config.

    Raises:
        ModelCapabilityError: as :func:`mtp_depth_from_gguf` /
            :func:`mtp_depth_from_hf_config`.
    """
    if not isinstance(path_or_dict, Mapping) and os.fspath(path_or_dict).endswith(".gguf"):
        source, arch, depth = _read_gguf(path_or_dict)
        return ModelCapability(source=source, format="gguf", architecture=arch, mtp_depth=depth)
    source, config = _load_hf_config(path_or_dict)
    model_type = config.get("model_type")
    return ModelCapability(
        source=source,
        format="hf_config",
        architecture=model_type if isinstance(model_type, str) else None,
        mtp_depth=_hf_depth(source, config),
    )
