"""bench.imports reads the cumulative time of a top-level import out of `python -X importtime`."""

import pytest

from bench.imports import cumulative_us, self_us_by_package

REPORT = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:        40 |         40 |       functions.worker
import time:       300 |       1500 | functions
import time:      2000 |       2000 |     boto3
import time:       500 |     123456 | functions.worker
some other line on stderr
"""


def test_the_top_level_import_is_read_not_a_nested_one_of_the_same_name() -> None:
    assert cumulative_us(REPORT, "functions.worker") == 123456
    assert cumulative_us(REPORT, "functions") == 1500


def test_a_module_imported_only_nested_or_not_at_all_is_an_error() -> None:
    with pytest.raises(ValueError, match="no top-level import of boto3"):
        cumulative_us(REPORT, "boto3")
    with pytest.raises(ValueError, match=r"bench\.bare_handler"):
        cumulative_us(REPORT, "bench.bare_handler")


def test_own_time_is_summed_by_top_level_package_and_the_header_is_skipped() -> None:
    assert self_us_by_package(REPORT) == {"_io": 120, "functions": 840, "boto3": 2000}
