"""CLI details a new user meets first (issue 19, item 7): ``--version``, a dry run's
formats."""

from __future__ import annotations

import io
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import deepseekbench
from deepseekbench._cli import EXIT_OK, main, package_version

ROOT = Path(__file__).resolve().parent.parent


def test_version_prints_the_package_version() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--version"], stdout=out, stderr=err) == EXIT_OK
    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert out.getvalue() == f"deepseekbench {want}\n" and err.getvalue() == ""
    assert deepseekbench.__version__ == want == package_version()
    try:  # installed: the metadata is the source
        assert package_version() == version("deepseekbench")
    except PackageNotFoundError:
        pass


def test_version_from_a_shell() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deepseekbench", "--version"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("deepseekbench "), proc.stderr


def test_dry_run_format_html_prints_a_page_not_text(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        'model = "m"\n'
        '[[routes]]\nlabel = "off"\nspeculative = "off"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[routes]]\nlabel = "mtp"\nspeculative = "mtp"\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(plan), "--dry-run", "--format", "html"], stdout=out, stderr=err) == 0
    page = out.getvalue()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<th>route</th>" in page and "<td>off</td>" in page and "<td>admitted</td>" in page
    assert "<td>mtp</td>" in page and "no connection opened" in page
    text = io.StringIO()
    assert main(["run", str(plan), "--dry-run"], stdout=text, stderr=io.StringIO()) == 0
    assert "<" not in text.getvalue() and "admitted" in text.getvalue()
