"""A streamed request built from kept parts is the request ``build_request`` builds."""

from __future__ import annotations

import httpx
import pytest

from deepseekbench._measure._prepared import build_post, parsed_url

URL = "http://127.0.0.1:8000/v1/chat/completions"
BODY = b'{"model":"m","stream":true}'


def _same(a: httpx.Request, b: httpx.Request) -> None:
    assert (a.method, a.url, a.headers.raw, a.content) == (
        b.method,
        b.url,
        b.headers.raw,
        b.content,
    )
    assert a.extensions["timeout"] == b.extensions["timeout"]


@pytest.mark.parametrize("connect_s", [None, 10.0])
@pytest.mark.parametrize("route_headers", [{}, {"x-extra": "1", "user-agent": "ours"}])
def test_the_kept_parts_build_what_build_request_builds(
    connect_s: float | None, route_headers: dict[str, str]
) -> None:
    client = httpx.AsyncClient(headers={"x-client": "c"})
    want = client.build_request(
        "POST",
        URL,
        content=BODY,
        headers=route_headers,
        timeout=httpx.Timeout(None, connect=connect_s),
    )
    for _ in range(2):  # the first builds the kept parts, the second reuses them
        _same(build_post(client, parsed_url(URL), route_headers, BODY, connect_s), want)


def test_a_client_whose_headers_change_gets_them() -> None:
    client = httpx.AsyncClient()
    build_post(client, parsed_url(URL), {}, BODY, None)
    client.headers["x-late"] = "yes"
    assert build_post(client, parsed_url(URL), {}, BODY, None).headers["x-late"] == "yes"


def test_cookies_and_params_still_merge() -> None:
    client = httpx.AsyncClient(cookies={"s": "1"}, params={"q": "2"})
    got = build_post(client, parsed_url(URL), {}, BODY, None)
    assert got.headers["cookie"] == "s=1" and got.url.params["q"] == "2"
