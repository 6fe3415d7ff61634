"""Where model files come from over the network, each verified before it counts.

Modules: ``http`` (one resumable, bounded, verified HTTP transfer), ``session`` (the HTTP
session under it: a deadline on each response head, credentials kept to their origin as the
client parses URLs), ``openai`` (OpenAI's
release: seven files per size, :func:`download`), ``openai_checks`` (what each of those files
must be, checked offline), ``hub`` (a Hugging Face Hub repository, pinned to a commit),
``hub_snapshots`` (the snapshots on disk: gpt2np's own and huggingface_hub's cache).
"""
