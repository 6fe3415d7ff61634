"""Scoring a corpus on a Dask cluster (gpt2np.scoring.score_bag): a LocalCluster of two worker
processes scores a few hundred documents, read with dask.bag.read_text in several partitions,
and gives the records of ``gpt2np score-corpus --jobs 1``; a bag of texts (format="text")
gives those of its documents; each worker loads the model once.

The tier of its own (marker ``dask``, run with ``pytest -m dask``); it needs the extra
``pip install -e ".[dask]"`` and is skipped, saying so, without it."""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

import gpt2np
from gpt2np.scoring import records, score_bag
from tests.helpers.corpus import (
    BAD_LINES,
    assert_same_records,
    corpus_lines,
    read_records,
    save_byte_model,
    write_lines,
)

pytestmark = pytest.mark.dask


@pytest.fixture(scope="module")
def dask() -> tuple[Any, Any]:
    """(dask.bag, distributed), imported when a test of this tier runs (not when the default
    tier collects this file), or the test is skipped with the reason."""
    why = "is not installed: pip install -e '.[dask]' (or gpt2np[dask])"
    bag = pytest.importorskip("dask.bag", reason=f"dask {why}")
    return bag, pytest.importorskip("distributed", reason=f"distributed {why}")


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """(model directory, corpus): 300 documents and every bad line."""
    tmp = tmp_path_factory.mktemp("dask")
    lines = corpus_lines(300, seed=5)
    for i, bad in enumerate(BAD_LINES):
        lines.insert(17 * i + 3, bad)
    return save_byte_model(tmp / "byte"), write_lines(tmp / "corpus.jsonl", lines)


def score_corpus_jobs_1(model_dir: pathlib.Path, corpus: pathlib.Path) -> list[dict]:
    out = corpus.with_name("jobs1.jsonl")
    env = dict(os.environ, GPT2NP_HOME=str(corpus.parent / "home"))
    command = ["score-corpus", str(corpus), "--out", str(out), "--model", str(model_dir), "-q"]
    subprocess.run([sys.executable, "-m", "gpt2np", *command], env=env, check=True, timeout=300)
    return read_records(out)


def test_a_two_worker_cluster_gives_the_records_of_score_corpus(dask, setup, monkeypatch):
    dask_bag, distributed = dask
    model_dir, corpus = setup
    expected = score_corpus_jobs_1(model_dir, corpus)
    monkeypatch.setenv("GPT2NP_HOME", str(corpus.parent / "home"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers' BLAS: two processes, two cores
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with cluster, distributed.Client(cluster) as client:
        lines = dask_bag.read_text(str(corpus), blocksize=4096)
        assert lines.npartitions >= 4  # line numbers run across partitions
        loader = functools.partial(gpt2np.load, str(model_dir))
        got = score_bag(lines, loader).compute()
        loads = client.run(lambda: records.loads)  # in each worker process
    assert_same_records(got, expected)
    assert sorted(loads.values()) == [1, 1], loads  # both worked, each loaded the model once
