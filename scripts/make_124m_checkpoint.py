"""Write a 124M-shaped checkpoint in OpenAI's release layout, with random weights, using
TensorFlow's own Saver, for timing loads (scripts/bench.py --ckpt DIR). 498 MB: not committed.

    /work/venv-tf/bin/python scripts/make_124m_checkpoint.py /tmp/gpt2-124M-random

The directory gets hparams.json, checkpoint, model.ckpt.index, model.ckpt.data-00000-of-00001
and the bundled encoder.json / vocab.bpe, like OpenAI's download (without model.ckpt.meta).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import tensorflow as tf

from make_tf_fixtures import gpt2_arrays  # beside this script: OpenAI's names and shapes

tf1 = tf.compat.v1
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "gpt2np", "data")
HPARAMS = {"n_vocab": 50257, "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12}


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    arrays = gpt2_arrays(HPARAMS, seed=0)
    graph = tf.Graph()
    with graph.as_default():
        # placeholders + assign: tf.constant would put 498 MB into the graph definition
        variables, assigns = [], []
        for name, value in arrays.items():
            v = tf1.get_variable(name, shape=value.shape, dtype=tf.float32)
            ph = tf1.placeholder(tf.float32, value.shape)
            variables.append(v)
            assigns.append((v.assign(ph), ph, value))
        saver = tf1.train.Saver(variables, save_relative_paths=True)
        with tf1.Session(graph=graph) as sess:
            for op, ph, value in assigns:
                sess.run(op, {ph: value})
            saver.save(sess, os.path.join(out, "model.ckpt"), write_meta_graph=False)
    with open(os.path.join(out, "hparams.json"), "w") as f:
        json.dump(HPARAMS, f)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copyfile(os.path.join(DATA, name), os.path.join(out, name))
    print(f"wrote {out}: {sum(a.nbytes for a in arrays.values())} bytes of float32 weights")


if __name__ == "__main__":
    tf1.disable_eager_execution()
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpt2-124M-random")
