"""Generate the tiny Hugging Face checkpoints the vLLM tests serve (run in the vLLM venv).

Usage (inside the virtual environment that has ``torch``, ``transformers`` and
``tokenizers``, i.e. the vLLM one)::

    python tests/vllm/hf_models.py OUT_DIR [--seed 0] [--steps N] [--families llama,deepseek]

writes, under ``OUT_DIR`` (only the families named; both by default):

* ``llama-target/`` - a ``LlamaForCausalLM`` (4 layers x 128);
* ``llama-draft/``  - a ``LlamaForCausalLM`` (1 layer x 64) with the same tokenizer;
* ``deepseek-v3/``  - a ``DeepseekV3ForCausalLM`` (2 layers: one dense, one MoE; MLA
  attention with ``kv_lora_rank=512`` and ``qk_rope_head_dim=64``, the only shape
  vLLM's CPU MLA kernel takes) plus one MTP (NextN) layer stored as
  ``model.layers.2.*``, the layout DeepSeek V3 checkpoints use and vLLM's
  ``deepseek_mtp`` method loads (``num_nextn_predict_layers = 1``);
* ``MANIFEST.json`` - seed, steps, families, final training losses, per-model
  seconds, generator version.

Nothing is downloaded. Every model is trained for a few hundred steps (one torch thread,
CPU, float32) on a generated corpus: sentences of a made-up language drawn from a
seeded Markov chain over ~200 words, so greedy text is predictable, n-gram lookup finds
repeats and the draft / MTP layer agree with their target often (acceptance well
between 0 and 1). The MTP layer is trained *through the main model's output head and
embeddings* because vLLM replaces the layer's ``shared_head.head`` with the target's
``lm_head`` when it loads it. Same seed, same files (torch's CPU float32 kernels are
deterministic with one thread). Each model seeds its own training, so a family's files
are the same whether or not the other family is generated beside it.

The tokenizer is a ``tokenizers`` WordLevel model with a Metaspace pre-tokenizer
(``\u2581word`` pieces): each word of the language is one token; anything else is
``<unk>``. The chat template renders ``<|user|> text <|assistant|>``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

# Bump when anything below changes what gets written: cached folders are keyed on it.
GENERATOR_VERSION = 1
FAMILIES = ("llama", "deepseek")  # the Llama target/draft pair; the DeepSeek-V3 model

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
SEQ_LEN = 48


def words(seed: int) -> list[str]:
    """~200 pronounceable made-up words (consonant-vowel syllables), seeded."""
    rng = random.Random(seed)
    cons, vows = "bdfgklmnprstvz", "aeiou"
    out: set[str] = set()
    while len(out) < 200:
        n = rng.choice((2, 2, 3))
        out.add("".join(rng.choice(cons) + rng.choice(vows) for _ in range(n)))
    return sorted(out)


def markov(vocab: list[str], seed: int) -> dict[str, list[tuple[str, float]]]:
    """Each word's successors: three words with probabilities 0.7 / 0.2 / 0.1."""
    rng = random.Random(seed + 1)
    return {w: list(zip(rng.sample(vocab, 3), (0.7, 0.2, 0.1), strict=True)) for w in vocab}


def corpus(vocab: list[str], seed: int, n_sentences: int) -> list[list[str]]:
    """``n_sentences`` word sequences of length ``SEQ_LEN`` drawn from the chain."""
    chain = markov(vocab, seed)
    rng = random.Random(seed + 2)
    out = []
    for _ in range(n_sentences):
        w = rng.choice(vocab)
        seq = [w]
        while len(seq) < SEQ_LEN:
            succ = chain[w]
            w = rng.choices([s for s, _ in succ], weights=[p for _, p in succ])[0]
            seq.append(w)
        out.append(seq)
    return out


def prompt_words(seed: int, n: int, length: int = 8) -> list[str]:
    """``n`` prompts of ``length`` words drawn from the chain (seed-dependent)."""
    vocab = words(seed)
    return [" ".join(s[:length]) for s in corpus(vocab, seed + 100, n)]


def build_tokenizer(vocab: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    table = {t: i for i, t in enumerate(SPECIALS)}
    for w in vocab:
        table["\u2581" + w] = len(table)
    tok = Tokenizer(models.WordLevel(vocab=table, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=SPECIALS[4:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def token_batches(tokenizer: Any, sents: list[list[str]], batch: int, seed: int) -> Any:
    import torch

    ids = [tokenizer.convert_tokens_to_ids(["\u2581" + w for w in s]) for s in sents]
    data = torch.tensor(ids, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(data), generator=gen)
        for i in range(0, len(data) - batch + 1, batch):
            yield data[perm[i : i + batch]]


def train_llama(
    tok: Any,
    sents: list[list[str]],
    *,
    hidden: int,
    layers: int,
    inter: int,
    heads: int,
    steps: int,
    seed: int,
) -> tuple[Any, float]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    loss = _train(
        model,
        token_batches(tok, sents, 16, seed),
        steps,
        lambda m, x: m(input_ids=x, labels=x).loss,
    )
    return model, loss


def _train(model: Any, batches: Any, steps: int, loss_fn: Any, lr: float = 3e-3) -> float:
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    last = float("nan")
    for _ in range(steps):
        x = next(batches)
        loss = loss_fn(model, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        last = float(loss)
    model.eval()
    return last


def _save_llama(model: Any, tok: Any, out: Path) -> None:
    model.config.torch_dtype = "float32"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def deepseek_config(tok: Any) -> Any:
    """The tiny DeepSeek-V3 config (see the module docstring for the fixed MLA shape)."""
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_shared_experts=1,
        n_routed_experts=4,
        routed_scaling_factor=1.0,
        kv_lora_rank=512,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        v_head_dim=64,
        qk_nope_head_dim=64,
        n_group=1,
        topk_group=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        num_mtp_layers=1,
    )
    cfg._attn_implementation = "sdpa"  # causal when no mask is given
    return cfg


class _Mtp:  # built lazily: torch is only importable inside the vLLM environment
    pass


def make_mtp(cfg: Any) -> Any:
    """The MTP layer: enorm, hnorm, eh_proj, one decoder block, shared_head.norm."""
    from torch import nn
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3DecoderLayer,
        DeepseekV3RMSNorm,
    )

    mtp = nn.Module()
    mtp.enorm = DeepseekV3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    mtp.hnorm = DeepseekV3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    mtp.eh_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
    mtp.block = DeepseekV3DecoderLayer(cfg, layer_idx=cfg.num_hidden_layers)
    mtp.head_norm = DeepseekV3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    for mod in mtp.modules():  # the same init as the main model's layers
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, std=cfg.initializer_range)
    for name, p in mtp.block.named_parameters():
        if "experts" in name or name.endswith("gate.weight"):
            nn.init.normal_(p, std=cfg.initializer_range)
    return mtp


def mtp_forward(main: Any, mtp: Any, x: Any) -> tuple[Any, Any]:
    """(main loss, MTP loss) on a batch ``x`` [batch, seq] of token ids.

    MTP mirrors vLLM's ``DeepSeekMultiTokenPredictorLayer``: at position ``i`` it
    takes the main model's final (post-norm) hidden state ``h_i`` and the embedding of
    token ``i+1`` (zeroed at position 0), and predicts token ``i+2`` through the main
    model's ``lm_head``.
    """
    import torch
    import torch.nn.functional as F

    out = main.model(input_ids=x)
    hidden = out.last_hidden_state
    logits = main.lm_head(hidden)
    v = logits.shape[-1]
    main_loss = F.cross_entropy(logits[:, :-1].reshape(-1, v), x[:, 1:].reshape(-1))
    n = x.shape[1] - 2
    pos = torch.arange(n).unsqueeze(0).expand(x.shape[0], n)
    emb = main.model.embed_tokens(x[:, 1 : n + 1])
    emb = torch.where(pos.unsqueeze(-1) == 0, torch.zeros_like(emb), emb)
    h = mtp.eh_proj(torch.cat([mtp.enorm(emb), mtp.hnorm(hidden[:, :n])], dim=-1))
    rope = main.model.rotary_emb(h, pos)
    h = mtp.block(h, attention_mask=None, position_ids=pos, position_embeddings=rope)
    mtp_logits = main.lm_head(mtp.head_norm(h))
    mtp_loss = F.cross_entropy(mtp_logits.reshape(-1, v), x[:, 2:].reshape(-1))
    return main_loss, mtp_loss


def _unpack_experts(sd: dict[str, Any], prefix: str, n_experts: int) -> dict[str, Any]:
    """transformers 5 packs experts as 3-D tensors; checkpoints (and vLLM) name each."""
    out: dict[str, Any] = {}
    for key, t in sd.items():
        if key.endswith("mlp.experts.gate_up_proj"):
            base = prefix + key.removesuffix("gate_up_proj")
            for e in range(n_experts):
                gate, up = t[e].chunk(2, dim=0)
                out[f"{base}{e}.gate_proj.weight"] = gate
                out[f"{base}{e}.up_proj.weight"] = up
        elif key.endswith("mlp.experts.down_proj"):
            base = prefix + key.removesuffix("down_proj")
            for e in range(n_experts):
                out[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            out[prefix + key] = t
    return out


def save_deepseek(main: Any, mtp: Any, tok: Any, out: Path) -> None:
    """Write config.json (with the keys vLLM reads), weights with the MTP layer, tokenizer."""
    from safetensors.torch import save_file

    cfg = main.config
    n = cfg.num_hidden_layers
    sd = _unpack_experts(
        {k: v for k, v in main.state_dict().items() if not k.startswith("lm_head")},
        "",
        cfg.n_routed_experts,
    )
    sd["lm_head.weight"] = main.lm_head.weight
    layer = f"model.layers.{n}."
    sd |= _unpack_experts(
        {k: v for k, v in mtp.block.state_dict().items()}, layer, cfg.n_routed_experts
    )
    sd[layer + "enorm.weight"] = mtp.enorm.weight
    sd[layer + "hnorm.weight"] = mtp.hnorm.weight
    sd[layer + "eh_proj.weight"] = mtp.eh_proj.weight
    sd[layer + "shared_head.norm.weight"] = mtp.head_norm.weight
    sd[layer + "shared_head.head.weight"] = main.lm_head.weight
    sd[layer + "embed_tokens.weight"] = main.model.embed_tokens.weight
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in sd.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    conf = cfg.to_dict()
    conf.pop("_attn_implementation", None)
    conf.pop("num_mtp_layers", None)
    conf |= {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_nextn_predict_layers": 1,
        # transformers 5 no longer writes these; vLLM needs them to load the router's
        # e_score_correction_bias (noaux_tc) with sigmoid scoring, as DeepSeek V3 does.
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(conf, indent=2, sort_keys=True, default=str))
    tok.save_pretrained(out)


def train_deepseek(
    tok: Any, sents: list[list[str]], *, steps: int, seed: int
) -> tuple[Any, Any, float, float]:
    import itertools

    import torch
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    main = DeepseekV3ForCausalLM(deepseek_config(tok))
    mtp = make_mtp(main.config)
    params = itertools.chain(main.parameters(), mtp.parameters())
    model = torch.nn.ModuleDict({"main": main, "mtp": mtp})
    losses: list[float] = [0.0, 0.0]

    def loss_fn(_: Any, x: Any) -> Any:
        a, b = mtp_forward(main, mtp, x)
        losses[:] = [float(a), float(b)]
        return a + b

    del params
    _train(model, token_batches(tok, sents, 16, seed), steps, loss_fn)
    return main, mtp, losses[0], losses[1]


def generate(
    out: Path, *, seed: int, steps: int, families: tuple[str, ...] = FAMILIES
) -> dict[str, Any]:
    """Write the checkpoints of ``families`` (of :data:`FAMILIES`) and MANIFEST.json
    under ``out``; return the manifest."""
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    vocab = words(seed)
    tok = build_tokenizer(vocab)
    sents = corpus(vocab, seed, 2000)
    manifest: dict[str, Any] = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "steps": steps,
        "families": list(families),
        "vocab_size": len(tok),
        "timings_s": {},
    }
    if "llama" in families:
        _llama_pair(out, tok, sents, manifest, seed=seed, steps=steps)
    if "deepseek" in families:
        _deepseek(out, tok, sents, manifest, seed=seed, steps=steps)
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest


def _llama_pair(
    out: Path, tok: Any, sents: list[list[str]], manifest: dict[str, Any], *, seed: int, steps: int
) -> None:
    t0 = time.monotonic()
    target, loss = train_llama(
        tok, sents, hidden=128, layers=4, inter=384, heads=4, steps=steps, seed=seed
    )
    _save_llama(target, tok, out / "llama-target")
    manifest["llama_target_loss"] = loss
    manifest["timings_s"]["llama-target"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    draft, loss = train_llama(
        tok, sents, hidden=64, layers=1, inter=128, heads=2, steps=steps, seed=seed + 1
    )
    _save_llama(draft, tok, out / "llama-draft")
    manifest["llama_draft_loss"] = loss
    manifest["timings_s"]["llama-draft"] = round(time.monotonic() - t0, 1)


def _deepseek(
    out: Path, tok: Any, sents: list[list[str]], manifest: dict[str, Any], *, seed: int, steps: int
) -> None:
    t0 = time.monotonic()
    main, mtp, main_loss, mtp_loss = train_deepseek(tok, sents, steps=steps, seed=seed + 2)
    save_deepseek(main, mtp, tok, out / "deepseek-v3")
    manifest["deepseek_loss"] = main_loss
    manifest["deepseek_mtp_loss"] = mtp_loss
    manifest["timings_s"]["deepseek-v3"] = round(time.monotonic() - t0, 1)


def main() -> None:
    """Command line: ``python hf_models.py OUT_DIR [--seed S] [--steps N] [--families F,G]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--families", default=",".join(FAMILIES), help="of: " + ", ".join(FAMILIES))
    args = ap.parse_args()
    families = tuple(args.families.split(","))
    if not families or not set(families) <= set(FAMILIES):
        ap.error(f"--families: a comma-separated subset of {', '.join(FAMILIES)}")
    manifest = generate(args.out, seed=args.seed, steps=args.steps, families=families)
    print(json.dumps(manifest, sort_keys=True))


if __name__ == "__main__":
    main()
