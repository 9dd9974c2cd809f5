"""Unit tests of the model capability probe (no engine needed; GGUF cases need ``gguf``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from deepseekbench import (
    DeepseekBenchError,
    ModelCapability,
    ModelCapabilityError,
    mtp_depth_from_gguf,
    mtp_depth_from_hf_config,
    probe_model_capability,
)

DEEPSEEK_V3_LIKE: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
}


def test_hf_dict_with_and_without_key() -> None:
    assert mtp_depth_from_hf_config(DEEPSEEK_V3_LIKE) == 1
    assert mtp_depth_from_hf_config({"model_type": "llama"}) == 0
    assert mtp_depth_from_hf_config({"text_config": {"num_nextn_predict_layers": 3}}) == 3


def test_hf_file_and_directory(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_bytes(orjson.dumps({**DEEPSEEK_V3_LIKE, "num_nextn_predict_layers": 2}))
    assert mtp_depth_from_hf_config(cfg) == 2
    assert mtp_depth_from_hf_config(tmp_path) == 2
    cap = probe_model_capability(tmp_path)
    assert cap == ModelCapability(
        source=str(cfg), format="hf_config", architecture="deepseek_v3", mtp_depth=2
    )
    assert cap.supports_mtp


@pytest.mark.parametrize(
    "bad",
    [{"num_nextn_predict_layers": -1}, {"num_nextn_predict_layers": "1"},
     {"num_nextn_predict_layers": True}, {"num_nextn_predict_layers": 1.5}],
)  # fmt: skip
def test_hf_bad_depth_is_typed_error(bad: dict[str, Any]) -> None:
    with pytest.raises(ModelCapabilityError) as exc:
        mtp_depth_from_hf_config(bad)
    assert isinstance(exc.value, DeepseekBenchError)
    assert exc.value.source == "<dict>"


def test_hf_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ModelCapabilityError, match="cannot read"):
        mtp_depth_from_hf_config(tmp_path / "missing.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelCapabilityError, match="not valid JSON"):
        mtp_depth_from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelCapabilityError, match="not a JSON object"):
        mtp_depth_from_hf_config(tmp_path)


def test_capability_record_is_frozen_and_validated() -> None:
    cap = ModelCapability(source="x", format="gguf", mtp_depth=0)
    assert not cap.supports_mtp
    with pytest.raises(ValidationError):
        cap.mtp_depth = 1
    with pytest.raises(ValidationError):
        ModelCapability(source="x", format="gguf", mtp_depth=-1)


def test_gguf_missing_file_is_typed_error(tmp_path: Path) -> None:
    with pytest.raises(ModelCapabilityError, match=r"GGUF file .*: no such file"):
        mtp_depth_from_gguf(tmp_path / "nope.gguf")


def _tiny_gguf(path: Path, nextn: int | None) -> Path:
    pytest.importorskip("gguf")
    from tests.engine.gguf_models import Dims, build_vocab, make_weights, write_llama_gguf

    dims = Dims(n_layer=1, n_embd=32, n_ff=64, n_head=4, n_head_kv=4, n_ctx=128)
    vocab = build_vocab()
    return write_llama_gguf(
        path,
        dims=dims,
        vocab=vocab,
        weights=make_weights(dims, vocab, seed=7),
        name="tiny",
        nextn_predict_layers=nextn,
    )


def test_gguf_with_and_without_nextn_key(tmp_path: Path) -> None:
    without = _tiny_gguf(tmp_path / "plain.gguf", None)
    with_key = _tiny_gguf(tmp_path / "mtp.gguf", 2)
    assert mtp_depth_from_gguf(without) == 0
    assert mtp_depth_from_gguf(with_key) == 2
    cap = probe_model_capability(with_key)
    assert (cap.format, cap.architecture, cap.mtp_depth) == ("gguf", "llama", 2)
    assert probe_model_capability(without).mtp_depth == 0


def test_gguf_garbage_is_typed_error(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(64))
    with pytest.raises(ModelCapabilityError, match="not a readable GGUF"):
        mtp_depth_from_gguf(bad)
