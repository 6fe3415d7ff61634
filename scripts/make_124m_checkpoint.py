"""Write a GPT-2-shaped checkpoint (124M, or another published size) in OpenAI's release
layout, with random weights, using TensorFlow's own Saver, for timing loads (scripts/bench.py
--ckpt DIR). 498 MB for 124M, 6.2 GB for 1558M: not committed.

    /work/venv-tf/bin/python scripts/make_124m_checkpoint.py /tmp/gpt2-124M-random
    /work/venv-tf/bin/python scripts/make_124m_checkpoint.py /tmp/gpt2-1558M-random 1558M  # 6.2 GB

The directory gets hparams.json, checkpoint, model.ckpt.index, model.ckpt.data-00000-of-00001
and the bundled encoder.json / vocab.bpe, like OpenAI's download (without model.ckpt.meta).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import tensorflow as tf

from make_tf_fixtures import gpt2_array_makers  # beside this script: OpenAI's names, shapes

tf1 = tf.compat.v1
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "gpt2np", "data")
SIZES = {  # the published shapes (Radford et al., 2019, Table 2)
    name: {"n_vocab": 50257, "n_ctx": 1024, "n_embd": D, "n_head": H, "n_layer": L}
    for name, (D, H, L) in {"124M": (768, 12, 12), "355M": (1024, 16, 24),
                            "774M": (1280, 20, 36), "1558M": (1600, 25, 48)}.items()
}  # fmt: skip


def main(out: str, hparams: dict) -> None:
    os.makedirs(out, exist_ok=True)
    makers = gpt2_array_makers(hparams, seed=0)  # gpt2_arrays' values, made one at a time
    graph = tf.Graph()
    with graph.as_default():
        # placeholders + assign: tf.constant would put 498 MB into the graph definition
        variables, assigns = [], []
        for name, shape, make in makers:
            v = tf1.get_variable(name, shape=shape, dtype=tf.float32)
            ph = tf1.placeholder(tf.float32, shape)
            variables.append(v)
            assigns.append((v.assign(ph), ph, make))
        saver = tf1.train.Saver(variables, save_relative_paths=True)
        nbytes = 0
        with tf1.Session(graph=graph) as sess:
            for op, ph, make in assigns:
                value = make()
                nbytes += value.nbytes
                sess.run(op, {ph: value})
            saver.save(sess, os.path.join(out, "model.ckpt"), write_meta_graph=False)
    with open(os.path.join(out, "hparams.json"), "w") as f:
        json.dump(hparams, f)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copyfile(os.path.join(DATA, name), os.path.join(out, name))
    print(f"wrote {out}: {nbytes} bytes of float32 weights")


if __name__ == "__main__":
    tf1.disable_eager_execution()
    size = sys.argv[2] if len(sys.argv) > 2 else "124M"
    main(sys.argv[1] if len(sys.argv) > 1 else f"/tmp/gpt2-{size}-random", SIZES[size])
