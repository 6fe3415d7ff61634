"""The HTML tables notebooks show for gpt2np's results (``_repr_html_``): one small, escaped
table, so that Jupyter shows a few rows instead of long array dumps."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

__all__ = ["MAX_ROWS", "table"]

#: Rows shown before "… N more".
MAX_ROWS = 20


def table(
    caption: str,
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    n_rows: int,
    max_rows: int = MAX_ROWS,
) -> str:
    """An HTML table: ``caption``, the ``header`` row, then the first ``max_rows`` of the
    ``n_rows`` rows (their cells escaped), and a last row "… N more" when some are left out."""
    out = [f"<table><caption>{html.escape(caption)}</caption>"]
    out.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
    for i, row in enumerate(rows):
        if i == max_rows:
            break
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    if n_rows > max_rows:
        more = f"… {n_rows - max_rows} more"
        out.append(f'<tr><td colspan="{len(header)}">{more}</td></tr>')
    return "".join(out) + "</table>"
