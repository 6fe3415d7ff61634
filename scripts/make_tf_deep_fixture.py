"""Write tests/fixtures/tf/deep/ with TensorFlow itself: a checkpoint whose one tensor has 65
dimensions of size 1. TensorFlow allows rank up to 254; NumPy at most 64, so a reader must say
it cannot represent the tensor (CheckpointError) rather than fail inside NumPy.

Run with the TF venv:  /work/venv-tf/bin/python scripts/make_tf_deep_fixture.py
"""

from __future__ import annotations

import os
import shutil

import tensorflow as tf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tf")
tf1 = tf.compat.v1


def main() -> None:
    out = os.path.join(OUT, "deep")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    with tf.Graph().as_default():
        tf1.get_variable("deep", initializer=tf.ones([1] * 65, tf.float32))
        saver = tf1.train.Saver()
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            saver.save(session, os.path.join(out, "model.ckpt"), write_meta_graph=False)
    with open(os.path.join(out, "checkpoint"), "w") as f:  # relative, not this machine's path
        f.write('model_checkpoint_path: "model.ckpt"\n')
    reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt"))
    shape = reader.get_variable_to_shape_map()["deep"]  # get_tensor: TF cannot make it NumPy
    assert shape == [1] * 65, shape


if __name__ == "__main__":
    main()
