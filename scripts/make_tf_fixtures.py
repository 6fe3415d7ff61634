"""Write the TensorFlow checkpoint fixtures under tests/fixtures/tf/ with TensorFlow itself.

Run with the TF venv:  /work/venv-tf/bin/python scripts/make_tf_fixtures.py

Every checkpoint is written by ``tf.compat.v1.train.Saver`` (the tool that wrote OpenAI's
release); the expected arrays are the same NumPy values, written by NumPy as ``expected.npz``,
and also read back through ``tf.train.load_checkpoint`` here as a sanity check. Fixtures:

* ``small/``   OpenAI's release layout for a tiny GPT-2 (hparams.json, checkpoint, index, one
               data shard, a tiny encoder.json + vocab.bpe); tensors named and shaped like
               OpenAI's (``model/h0/attn/c_attn/w`` [1, D, 3D]).
* ``sharded/`` the same kind of model saved with ``Saver(sharded=True)`` from variables pinned
               to two CPU devices: two data shards.
* ``many/``    thousands of small variables with long names, so the index spans several blocks.
* ``dtypes/``  float16, bfloat16, float64, int32, int64 tensors and a 300 KB float32 tensor.
* ``sliced/``  a partitioned variable, which the bundle stores as slices (not supported).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Callable

import numpy as np
import tensorflow as tf

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tf")
HPARAMS = {"n_vocab": 260, "n_ctx": 16, "n_embd": 16, "n_head": 2, "n_layer": 2}
tf1 = tf.compat.v1
MANY = 3000  # ~180 index bytes each: ~540 KB, three of TensorFlow's 256 KiB index blocks


def many_name(i: int) -> str:
    """Variable names of the ``many/`` fixture (tests rebuild them the same way)."""
    return f"v{i:05d}/" + "a_long_name_so_that_the_index_needs_several_blocks_" * 3 + "w"


def gpt2_arrays(hp: dict, seed: int) -> dict[str, np.ndarray]:
    """Random float32 weights with OpenAI's names and shapes (conv1d weights [1, n_in, n_out])."""
    return {name: make() for name, _, make in gpt2_array_makers(hp, seed)}


def gpt2_array_makers(hp: dict, seed: int) -> list[tuple[str, tuple[int, ...], Callable]]:
    """(name, shape, make) for each weight, in gpt2_arrays' order: calling the makers in that
    order gives its arrays one at a time (a 1558M model need not be in memory twice)."""
    rng = np.random.default_rng(seed)
    V, C, D = hp["n_vocab"], hp["n_ctx"], hp["n_embd"]

    def r(*shape, scale=0.02, loc=0.0):
        return shape, lambda: (loc + scale * rng.standard_normal(shape)).astype(np.float32)

    makers = {"model/wte": r(V, D), "model/wpe": r(C, D, scale=0.01)}
    for i in range(hp["n_layer"]):
        p = f"model/h{i}/"
        makers.update({
            p + "ln_1/g": r(D, scale=0.1, loc=1.0), p + "ln_1/b": r(D),
            p + "attn/c_attn/w": r(1, D, 3 * D), p + "attn/c_attn/b": r(3 * D),
            p + "attn/c_proj/w": r(1, D, D), p + "attn/c_proj/b": r(D),
            p + "ln_2/g": r(D, scale=0.1, loc=1.0), p + "ln_2/b": r(D),
            p + "mlp/c_fc/w": r(1, D, 4 * D), p + "mlp/c_fc/b": r(4 * D),
            p + "mlp/c_proj/w": r(1, 4 * D, D), p + "mlp/c_proj/b": r(D),
        })  # fmt: skip
    makers.update({"model/ln_f/g": r(D, scale=0.1, loc=1.0), "model/ln_f/b": r(D)})
    return [(name, shape, make) for name, (shape, make) in makers.items()]


def save(out, arrays, devices=None, sharded=False, dtypes=None, expected_as=None):
    """Save ``arrays`` as variables of the same names with tf.compat.v1.train.Saver."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    graph = tf.Graph()
    with graph.as_default():
        variables = []
        for i, (name, value) in enumerate(arrays.items()):
            device = devices[i % len(devices)] if devices else "/cpu:0"
            dtype = (dtypes or {}).get(name)
            with tf.device(device):
                init = tf.constant(value) if dtype is None else tf.cast(tf.constant(value), dtype)
                variables.append(tf1.Variable(init, name=name))
        saver = tf1.train.Saver(variables, sharded=sharded, save_relative_paths=True)
        config = tf1.ConfigProto(device_count={"CPU": 2})
        with tf1.Session(graph=graph, config=config) as sess:
            sess.run(tf1.global_variables_initializer())
            saver.save(sess, os.path.join(out, "model.ckpt"), write_meta_graph=False)
    expected = check(out, arrays, dtypes)
    if expected_as is not None:
        expected = expected_as(expected)
    np.savez(os.path.join(out, "expected.npz"), **expected)


def check(out: str, arrays: dict[str, np.ndarray], dtypes=None) -> dict[str, np.ndarray]:
    """Read the checkpoint back with TensorFlow's own reader, compare, return what it read.

    bfloat16 tensors are returned as TensorFlow's reader widens them to float32 (it rounds to
    nearest even when casting), so the test can compare exactly.
    """
    reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt"))
    expected = {}
    for name, value in arrays.items():
        got = reader.get_tensor(name)
        if (dtypes or {}).get(name) == tf.bfloat16:
            got = got.astype(np.float32)
            np.testing.assert_allclose(got, value, rtol=1 / 128, err_msg=name)
        else:
            np.testing.assert_array_equal(got, value, err_msg=name)
        expected[name] = np.asarray(got)
    return expected


def tiny_vocab(out: str) -> None:
    """encoder.json + vocab.bpe in GPT-2's format: 256 byte tokens, 3 merges, <|endoftext|>."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
    bs += list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_tokens = [chr(c) for _, c in sorted(zip(bs, cs))]
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    tokens = byte_tokens + ["".join(m) for m in merges] + ["<|endoftext|>"]
    assert len(tokens) == HPARAMS["n_vocab"]
    with open(os.path.join(out, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(out, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))


def main() -> None:
    tf1.disable_eager_execution()
    out = os.path.join(ROOT, "small")
    save(out, gpt2_arrays(HPARAMS, seed=1))
    with open(os.path.join(out, "hparams.json"), "w") as f:
        json.dump(HPARAMS, f, indent=2)
    tiny_vocab(out)

    out = os.path.join(ROOT, "sharded")
    save(out, gpt2_arrays(HPARAMS, seed=2), devices=["/cpu:0", "/cpu:1"], sharded=True)
    with open(os.path.join(out, "hparams.json"), "w") as f:
        json.dump(HPARAMS, f, indent=2)
    shards = sorted(p for p in os.listdir(out) if ".data-" in p)
    assert len(shards) == 2, shards

    rng = np.random.default_rng(3)
    many = {many_name(i): rng.standard_normal(2).astype(np.float32) for i in range(MANY)}
    # Expected values as one [MANY, 2] array (names follow many_name), to keep the .npz small.
    save(
        os.path.join(ROOT, "many"),
        many,
        expected_as=lambda e: {"values": np.stack(list(e.values()))},
    )

    dt = {
        "f16": rng.standard_normal((3, 5)).astype(np.float16),
        "bf16": rng.standard_normal((4, 3)).astype(np.float32),
        "f64": rng.standard_normal(7),
        "i32": rng.integers(-(2**31), 2**31, (2, 3), dtype=np.int32),
        "i64": rng.integers(-(2**62), 2**62, 5, dtype=np.int64),
        "scalar": np.float32(2.5),
        "big": rng.standard_normal((300, 256)).astype(np.float32),
    }
    save(os.path.join(ROOT, "dtypes"), dt, dtypes={"bf16": tf.bfloat16})

    out = os.path.join(ROOT, "sliced")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    graph = tf.Graph()
    with graph.as_default():
        tf1.get_variable(
            "model/wte", shape=[8, 4], partitioner=tf1.fixed_size_partitioner(2),
            initializer=tf1.random_normal_initializer(seed=4),
        )  # fmt: skip
        saver = tf1.train.Saver(save_relative_paths=True)
        with tf1.Session(graph=graph) as sess:
            sess.run(tf1.global_variables_initializer())
            saver.save(sess, os.path.join(out, "model.ckpt"), write_meta_graph=False)
    print("wrote fixtures under", os.path.normpath(ROOT), file=sys.stderr)


if __name__ == "__main__":
    main()
