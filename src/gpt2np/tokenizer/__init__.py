"""GPT-2's tokenizer: byte-level BPE with tiktoken's interface and OpenAI's algorithm.

Modules: ``bpe`` (the merge loop, short and readable, and its fast twin), ``vocab`` (reading
and cross-checking encoder.json and vocab.bpe), ``hf_json`` (HF's tokenizer.json when it
describes GPT-2's BPE), ``runs`` (BPE of a long whitespace run held as runs of one
character, for streams), ``tokenizer`` (:class:`Tokenizer`).
"""

from __future__ import annotations

from .tokenizer import (
    ENCODER_JSON_SHA256,
    VOCAB_BPE_SHA256,
    InvalidTokenError,
    StreamDecoder,
    Tokenizer,
)

__all__ = [
    "ENCODER_JSON_SHA256",
    "VOCAB_BPE_SHA256",
    "InvalidTokenError",
    "StreamDecoder",
    "Tokenizer",
]
