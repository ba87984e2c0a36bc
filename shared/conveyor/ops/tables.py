"""Plain-text tables, for the CLI and the demo report: columns padded to their widest cell."""

from collections.abc import Sequence


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *rows]
    )
