"""`conveyor cost` prints the month's bill of a mix, or of the last hour's jobs; bad input is one line and an exit code.

Until `make bench` writes bench/results.json, the profile is tests/fixtures/cost_profile.json, a
provisional one for this project's job types.
"""

import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from conveyor.cli.main import cli
from conveyor.contract.settings import METRICS_NAMESPACE
from functions.topology import TOPOLOGY
from tests.cli_support import conveyor

MIX = "send_welcome_email=0.5,charge_order=0.2,deliver_webhook=0.3"


# The provisional profile (tests/fixtures/cost_profile.json) docs/cost.md and docs/capacity.md use too.
PROFILE = Path(__file__).resolve().parents[2] / "fixtures" / "cost_profile.json"


def test_the_bill_is_a_table_per_job_type_with_the_total_and_its_assumptions() -> None:
    result = CliRunner().invoke(cli, ["cost", "--rate", "10000/s", "--mix", MIX, "--profile", str(PROFILE)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "26.3B jobs a month (10,000/s) at us-east-1 prices; every figure is per month"
    assert [line.split()[0] for line in lines if line.startswith("charge_order")] == ["charge_order"] * 2
    header = next(line.split() for line in lines if line.startswith("JOB TYPE") and "LAMBDA" in line)
    assert header[2:] == [
        "LAMBDA",
        "SQS",
        "DYNAMODB",
        "CLOUDWATCH",
        "X-RAY",
        "TOTAL",
        "$/MONTH",
        "$",
        "PER",
        "1M",
        "JOBS",
    ]
    assert next(line for line in lines if line.startswith("total: $")).endswith("per million jobs")
    assert any(line.startswith("assumed: messages of 1,024 bytes") for line in lines)


def test_json_has_a_line_per_job_type_the_fixed_costs_and_totals_that_add_up() -> None:
    result = CliRunner().invoke(
        cli,
        ["cost", "--rate", "1e9/month", "--mix", MIX, "--profile", str(PROFILE), "--json", "--message-bytes", "2048"],
    )
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert [line["job_type"] for line in found["lines"]] == [
        "send_welcome_email",
        "charge_order",
        "deliver_webhook",
        "(fixed)",
    ]
    assert found["jobs_per_month"] == pytest.approx(1e9)
    assert found["total_usd"] == pytest.approx(sum(line["total_usd"] for line in found["lines"]))
    assert found["usd_per_million_jobs"] == pytest.approx(found["total_usd"] / 1000)
    assert found["region"] == "us-east-1"
    assert any("2,048 bytes" in assumption for assumption in found["assumptions"])


def test_the_default_profile_is_bench_results_in_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'elsewhere'\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "results.json").write_text(PROFILE.read_text())
    (tmp_path / "deep").mkdir()
    monkeypatch.chdir(tmp_path / "deep")
    code, out, err = conveyor("--topology", "functions.topology:TOPOLOGY", "cost", "--rate", "5/s", "--mix", MIX)
    assert (code, err) == (0, "")
    assert f"profile measured {json.loads(PROFILE.read_text())['measured_at'][:10]}" in out


def test_a_profile_without_a_row_for_a_job_type_of_the_mix_is_refused_in_one_line(tmp_path: Path) -> None:
    profile = json.loads(PROFILE.read_text())
    del profile["job_profiles"]["summarize_day"]
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps(profile))
    code, out, err = conveyor(
        "--topology",
        "functions.topology:TOPOLOGY",
        "cost",
        "--rate",
        "10/s",
        "--mix",
        "summarize_day=1",
        "--profile",
        str(partial),
    )
    assert (code, out) == (1, "")
    assert "has no row for job type 'summarize_day'; run `make bench`" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (
            ["--rate", "10/s", "--mix", "charge_order=0.5,resize_image=0.5"],
            3,
            "unknown job type 'resize_image'; declared",
        ),
        (
            ["--rate", "0/s", "--mix", "charge_order=1"],
            2,
            "rate '0/s': expected a positive number per s, min, h, day or month",
        ),
        (
            ["--rate", "-3/h", "--mix", "charge_order=1"],
            2,
            "rate '-3/h': expected a positive number per s, min, h, day or month",
        ),
        (
            ["--rate", "fast", "--mix", "charge_order=1"],
            2,
            "rate 'fast': expected a positive number per s, min, h, day or month",
        ),
        (["--rate", "10/s", "--mix", "charge_order=0.5,deliver_webhook=0.4"], 2, "mix: the shares sum to 0.9, not 1"),
        (["--rate", "10/s", "--mix", "charge_order"], 2, "mix entry 'charge_order': expected job_type=share"),
        (["--rate", "10/s"], 2, "pass --rate and --mix"),
        (
            ["--observed", "--rate", "10/s", "--mix", "charge_order=1"],
            2,
            "pass --rate and --mix, or --observed, not both",
        ),
        (
            ["--rate", "10/s", "--mix", "charge_order=1", "--message-bytes", "0"],
            2,
            "Invalid value for '--message-bytes'",
        ),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(argv: list[str], code: int, message: str) -> None:
    exit_code, out, err = conveyor("cost", *argv, "--profile", str(PROFILE))
    assert (exit_code, out) == (code, "")
    assert err.count("\n") == 1
    assert err.startswith("conveyor: ")
    assert message in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file; run `make bench` to measure one, or pass --profile"),
        ("[]", "<root>: Input should be an object"),
        ('{"measured_at": "today", "job_profiles": {"charge_order": {"queue": "critical"}}}', "Field required"),
    ],
)
def test_a_missing_or_malformed_profile_is_one_line_and_exit_1(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    code, out, err = conveyor("cost", "--rate", "10/s", "--mix", "charge_order=1", "--profile", str(path))
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert f"conveyor: profile {path}: " in err
    assert message in err


@pytest.fixture
def cloudwatch(empty_aws: None) -> Any:
    """CloudWatch in moto, where `conveyor stats` (and so `cost --observed`) reads the jobs' counts."""
    return boto3.client("cloudwatch")


def succeeded(cloudwatch: Any, job_type: str, count: int) -> None:
    cloudwatch.put_metric_data(
        Namespace=METRICS_NAMESPACE,
        MetricData=[
            {
                "MetricName": "Succeeded",
                "Dimensions": [
                    {"Name": "queue", "Value": TOPOLOGY.job_type(job_type).queue},
                    {"Name": "job_type", "Value": job_type},
                ],
                "Timestamp": datetime.now(UTC) - timedelta(minutes=5),
                "Value": count,
                "Unit": "Count",
            }
        ],
    )


def test_observed_prices_the_last_hours_successes(cloudwatch: Any) -> None:
    succeeded(cloudwatch, "send_welcome_email", 5400)
    succeeded(cloudwatch, "charge_order", 1800)
    code, out, err = conveyor("cost", "--observed", "--profile", str(PROFILE), "--json")
    assert (code, err) == (0, "")
    found = json.loads(out)
    assert found["jobs_per_second"] == pytest.approx(2.0)
    shares = {line["job_type"]: line["jobs_per_month"] / found["jobs_per_month"] for line in found["lines"][:-1]}
    assert shares == pytest.approx({"send_welcome_email": 0.75, "charge_order": 0.25})


def test_observed_with_nothing_done_in_the_last_hour_is_one_line(cloudwatch: Any) -> None:
    code, out, err = conveyor("cost", "--observed", "--profile", str(PROFILE))
    assert (code, out) == (1, "")
    assert err == "conveyor: no job succeeded in the last 1h; pass --rate and --mix instead\n"


ROOT = Path(__file__).resolve().parents[3]
DOCS = (ROOT / "docs" / "cost.md", ROOT / "docs" / "capacity.md")
CONSOLE = re.compile(r"^```console\n\$ (conveyor cost .*?)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def console_examples() -> list[tuple[str, str, str]]:
    """Each ```console block of the docs: its command and the output the page shows for it."""
    return [
        (doc.name, command, output)
        for doc in DOCS
        if doc.is_file()
        for command, output in CONSOLE.findall(doc.read_text(encoding="utf-8"))
    ]


@pytest.mark.parametrize(("doc", "command", "shown"), console_examples())
def test_every_cost_example_in_the_docs_prints_what_the_page_shows(
    monkeypatch: pytest.MonkeyPatch, doc: str, command: str, shown: str
) -> None:
    monkeypatch.chdir(ROOT)
    _, out, err = conveyor(*shlex.split(command)[1:])
    assert out + err == shown, f"{doc}: `{command}` prints something else now; paste its output again"
