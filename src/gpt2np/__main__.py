"""``python -m gpt2np``: the same command line as the ``gpt2np`` script (see cli.py)."""

from .cli import main

raise SystemExit(main())
