"""`python -m bench` refuses bad arguments with one line and status 2, before measuring anything."""

from pathlib import Path

import pytest

from bench.__main__ import parse


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fast"], "bench: unrecognized arguments: --fast\n"),
        (["--output-dir"], "bench: argument --output-dir: expected one argument\n"),
        (["extra"], "bench: unrecognized arguments: extra\n"),
    ],
)
def test_bad_arguments_end_in_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == message


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    with pytest.raises(SystemExit) as exited:
        parse(["--output-dir", str(taken)])
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"bench: --output-dir {taken} is not a directory\n"


def test_defaults_write_to_docs_and_bench() -> None:
    options = parse([])
    assert (options.quick, options.output_dir) == (False, None)
    assert parse(["--quick", "--output-dir", "out"]).output_dir == Path("out")
