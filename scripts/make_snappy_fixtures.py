"""Write Snappy and Snappy-compressed SSTable fixtures with real tools (not gpt2np's code).

Run with:  /work/venv/bin/pip install cramjam plyvel
           /work/venv/bin/python scripts/make_snappy_fixtures.py

TensorFlow writes its bundle index uncompressed, so the Snappy paths are tested against:

* ``tests/fixtures/snappy/NAME.snappy`` — raw Snappy blocks compressed by ``cramjam`` (the Rust
  ``snap`` crate), with the original bytes as ``NAME.raw``: literals of every length encoding,
  1-, 2- and overlapping copies.
* ``tests/fixtures/leveldb/snappy.ldb`` — a table file written by LevelDB itself (through
  ``plyvel``) with Snappy compression, the same table format TensorFlow's index uses. LevelDB
  stores internal keys (user key + 8-byte sequence/type), so ``snappy.json`` lists the user
  keys and values (ASCII) in order.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import tempfile

import cramjam
import plyvel

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


def samples() -> dict[str, bytes]:
    rng = random.Random(5)
    words = [b"the ", b"model ", b"weights ", b"attention ", b"c_attn ", b"\x00\x01", b"Snappy "]
    text = b"".join(rng.choice(words) for _ in range(3000))
    return {
        "empty": b"",
        "random": bytes(rng.getrandbits(8) for _ in range(5000)),  # long literals
        "text": text,  # many short copies with 1- and 2-byte offsets
        "runs": b"a" * 1000 + b"ab" * 700 + b"abc" * 500 + b"\x00" * 3000,  # overlapping copies
    }


def main() -> None:
    out = os.path.join(ROOT, "snappy")
    os.makedirs(out, exist_ok=True)
    for name, data in samples().items():
        compressed = bytes(cramjam.snappy.compress_raw(data))
        assert bytes(cramjam.snappy.decompress_raw(compressed)) == data
        with open(os.path.join(out, name + ".raw"), "wb") as f:
            f.write(data)
        with open(os.path.join(out, name + ".snappy"), "wb") as f:
            f.write(compressed)

    out = os.path.join(ROOT, "leveldb")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(6)
    items = {f"key/{i:05d}/{'pad' * (i % 7)}".encode(): f"value {i} ".encode() * rng.randint(1, 9)
             for i in range(1500)}  # fmt: skip
    tmp = tempfile.mkdtemp()
    try:
        db = plyvel.DB(tmp, create_if_missing=True, compression="snappy", block_size=4096)
        for key, value in items.items():
            db.put(key, value)
        db.compact_range()  # flush the memtable into a sorted table file
        db.close()
        tables = glob.glob(os.path.join(tmp, "*.ldb"))
        assert len(tables) == 1, tables
        shutil.copy(tables[0], os.path.join(out, "snappy.ldb"))
    finally:
        shutil.rmtree(tmp)
    with open(os.path.join(out, "snappy.json"), "w") as f:
        json.dump([[k.decode(), v.decode()] for k, v in sorted(items.items())], f)


if __name__ == "__main__":
    main()
