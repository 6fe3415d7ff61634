"""Scoring a corpus on a Dask cluster: a ``dask.bag`` of lines in, a bag of the records
``gpt2np score-corpus`` writes out. Needs the extra: ``pip install "gpt2np[dask]"``.

>>> import dask.bag as db, json
>>> from dask.distributed import Client
>>> from functools import partial
>>> from gpt2np.scoring import score_bag
>>> client = Client("tcp://scheduler:8786")
>>> lines = db.read_text("/shared/corpus.jsonl", blocksize="8MiB")
>>> records = score_bag(lines, partial(gpt2np.load, "/shared/models/124M"))
>>> records.map(json.dumps).to_textfiles("/shared/scores/*.jsonl")

The tasks carry the loader (a function and a path: a few hundred bytes), never the model: each
worker process calls the loader the first time one of its tasks needs the model, and keeps the
model for the tasks after (:func:`gpt2np.scoring.records.model_for`, a cache per process keyed
by the pickled loader). The path must therefore name the same files on every worker (a shared
file system, or the same directory on each machine), and a published name ("124M") is fetched
into each machine's ``GPT2NP_HOME`` once.

Lines are numbered from 1 across the bag's partitions in order: a file's lines for
``read_text`` of one file, one file after another for several. Partition i's numbers need the
lengths of partitions 0 … i-1, a chain of small tasks; a partition is scored as soon as they are
known, so the corpus is never held in memory whole. A partition is scored a chunk at a time as
``score-corpus`` scores its input (:func:`gpt2np.scoring.records.chunks`), so the records equal
``score-corpus``'s to float32 rounding (the chunks start at partition boundaries, which may
batch documents differently).

A worker that dies takes its tasks with it and Dask runs them again elsewhere (its own retry
policy); there is no resuming of a half-done run: write the bag to many files (one per
partition) and score again only the partitions whose files are missing, if that matters.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Optional

from .records import Loader, Settings, chunks, model_for, parse_line, score_chunk

if TYPE_CHECKING:
    import dask.bag

__all__ = ["score_bag"]


def score_bag(
    lines: dask.bag.Bag,
    loader: Loader,
    *,
    format: str = "jsonl",
    field: str = "text",
    id_field: Optional[str] = "id",
    stride: Optional[int] = None,
    max_len: Optional[int] = None,
    batch_size: Optional[int] = None,
) -> dask.bag.Bag:
    """A bag of the records of ``lines`` (a bag of str, or bytes, one line of the corpus each,
    its "\\n" optional; with ``format="text"``, each a document's text), in order, as
    :func:`gpt2np.scoring.score_corpus` writes them; lazy, like any bag. ``loader``: a
    picklable zero-argument callable that returns the model, such as
    ``functools.partial(gpt2np.load, path)``. The other arguments as for score_corpus."""
    import dask
    import dask.bag

    if not callable(loader):
        raise TypeError(
            "score_bag needs a loader each worker calls once, such as "
            f"functools.partial(gpt2np.load, path), not {type(loader).__name__}"
        )
    settings = Settings(format, field, id_field, stride, max_len, batch_size)  # checked here
    parts = lines.to_delayed()
    scored = []
    first: Any = 1
    for part in parts:
        scored.append(dask.delayed(_score_partition)(part, first, loader, settings))
        first = dask.delayed(operator.add)(first, dask.delayed(len)(part))
    bag: dask.bag.Bag = dask.bag.from_delayed(scored)
    return bag


def _score_partition(
    lines: list[Any], first: int, loader: Loader, settings: Settings
) -> list[dict[str, Any]]:
    """The records of one partition, whose first line is line ``first`` of the corpus."""
    model = model_for(loader)
    settings = settings.resolved(model.hparams.n_ctx)
    docs = (parse_line(first + i, line, settings) for i, line in enumerate(lines))
    return [record for chunk in chunks(docs) for record in score_chunk(model, chunk, settings)]
