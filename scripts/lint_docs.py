"""The documentation checks CI runs beside ruff and mypy (.ci/run, and a pre-commit hook): the
wording and the shape of README.md and CHANGELOG.md, which are not behaviour and so not tests.

    python scripts/lint_docs.py        # exit 1, one line per finding, when one fails

- README.md's test command (its first code block) is the line .ci/run runs, exactly;
- README.md stays at most MAX_README_LINES lines (details go to docs/);
- CHANGELOG.md's first section is "Unreleased" or the current version.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEST_COMMAND = 'pip install -e ".[test]" && pytest'
MAX_README_LINES = 360


def findings() -> list[str]:
    found = []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```", 2)[1] if readme.count("```") >= 2 else ""
    if f"\n{TEST_COMMAND}\n" not in first_block:
        found.append(f"README.md: the first code block lacks the test command {TEST_COMMAND!r}")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    if not any(line == TEST_COMMAND or line.startswith(TEST_COMMAND + " ") for line in ci):
        found.append(f".ci/run does not run README.md's test command {TEST_COMMAND!r}")
    n = readme.count("\n")
    if n > MAX_README_LINES:
        found.append(f"README.md has {n} lines, over {MAX_README_LINES}: move details to docs/")
    version = re.search(r'__version__ = "([^"]+)"', (ROOT / "src/gpt2np/_version.py").read_text())
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = [line for line in changelog.splitlines() if line.startswith("## ")]
    wanted = ("## [Unreleased]", f"## [{version[1] if version else '?'}]")
    if not sections or sections[0] not in wanted:
        found.append(f"CHANGELOG.md: the first section is not one of {wanted}")
    return found


def main() -> int:
    problems = findings()
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
