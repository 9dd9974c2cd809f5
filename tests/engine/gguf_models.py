"""Generate small deterministic ``llama``-architecture GGUF models with the ``gguf`` package.

Nothing is downloaded and no model file is committed: :func:`ensure_models` writes a
target (8 layers x 512 wide by default, slow enough to time on a 2-core CPU at roughly
200 tokens/s) and a 1-layer draft into a cache folder. Both share one tokenizer (an SPM
vocabulary: ``<unk>``, ``<s>``, ``</s>``, the 256 byte tokens ``<0x00>``..``<0xFF>``
and English word pieces, with a chat template). The draft *is* the target's embeddings,
first block, output norm and output head; the target's later blocks add a damped
residual (``late_scale``), so the draft often predicts the target's greedy token and
acceptance is meaningful rather than zero or one.

Weights come from ``numpy.random.default_rng(seed)``: the same seed gives byte-identical
files. Output rows of control and byte tokens are pushed far negative so greedy
decoding never ends early on ``</s>`` nor emits stray bytes.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Bump when anything below changes what gets written: cached files are keyed on it.
GENERATOR_VERSION = 4

_WORDS_TEXT = (
    "the of and to in is was for that on as with by he at from his an were are which "
    "this be or had it not but also have one new first all after who they their been "
    "has her two other when there she time into more school only over during its most "
    "would some may many city world year under where three between such both state "
    "later these war film made about team through part known years used well before "
    "since while second age being area could then very found each any work life like "
    "people music game water light river house small great long south north east west "
    "center power model token draft verify accept speed quality test result number "
    "value order point line field name place group form system story book road stone "
    "green blue red white black gold silver cloud rain wind fire earth star moon sun "
    "tree leaf seed root flower garden bird fish horse dog cat bread salt milk tea"
)
_WORDS = _WORDS_TEXT.split()
_SINGLES = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?'-()\n")
_SPACE = "\u2581"  # SentencePiece's word-boundary marker

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}"
)


@dataclass(frozen=True)
class Dims:
    """Model shape: layers, width (n_embd), FFN width, heads, KV heads, context (tokens)."""

    n_layer: int = 8
    n_embd: int = 512
    n_ff: int = 1024
    n_head: int = 8
    n_head_kv: int = 8
    n_ctx: int = 4096


@dataclass(frozen=True)
class Vocab:
    """An SPM vocabulary: token texts, merge scores and token types (gguf.TokenType)."""

    tokens: list[str]
    scores: list[float]
    types: list[int]

    @property
    def size(self) -> int:
        """Number of tokens."""
        return len(self.tokens)


@dataclass(frozen=True)
class EngineModels:
    """Paths of the generated models (GGUF files)."""

    target: Path
    draft: Path
    target_with_nextn: Path


def build_vocab() -> Vocab:
    """The shared SPM vocabulary (deterministic, about 1,000 tokens)."""
    import gguf

    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [
        int(gguf.TokenType.UNKNOWN),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
    ]
    scores: list[float] = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(int(gguf.TokenType.BYTE))
        scores.append(0.0)
    seen = set(tokens)

    def add(piece: str, score: float) -> None:
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(int(gguf.TokenType.NORMAL))
            scores.append(score)

    add(_SPACE, -1.0)
    for ch in _SINGLES:
        add(ch, -1.0)
    # Every prefix of every "▁word", so SPM's pairwise merges can reach the whole word;
    # longer pieces score higher, so they win the merges.
    for rank, word in enumerate(_WORDS):
        piece = _SPACE + word
        for end in range(2, len(piece) + 1):
            add(piece[:end], float(end) - rank * 1e-3)
    return Vocab(tokens=tokens, scores=scores, types=types)


def _f16(a: Any) -> Any:
    return np.ascontiguousarray(a, dtype=np.float16)


def _f32(a: Any) -> Any:
    return np.ascontiguousarray(a, dtype=np.float32)


def make_weights(
    dims: Dims, vocab: Vocab, *, seed: int, late_scale: float = 0.1, f16: bool = False
) -> dict[str, Any]:
    """Deterministic llama weights keyed by GGUF tensor name (numpy arrays, row-major).

    numpy shapes are (rows, cols) = ggml's ne reversed, e.g. ``token_embd.weight`` is
    (n_vocab, n_embd). Blocks after the first have their output projections scaled by
    ``late_scale`` so that a draft made of block 0 alone tracks the target.

    Matrices are float32 unless ``f16``: llama.cpp rounds activations to the weight
    type's dot-product type, and with float16 the tiny accumulation-order differences
    between one-token decoding and batched verification get amplified into occasional
    greedy flips, so exact draft/verify equality would not hold.
    """
    rng = np.random.default_rng(seed)
    mtype = _f16 if f16 else _f32
    d, f, v = dims.n_embd, dims.n_ff, vocab.size
    kv = dims.n_embd // dims.n_head * dims.n_head_kv

    def mat(rows: int, cols: int, scale: float = 1.0) -> Any:
        return rng.standard_normal((rows, cols), dtype=np.float32) * (scale / np.sqrt(cols))

    w: dict[str, Any] = {}
    w["token_embd.weight"] = mtype(rng.standard_normal((v, d), dtype=np.float32))
    for i in range(dims.n_layer):
        s = 1.0 if i == 0 else late_scale
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = _f32(np.ones(d))
        w[p + "attn_q.weight"] = mtype(mat(d, d))
        w[p + "attn_k.weight"] = mtype(mat(kv, d))
        w[p + "attn_v.weight"] = mtype(mat(kv, d))
        w[p + "attn_output.weight"] = mtype(mat(d, d, s))
        w[p + "ffn_norm.weight"] = _f32(np.ones(d))
        w[p + "ffn_gate.weight"] = mtype(mat(f, d))
        w[p + "ffn_up.weight"] = mtype(mat(f, d))
        w[p + "ffn_down.weight"] = mtype(mat(d, f, s))
    w["output_norm.weight"] = _f32(np.ones(d))
    out = mat(v, d, 4.0)
    # Never pick <unk>, <s>, </s> or a byte token greedily: a zero output row gives logit 0,
    # far below the maximum of ~700 normal logits of standard deviation ~4.
    special = [i for i, t in enumerate(vocab.types) if t != 1]
    out[special, :] = 0.0
    w["output.weight"] = mtype(out)
    return w


def write_llama_gguf(
    path: Path,
    *,
    dims: Dims,
    vocab: Vocab,
    weights: dict[str, Any],
    name: str,
    nextn_predict_layers: int | None = None,
) -> Path:
    """Write one ``llama``-architecture GGUF atomically (temp file, then rename).

    ``nextn_predict_layers`` adds the ``llama.nextn_predict_layers`` key (layers) used by
    the capability probe; ``None`` leaves it out. Returns ``path``.
    """
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    try:
        writer.add_name(name)
        writer.add_context_length(dims.n_ctx)
        writer.add_embedding_length(dims.n_embd)
        writer.add_block_count(dims.n_layer)
        writer.add_feed_forward_length(dims.n_ff)
        writer.add_head_count(dims.n_head)
        writer.add_head_count_kv(dims.n_head_kv)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_rope_dimension_count(dims.n_embd // dims.n_head)
        writer.add_rope_freq_base(10000.0)
        writer.add_file_type(
            gguf.LlamaFileType.MOSTLY_F16
            if weights["output.weight"].dtype == np.float16
            else gguf.LlamaFileType.ALL_F32
        )
        writer.add_vocab_size(vocab.size)
        if nextn_predict_layers is not None:
            writer.add_nextn_predict_layers(nextn_predict_layers)
        writer.add_tokenizer_model("llama")
        writer.add_token_list(vocab.tokens)
        writer.add_token_scores(vocab.scores)
        writer.add_token_types(vocab.types)
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        writer.add_add_space_prefix(True)
        writer.add_chat_template(CHAT_TEMPLATE)
        for tensor_name, array in weights.items():
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, path)
    return path


def draft_weights(target: dict[str, Any]) -> dict[str, Any]:
    """The draft: the target's embeddings, block 0, output norm and output head."""
    return {k: v for k, v in target.items() if not k.startswith("blk.") or k.startswith("blk.0.")}


def ensure_models(
    cache_dir: Path,
    *,
    seed: int = 1234,
    dims: Dims | None = None,
    late_scale: float = 0.1,
    f16: bool = False,
) -> EngineModels:
    """Write (or reuse from ``cache_dir``) the target, the draft, and a target copy that
    declares ``llama.nextn_predict_layers = 1``.

    File names carry a hash of (generator version, seed, dims, late_scale, f16), so a change
    regenerates instead of reusing a stale file. Takes a few seconds on first call.
    """
    dims = dims or Dims()
    key = hashlib.sha256(
        repr((GENERATOR_VERSION, seed, dims, late_scale, f16)).encode()
    ).hexdigest()[:12]
    out = EngineModels(
        target=cache_dir / f"target-{key}.gguf",
        draft=cache_dir / f"draft-{key}.gguf",
        target_with_nextn=cache_dir / f"target-nextn1-{key}.gguf",
    )
    if out.target.is_file() and out.draft.is_file() and out.target_with_nextn.is_file():
        return out
    vocab = build_vocab()
    weights = make_weights(dims, vocab, seed=seed, late_scale=late_scale, f16=f16)
    write_llama_gguf(out.target, dims=dims, vocab=vocab, weights=weights, name="dsb-target")
    write_llama_gguf(
        out.target_with_nextn,
        dims=dims,
        vocab=vocab,
        weights=weights,
        name="dsb-target-nextn",
        nextn_predict_layers=1,
    )
    draft_dims = Dims(
        n_layer=1,
        n_embd=dims.n_embd,
        n_ff=dims.n_ff,
        n_head=dims.n_head,
        n_head_kv=dims.n_head_kv,
        n_ctx=dims.n_ctx,
    )
    write_llama_gguf(
        out.draft, dims=draft_dims, vocab=vocab, weights=draft_weights(weights), name="dsb-draft"
    )
    return out
