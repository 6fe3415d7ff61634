"""mkdocs hooks (mkdocs.yml's ``hooks:``).

- The site serves MathJax itself, copied from the django-static-mathjax package (a ``docs``
  extra), so that neither the build nor a reader of the built site needs a CDN. Only the
  CommonHTML build and its fonts are copied (about 2 MB).
- docs/ links to files beside it in the repository (``../examples/walkthrough.ipynb``), which
  GitHub shows; the site has no such files, so there such a link becomes the file's path.
"""

from __future__ import annotations

import pathlib
import re
import shutil
from typing import Any

MATHJAX_FILES = ("tex-chtml.js", "output/chtml/fonts/woff-v2")
_OUTSIDE = re.compile(r"\[([^\]]+)\]\(\.\./((?:examples|scripts|src|tests)/[^)\s]+)\)")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """A link out of docs/ becomes its text, with the file's path when the text lacks it."""

    def text(match: re.Match[str]) -> str:
        label, path = match.group(1), match.group(2)
        return label if path in label else f"{label} (`{path}` in the repository)"

    return _OUTSIDE.sub(text, markdown)


def on_post_build(config: Any, **kwargs: Any) -> None:
    import mathjax  # django-static-mathjax's package: MathJax 3's files, nothing else

    source = pathlib.Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    target = pathlib.Path(config["site_dir"]) / "mathjax"
    for name in MATHJAX_FILES:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, dirs_exist_ok=True)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, target / name)
