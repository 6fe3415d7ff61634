"""What every layer may use and nothing of gpt2np's maths needs: where the files live
(``paths``, with the one atomic-write helper), bounded reads of small files (``bounded_read``),
the check of a size taken from an input (``sizes``) and the ``progress=`` convention
(``progress``). Part of the foundation layer, with ``hparams``, ``params`` and ``errors`` at
the top of the package."""
