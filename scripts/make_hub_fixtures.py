"""Write tests/fixtures/hub/: a tiny GPT-2 repository as the Hub would serve it, and an HF cache
of it laid out by huggingface_hub itself.

    pip install torch==2.13.0 && pip install transformers tokenizers huggingface_hub
    python scripts/make_hub_fixtures.py

* ``tokenizer/``: a byte-level BPE of 300 tokens trained by HF tokenizers on the text below
  (``<|endoftext|>`` is id 0), saved by tokenizers twice: ``tokenizer.json`` (``save``) and
  ``vocab.json`` + ``merges.txt`` (``save_model``); ``ids.json``, the ids tokenizers encodes
  a few texts to. ``refused/<why>/tokenizer.json``: the same tokenizer changed through
  tokenizers' own API so that it is no longer GPT-2's byte-level scheme.
* ``tiny/``: ``GPT2LMHeadModel`` of that vocabulary with random weights, saved by
  ``save_pretrained`` (``config.json``, ``model.safetensors``, ``generation_config.json``, with
  ``max_length`` set), and ``logits.npz`` (ids and the logits transformers computes).
  ``sharded/``: the same model saved in 20 KB shards with their index.
* ``hf_cache/``: huggingface_hub's ``hf_hub_download`` of the tiny repository's files at
  ``main`` from the loopback Hub imitation of the tests (tests/helpers/hubfixture.py), into this
  cache directory: ``models--tiny-org--tiny-gpt2/{blobs,refs,snapshots}`` exactly as it lays it out.
  Its commit id is printed; tests/sources/test_hub.py builds the same repository.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

import numpy as np
import torch
from huggingface_hub import hf_hub_download
from tokenizers import ByteLevelBPETokenizer, normalizers, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hub"
sys.path.insert(0, str(ROOT / "tests"))
from hubfixture import Hub, serve_hub  # noqa: E402  (the tests' Hub imitation)

CORPUS = [
    "Alan Turing theorized that computers would one day become the most powerful machines.",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!",
    "It's 2019: GPT-2 has 1.5B parameters; we'll see what they've done, won't we?",
    "Naïve café owners in Zürich serve crème brûlée — ünïcödé everywhere. 日本語もある。",
] * 20
TEXTS = ["Hello world", "The lazy dog's box", " leading space and  two spaces", "Zürich 2019!"]
REPO = "tiny-org/tiny-gpt2"
HUB_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
             "vocab.json", "merges.txt"]  # fmt: skip


def make_tokenizer(out: pathlib.Path) -> ByteLevelBPETokenizer:
    tok = ByteLevelBPETokenizer()  # GPT-2's scheme: ByteLevel, no prefix space, no normalizer
    # its trainer starts from the 256 byte symbols (ByteLevel.alphabet()), as GPT-2's did
    tok.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1,
                            special_tokens=["<|endoftext|>"])  # fmt: skip
    assert set(ByteLevel.alphabet()) <= set(tok.get_vocab())
    out.mkdir(parents=True)
    tok.save(str(out / "tokenizer.json"))
    tok.save_model(str(out))  # vocab.json + merges.txt
    ids = {text: tok.encode(text).ids for text in TEXTS}
    (out / "ids.json").write_text(json.dumps(ids, ensure_ascii=False, indent=1))
    refused = {
        "add_prefix_space": lambda t: setattr(
            t, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)
        ),
        "normalizer": lambda t: setattr(t, "normalizer", normalizers.NFKC()),
        "added_token": lambda t: t.add_special_tokens(["<|pad|>"]),
        "metaspace": lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Metaspace()),
    }
    for why, change in refused.items():
        variant = ByteLevelBPETokenizer.from_file(str(out / "vocab.json"), str(out / "merges.txt"))
        variant.add_special_tokens(["<|endoftext|>"])
        change(variant)
        (out / "refused" / why).mkdir(parents=True)
        variant.save(str(out / "refused" / why / "tokenizer.json"))
    return tok


def make_model(tok: ByteLevelBPETokenizer) -> None:
    torch.manual_seed(0)
    eot = tok.token_to_id("<|endoftext|>")
    config = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=32, n_embd=16, n_layer=2,
                        n_head=2, bos_token_id=eot, eos_token_id=eot)  # fmt: skip
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    model.generation_config = GenerationConfig(bos_token_id=eot, eos_token_id=eot, max_length=24)
    model.save_pretrained(OUT / "tiny", safe_serialization=True)
    model.save_pretrained(OUT / "sharded", safe_serialization=True, max_shard_size="20KB")
    ids = np.array([tok.encode(TEXTS[0] + TEXTS[1]).ids])
    with torch.no_grad():
        logits = model(torch.from_numpy(ids)).logits.numpy()
    np.savez(OUT / "tiny" / "logits.npz", ids=ids, logits=logits)


def tiny_repo_files() -> dict[str, bytes]:
    files = {f: (OUT / "tiny" / f).read_bytes() for f in HUB_FILES[:3]}
    files.update({f: (OUT / "tokenizer" / f).read_bytes() for f in HUB_FILES[3:]})
    return files


def make_hf_cache() -> None:
    hub = Hub()
    hub.repo(REPO).add(tiny_repo_files(), repo=REPO)
    with serve_hub(hub) as endpoint:
        for name in HUB_FILES:
            hf_hub_download(REPO, name, cache_dir=OUT / "hf_cache", endpoint=endpoint)
    shutil.rmtree(OUT / "hf_cache" / ".locks", ignore_errors=True)  # empty lock files
    print("commit", hub.repos[REPO].refs["main"])


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    tok = make_tokenizer(OUT / "tokenizer")
    make_model(tok)
    make_hf_cache()
    for path in sorted(OUT.rglob("*")):
        print(path.relative_to(OUT), "->", path.readlink() if path.is_symlink() else "")


if __name__ == "__main__":
    main()
