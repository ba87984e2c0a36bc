"""docs/api.md is the public API as the code states it: current, and every exported name documented."""

import pytest

from scripts.api_reference import API_DOC, missing_docstrings, render


def test_the_api_reference_matches_the_code() -> None:
    committed = API_DOC.read_text(encoding="utf-8") if API_DOC.is_file() else ""
    if committed != render():
        pytest.fail("docs/api.md is stale: run `make api-docs` and commit it", pytrace=False)


def test_every_exported_name_has_a_docstring() -> None:
    missing = missing_docstrings()
    if missing:
        pytest.fail(f"exported without a docstring of its own: {', '.join(missing)}", pytrace=False)
