"""Reading HF tokenizers' ``tokenizer.json`` when it describes GPT-2's byte-level BPE.

A repository on the Hub may ship its vocabulary only as ``tokenizer.json`` (the file HF's
``tokenizers`` library saves), not as ``vocab.json`` + ``merges.txt``. That file holds the same
BPE vocabulary and merges, inside a pipeline description: normalizer -> pre-tokenizer -> model
-> post-processor, decoder, and "added tokens" matched before everything else. gpt2np's
tokenizer is GPT-2's pipeline (:mod:`gpt2np.tokenizer.bpe`), so the file is accepted only when its
pipeline is GPT-2's:

* no normalizer; the pre-tokenizer ``ByteLevel`` with ``add_prefix_space`` false and GPT-2's
  regex (``use_regex`` true); the decoder ``ByteLevel``; no post-processor, or ``ByteLevel``
  (which only moves offsets);
* the model ``BPE`` without dropout, unknown token, subword prefix or suffix, byte fallback or
  ``ignore_merges``;
* no added token but ``<|endoftext|>``, a special token.

Anything else would encode text differently from GPT-2's rules, so it is refused with a
:class:`~gpt2np.CheckpointError` saying which part differs (token ids still work).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from ..errors import CheckpointError
from .vocab import MAX_JSON_DEPTH, read_file, too_deep

__all__ = ["read_tokenizer_json"]

ENDOFTEXT = "<|endoftext|>"
#: The BPE model's options that GPT-2 leaves off -> the values that mean "off".
_BPE_OFF = {
    "dropout": (None, 0, 0.0),
    "unk_token": (None,),
    "continuing_subword_prefix": (None, ""),
    "end_of_word_suffix": (None, ""),
    "byte_fallback": (False,),
    "ignore_merges": (False,),
}


def read_tokenizer_json(path: str | pathlib.Path) -> tuple[bytes, bytes]:
    """The vocabulary and merges of ``path`` in OpenAI's two formats (``encoder.json`` and
    ``vocab.bpe`` bytes, for :func:`gpt2np.tokenizer.vocab.parse_vocabulary`), or a
    CheckpointError naming the part of the pipeline that is not GPT-2's."""
    path = pathlib.Path(path)
    data = read_file(path)  # a regular file of bounded size, or a CheckpointError
    if too_deep(data):
        raise CheckpointError(f"{path}: JSON nested more than {MAX_JSON_DEPTH} deep")
    try:
        spec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: not a valid tokenizer.json ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
        raise CheckpointError(f"{path}: not a tokenizer.json (no model object)")
    why = _not_gpt2(spec)
    if why:
        raise CheckpointError(
            f"{path} is not GPT-2's byte-level BPE ({why}): gpt2np would encode text "
            "differently, so it refuses to use it for text (token ids still work)"
        )
    model = spec["model"]
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise CheckpointError(f"{path}: its BPE model has no vocab object or merges list")
    encoder = dict(vocab)
    for token in spec.get("added_tokens") or []:  # <|endoftext|>, checked above
        encoder.setdefault(token["content"], token["id"])
    lines = []
    for i, merge in enumerate(merges):  # "a b" (older files) or ["a", "b"]
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)
                and " " not in "".join(pair)):  # fmt: skip
            raise CheckpointError(f"{path}: merge {i} is {merge!r}, not a pair of symbols")
        lines.append(" ".join(pair))
    return json.dumps(encoder).encode("utf-8"), "\n".join(lines).encode("utf-8")


def _not_gpt2(spec: dict[str, Any]) -> str:
    """What in the pipeline differs from GPT-2's, or "" if nothing does."""
    if spec.get("normalizer") is not None:
        return f"it has a normalizer, {_kind(spec['normalizer'])}"
    pre: Any = spec.get("pre_tokenizer")  # JSON: checked by _is_byte_level
    if not _is_byte_level(pre):
        return f"its pre-tokenizer is {_kind(pre)}, not ByteLevel"
    if pre.get("add_prefix_space", False) or not pre.get("use_regex", True):
        return (
            f"its ByteLevel pre-tokenizer has add_prefix_space={pre.get('add_prefix_space')}, "
            f"use_regex={pre.get('use_regex', True)}; GPT-2's has false and true"
        )
    if not _is_byte_level(spec.get("decoder")):
        return f"its decoder is {_kind(spec.get('decoder'))}, not ByteLevel"
    post = spec.get("post_processor")
    if post is not None and not _is_byte_level(post):
        return f"its post-processor {_kind(post)} adds or changes tokens"
    model = spec["model"]
    if model.get("type", "BPE") != "BPE":
        return f"its model is {model.get('type')!r}, not BPE"
    for key, off in _BPE_OFF.items():
        if model.get(key, off[0]) not in off:
            return f"its BPE model has {key}={model[key]!r}"
    for token in spec.get("added_tokens") or []:
        if not isinstance(token, dict) or token.get("content") != ENDOFTEXT:
            content = token.get("content") if isinstance(token, dict) else token
            return f"it adds the token {content!r}; gpt2np's tokenizer knows only {ENDOFTEXT}"
        if not token.get("special") or not isinstance(token.get("id"), int):
            return f"its {ENDOFTEXT} is not a special token with an id"
    return ""


def _is_byte_level(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "ByteLevel"


def _kind(part: Any) -> str:
    return repr(part.get("type")) if isinstance(part, dict) and "type" in part else repr(part)
