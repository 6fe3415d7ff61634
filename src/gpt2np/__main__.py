"""``python -m gpt2np``: the same command line as the ``gpt2np`` script (see cli.py)."""

from .cli import main

if __name__ == "__main__":  # importing this module (doc tools, module walkers) must not exit
    raise SystemExit(main())
