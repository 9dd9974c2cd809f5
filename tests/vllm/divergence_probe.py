"""Probe where speculative vLLM output leaves the ``off`` text (not run by CI).

Usage (library venv, ``$DEEPSEEKBENCH_VLLM_PYTHON`` set to the vLLM venv's python)::

    python -m tests.vllm.divergence_probe MODEL_DIR [--dtype float32] [--prompts 16]
        [--method mtp|ngram] [--max-num-seqs 1] [--max-tokens 48]
        [--concurrency 1] [--attention-backend CPU_MLA]

Starts an ``off`` and a speculative server on the checkpoint (both ``--enforce-eager``
unless ``--off-compiled``; both with ``--attention-backend CPU_MLA``, and the MTP drafter
too, unless ``--attention-backend none``: see ``conftest.MLA_ATTENTION_BACKEND``),
sends the same greedy prompts to both one at a time, and prints, per prompt, whether the
texts match; for a divergence, the first differing token position and off's top-1 /
top-2 log-probability margin there (a near tie is numerical noise; a wide margin is a
wrong verification). With ``--concurrency N`` (and ``--max-num-seqs >= N``) the prompts
go to each server N at a time (verify steps batched with other sequences); ``off`` is
then also asked one at a time, and each record says whether batched ``off`` matched
its one-at-a-time text (``off_batched_match``) and whether the candidate matched
batched ``off`` (``cand_matches_off_batched``); ``match`` compares the candidate with
the one-at-a-time ``off`` text, the greedy reference. Prompts are drawn from the
generated language of ``--seed`` (use the seed the model was generated with: other
seeds give words the model does not know).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
import httpx

from deepseekbench import VllmServerSpec, vllm_servers
from tests.vllm import hf_models
from tests.vllm.conftest import MLA_ATTENTION_BACKEND


async def _complete(
    client: httpx.AsyncClient, base: str, prompt: str, max_tokens: int
) -> tuple[list[str], list[float]]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    resp = await client.post(f"{base}/chat/completions", json=body)
    resp.raise_for_status()
    content: list[dict[str, Any]] = resp.json()["choices"][0]["logprobs"]["content"]
    tokens = [c["token"] for c in content]
    margins = []
    for c in content:
        top = sorted((t["logprob"] for t in c["top_logprobs"]), reverse=True)
        margins.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    return tokens, margins


async def probe(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the probe; return one record per prompt."""
    model = Path(args.model)
    common: dict[str, Any] = {
        "served_model_name": "m", "enforce_eager": True, "dtype": args.dtype,
        "max_model_len": 512, "threads": 1, "max_num_seqs": args.max_num_seqs,
    }  # fmt: skip
    backend = None if args.attention_backend.lower() == "none" else args.attention_backend
    common["attention_backend"] = backend
    if args.method == "ngram":
        cand = VllmServerSpec.ngram("cand", model, **common)
    else:
        cand = VllmServerSpec.mtp(
            "cand", model, method=args.method, draft_attention_backend=backend, **common
        )
    off_kw = common | ({"enforce_eager": False} if args.off_compiled else {})
    specs = [VllmServerSpec.off("off", model, **off_kw), cand]
    prompts = hf_models.prompt_words(args.seed, args.prompts)
    out = []
    async with (
        vllm_servers(specs, log_dir=Path(args.logs)) as running,
        httpx.AsyncClient(timeout=300, trust_env=False) as client,
    ):
        n = args.concurrency

        async def batched(name: str) -> list[tuple[list[str], list[float]]]:
            res: list[tuple[list[str], list[float]]] = [([], [])] * len(prompts)

            async def one(k: int) -> None:
                res[k] = await _complete(
                    client, running[name].base_url, prompts[k], args.max_tokens
                )

            for start in range(0, len(prompts), n):
                async with anyio.create_task_group() as tg:
                    for k in range(start, min(start + n, len(prompts))):
                        tg.start_soon(one, k)
            return res

        cand_all = await batched("cand")
        off_batched = await batched("off") if n > 1 else None
        for i, prompt in enumerate(prompts):
            off_t, off_m = await _complete(client, running["off"].base_url, prompt, args.max_tokens)
            cand_t = cand_all[i][0]
            first = next(
                (k for k, (a, b) in enumerate(zip(off_t, cand_t, strict=False)) if a != b), None
            )
            rec: dict[str, Any] = {"prompt": i, "match": off_t == cand_t}
            if off_batched is not None:
                rec["off_batched_match"] = off_batched[i][0] == off_t
                rec["cand_matches_off_batched"] = off_batched[i][0] == cand_t
            if first is not None:
                rec |= {
                    "first_token": first,
                    "off_margin": round(off_m[first], 6),
                    "off": "".join(off_t[max(0, first - 2) : first + 3]),
                    "cand": "".join(cand_t[max(0, first - 2) : first + 3]),
                }
            rec["min_off_margin"] = round(min(off_m), 6)
            out.append(rec)
            print(json.dumps(rec), flush=True)
    return out


def main() -> None:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--method", default="mtp")
    ap.add_argument(
        "--attention-backend",
        default=MLA_ATTENTION_BACKEND,
        help="target's and MTP drafter's vLLM attention backend; 'none' = vLLM chooses",
    )
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=1, help="prompts in flight at once")
    ap.add_argument("--logs", default="vllm-probe-logs")
    ap.add_argument("--off-compiled", action="store_true", help="off without --enforce-eager")
    args = ap.parse_args()
    recs = anyio.run(probe, args)
    print(f"matched {sum(r['match'] for r in recs)}/{len(recs)}")


if __name__ == "__main__":
    main()
