"""`make chaos` refuses bad arguments with one line before anything starts."""

import pytest

from chaos.__main__ import DEFAULT_JOBS, DEFAULT_RATES, QUICK_FACTOR, QUICK_JOBS, parse


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--jobs", "-5"], "chaos: argument --jobs: must be between 1 and 100000, got -5\n"),
        (["--jobs", "10000000"], "chaos: argument --jobs: must be between 1 and 100000, got 10000000\n"),
        (["--jobs", "lots"], "chaos: argument --jobs: not a whole number: 'lots'\n"),
        (
            ["--fault", "crash_everything=0.1"],
            "chaos: fault spec 'crash_everything=0.1': unknown fault 'crash_everything'",
        ),
        (["--fault", "crash_after_effect=1.5"], "chaos: "),
        (["--fault", "crash_after_effect"], "chaos: "),
        (["--kills", "1"], "chaos: --kills must be at least 3, got 1\n"),
    ],
)
def test_bad_arguments_end_in_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1


def test_defaults_and_quick_mode_and_overrides() -> None:
    options, mix = parse([])
    assert options.jobs == DEFAULT_JOBS
    assert mix.rates == DEFAULT_RATES
    options, mix = parse(["--quick", "--fault", "crash_after_effect=0"])
    assert options.jobs == QUICK_JOBS
    assert mix.rate("crash_after_effect") == 0
    assert mix.rate("crash_before_effect") == pytest.approx(DEFAULT_RATES["crash_before_effect"] * QUICK_FACTOR)
