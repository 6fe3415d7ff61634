"""Golden files: every traced intermediate of a forward pass in one file a port can diff against.

:func:`dump` writes a trace (see :mod:`gpt2np.golden.trace`) of a forward pass, or of one KV-cached
decode step after a prefix, as an uncompressed ``.npz``: one ``NAME.npy`` member per tensor, no
pickle, every tensor's data 64-byte aligned from the start of the file, and a JSON manifest
first. :class:`GoldenFile` reads one (or a port's ``.npz`` or directory of ``.npy`` files) a
tensor and a chunk at a time; :func:`gpt2np.compare` diffs two. docs/golden-files.md specifies
the layout so that a C, Rust, JS or GPU port can read and write it.

Modules: ``manifest`` (its keys, the weights' hash), ``npy`` (the .npy header), ``zipwrite``
(the aligned archive), ``inputs`` (rows, prefix, padding, targets), ``writer`` (:func:`dump`),
``reader`` (:class:`GoldenFile`), ``diff/`` (the comparison). The tokenizer's and the sampler's
goldens: ``tokens`` (:func:`dump_tokenizer`) and ``tokens_diff`` (:func:`compare_tokenizer`),
``sampler`` (:func:`dump_sampler`, and :data:`SUITE` of settings, :func:`dump_sampler_suite`)
and ``sampler_diff`` (:func:`compare_sampler`, :func:`compare_sampler_suite`); ``kinds`` tells
the kinds of file apart. ``check/``: ``gpt2np check-port``, which runs a port's program over a
versioned suite of all three kinds (``check.suite``) through a file protocol (``check.runner``).
"""

from __future__ import annotations

from .manifest import FORMAT, FORMAT_VERSION, MANIFEST_KEY, weights_sha256
from .reader import GoldenFile, MappingSource, Source, open_source
from .sampler import SUITE, Setting, dump_sampler, dump_sampler_suite
from .sampler_diff import compare_sampler, compare_sampler_suite
from .tokens import dump_tokenizer
from .tokens_diff import compare_tokenizer
from .writer import dump

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_KEY",
    "SUITE",
    "GoldenFile",
    "MappingSource",
    "Setting",
    "Source",
    "compare_sampler",
    "compare_sampler_suite",
    "compare_tokenizer",
    "dump",
    "dump_sampler",
    "dump_sampler_suite",
    "dump_tokenizer",
    "open_source",
    "weights_sha256",
]
