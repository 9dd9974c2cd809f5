"""ChatRequest validation and EngineRoute body building per dialect."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from deepseekbench import ChatRequest, Dialect, EngineRoute, ReasoningMode, coerce_request

MSG = ({"role": "user", "content": "hi"},)


@pytest.mark.parametrize(
    "extra",
    [
        {"speculative_config": {"method": "mtp"}},
        {"num_speculative_tokens": 3},
        {"return_meta_info": True},
        {"n_draft": 4},
        {"spec_steps": 2},
        {"Speculative_Decoding": True},
        {"nested": {"ok": 1, "speculative_num_steps": 2}},
    ],
)
def test_request_refuses_speculative_settings(extra: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="EngineRoute"):
        ChatRequest(messages=MSG, extra_body=extra)
    with pytest.raises(ValidationError, match="EngineRoute"):
        coerce_request({"messages": list(MSG), **extra})


def test_request_validation_and_dict_coercion() -> None:
    with pytest.raises(ValidationError):
        ChatRequest(messages=())
    with pytest.raises(ValidationError):
        ChatRequest(messages=({"content": "no role"},))
    with pytest.raises(ValidationError):
        ChatRequest(messages=MSG, temperature=3.0)
    with pytest.raises(ValidationError):
        ChatRequest(messages=MSG, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="reasoning_mode"):
        coerce_request({"messages": list(MSG), "chat_template_kwargs": {"thinking": True}})
    with pytest.raises(TypeError):
        coerce_request(["not", "a", "dict"])  # type: ignore[arg-type]
    r = coerce_request(
        {
            "model": "ignored",
            "stream": False,
            "messages": list(MSG),
            "max_completion_tokens": 7,
            "stop": "END",
            "logprobs": True,
            "reasoning_mode": "think_high",
        }
    )
    assert r.max_tokens == 7 and r.stop == ("END",) and r.extra_body == {"logprobs": True}
    assert r.reasoning_mode is ReasoningMode.think_high
    body = r.body_fields()
    assert body["logprobs"] is True and "model" not in body and "stream" not in body


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("max_token", "'max_tokens'"), ("temprature", "'temperature'"), ("top_pp", "'top_p'")],
)
def test_dict_typo_is_refused_with_suggestion(key: str, suggestion: str) -> None:
    with pytest.raises(ValidationError) as info:
        coerce_request({"messages": list(MSG), key: 5})
    (error,) = info.value.errors()
    assert error["loc"] == (key,) and error["type"] == "unknown_request_field"
    assert f"did you mean {suggestion}" in error["msg"] and "extra_body" in error["msg"]


def test_dict_standard_and_explicit_custom_fields_pass_through() -> None:
    r = coerce_request(
        {
            "messages": list(MSG),
            "max_tokens": 5,
            "top_k": 20,
            "presence_penalty": 0.5,
            "tools": [],
            "extra_body": {"my_engine_flag": True},
        }
    )
    assert r.max_tokens == 5
    assert r.extra_body == {
        "my_engine_flag": True,
        "top_k": 20,
        "presence_penalty": 0.5,
        "tools": [],
    }
    with pytest.raises(ValidationError, match="unknown request field 'zzz_custom'"):
        coerce_request({"messages": list(MSG), "zzz_custom": 1})
    # ChatRequest(extra_body=...) is the explicit route for custom fields.
    custom = ChatRequest(messages=MSG, max_tokens=5, extra_body={"zzz_custom": 1})
    assert custom.body_fields()["zzz_custom"] == 1


@pytest.mark.parametrize(
    ("dialect", "mode", "expected"),
    [
        (Dialect.vllm, ReasoningMode.non_think, {"chat_template_kwargs": {"thinking": False}}),
        (
            Dialect.vllm,
            ReasoningMode.think_max,
            {"chat_template_kwargs": {"thinking": True, "reasoning_effort": "max"}},
        ),
        (
            Dialect.sglang,
            ReasoningMode.think_high,
            {"chat_template_kwargs": {"thinking": True, "reasoning_effort": "high"}},
        ),
        (
            Dialect.deepseek,
            ReasoningMode.think_max,
            {"thinking": {"type": "enabled"}, "reasoning_effort": "max"},
        ),
        (Dialect.deepseek, ReasoningMode.non_think, {"thinking": {"type": "disabled"}}),
        (
            Dialect.llamacpp,
            ReasoningMode.think_high,
            {
                "chat_template_kwargs": {"thinking": True, "reasoning_effort": "high"},
                "reasoning_format": "deepseek",
            },
        ),
        # requests/03: hosts refuse reasoning_effort "none"; the host default applies
        (Dialect.openai, ReasoningMode.non_think, {}),
        (Dialect.openai, ReasoningMode.think_max, {"reasoning_effort": "max"}),
        (Dialect.openai, ReasoningMode.think_high, {"reasoning_effort": "high"}),
    ],
)
def test_reasoning_controls_in_body(
    dialect: Dialect, mode: ReasoningMode, expected: dict[str, Any]
) -> None:
    route = EngineRoute(base_url="http://127.0.0.1:8000/v1/", model="m", dialect=dialect)
    body = route.build_body(ChatRequest(messages=MSG, reasoning_mode=mode))
    for key, value in expected.items():
        assert body[key] == value
    for key in {"chat_template_kwargs", "thinking", "reasoning_effort", "reasoning_format"} - set(
        expected
    ):
        assert key not in body
    assert body["stream"] is True and body["stream_options"]["include_usage"] is True
    # streamed requests never carry return_meta_info (current SGLang answers 400)
    assert "return_meta_info" not in body
    sglang_like = dialect in (Dialect.sglang, Dialect.auto)
    assert ("return_spec_tokens_details" in body) == sglang_like
    assert route.chat_url == "http://127.0.0.1:8000/v1/chat/completions"
    assert route.metrics_url == "http://127.0.0.1:8000/metrics"


def test_route_extras_merge_and_cannot_unset_usage() -> None:
    route = EngineRoute(
        base_url="http://127.0.0.1:8000/v1",
        model="m",
        dialect=Dialect.vllm,
        continuous_usage=True,
        request_extras={
            "chat_template_kwargs": {"extra_flag": 1},
            "stream_options": {"include_usage": False},
            "num_speculative_tokens": 2,
        },
    )
    body = route.build_body(ChatRequest(messages=MSG))
    assert body["chat_template_kwargs"] == {"thinking": False, "extra_flag": 1}
    assert body["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}
    assert body["num_speculative_tokens"] == 2
    with pytest.raises(ValidationError):
        EngineRoute(base_url="http://127.0.0.1:1/v1", model="m", request_extras={"stream": False})


def test_route_secrets_never_shown() -> None:
    secret = "sk-route-SECRET-9"
    route = EngineRoute(base_url="https://api.example.com/v1", model="m", api_key=SecretStr(secret))
    assert secret not in repr(route) and secret not in str(route.model_dump())
    assert secret not in route.model_dump_json() and route.has_api_key
    assert route.request_headers()["authorization"] == f"Bearer {secret}"
    with pytest.raises(ValidationError):
        EngineRoute(base_url="http://127.0.0.1:1/v1", model="m", headers={"Authorization": "x"})
    with pytest.raises(ValidationError):
        EngineRoute(base_url="ftp://127.0.0.1/v1", model="m")
    with pytest.raises(ValidationError):
        EngineRoute(base_url="http://127.0.0.1/v1", model="m", dialect="tgi")  # type: ignore[arg-type]


def test_a_route_holds_its_dialects_adapter() -> None:
    """The adapter is looked up once per route, is not part of its data, and a copy
    with another dialect looks again."""
    from deepseekbench import dialect_for

    route = EngineRoute(base_url="http://127.0.0.1:8000/v1", model="m", dialect="sglang")
    assert route.adapter is dialect_for("sglang") and route.adapter is route.adapter
    assert "adapter" not in route.model_dump() and route == route.model_copy()
    assert route.model_copy(update={"dialect": Dialect.vllm}).adapter is dialect_for("vllm")
