"""One reader for user files: every loader refuses FIFOs, devices, directories
and symlink loops with one typed line, bounds the size, and names bad UTF-8.

Each case runs through every public loader (plan, workload/dataset, task file,
HF ``config.json``, GGUF header) so a loader that bypasses the shared reader is
caught. A loader that blocks (a FIFO opened for reading waits for a writer) is
run in a thread and unblocked after the check.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from deepseekbench import (
    BenchmarkPlan,
    ModelCapabilityError,
    PlanError,
    TaskFormatError,
    WorkloadFormatError,
    load_jsonl,
    load_sharegpt,
    load_tasks,
    mtp_depth_from_gguf,
    mtp_depth_from_hf_config,
)
from deepseekbench._userfile import read_user_bytes, read_user_text

LOADERS: dict[str, tuple[Callable[[Path], object], type[Exception], str]] = {
    "plan": (BenchmarkPlan.load, PlanError, "x.toml"),
    "jsonl_workload": (load_jsonl, WorkloadFormatError, "x.jsonl"),
    "sharegpt_dataset": (load_sharegpt, WorkloadFormatError, "x.json"),
    "task_file": (load_tasks, TaskFormatError, "x.jsonl"),
    "hf_config": (mtp_depth_from_hf_config, ModelCapabilityError, "config.json"),
    "gguf": (mtp_depth_from_gguf, ModelCapabilityError, "x.gguf"),
}


def _call(loader: Callable[[Path], object], path: Path, unblock: Path | None = None) -> object:
    """The loader's exception (or result); fails when it blocks for 5 s."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(loader(path))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive() and unblock is not None:
        fd = os.open(unblock, os.O_WRONLY)  # a writer arrives and leaves: the read ends
        os.close(fd)
        thread.join(5)
        pytest.fail(f"{loader} blocked on {path}")
    assert outcome, f"{loader} still running on {path}"
    return outcome[0]


def _one_line(result: object, error: type[Exception], *words: str) -> str:
    assert isinstance(result, error), result
    text = str(result)
    assert "\n" not in text, text
    for word in words:
        assert word in text, text
    return text


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_fifo_is_refused_without_blocking(name: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    fifo = tmp_path / filename
    os.mkfifo(fifo)
    _one_line(_call(loader, fifo, unblock=fifo), error, str(fifo), "FIFO")


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_device_is_refused(name: str, device: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    link = tmp_path / filename  # the loaders look at the suffix: a link with the right one
    link.symlink_to(device)
    _one_line(_call(loader, link), error, str(link), "device")


@pytest.mark.parametrize("name", sorted(set(LOADERS) - {"hf_config"}))
def test_a_directory_is_refused(name: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    folder = tmp_path / filename
    folder.mkdir()
    _one_line(_call(loader, folder), error, str(folder), "directory")


def test_an_hf_model_folder_without_config_json_is_one_line(tmp_path: Path) -> None:
    _one_line(_call(mtp_depth_from_hf_config, tmp_path), ModelCapabilityError, "no such file")


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_symlink_loop_is_one_clear_line(name: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    a, b = tmp_path / filename, tmp_path / ("other" + filename)
    a.symlink_to(b)
    b.symlink_to(a)
    _one_line(_call(loader, a), error, str(a), "symlink loop")


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_missing_file_is_one_clear_line(name: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    missing = tmp_path / filename
    _one_line(_call(loader, missing), error, str(missing), "no such file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_an_unreadable_file_is_one_clear_line(name: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    locked = tmp_path / filename
    locked.write_text("{}")
    locked.chmod(0)
    _one_line(_call(loader, locked), error, str(locked), "permission denied")


@pytest.mark.parametrize("name", sorted(set(LOADERS) - {"gguf"}))
def test_bad_utf8_names_the_byte_and_line(name: str, tmp_path: Path) -> None:
    loader, error, filename = LOADERS[name]
    bad = tmp_path / filename
    bad.write_bytes(b'{"a": 1}\n{"prompt": "caf\xe9"}\n')
    if name == "hf_config":  # JSON bytes go to orjson, which names the bad byte itself
        _one_line(_call(loader, bad), error, str(bad))
        return
    _one_line(_call(loader, bad), error, str(bad), "not UTF-8", "byte 24", "line 2")


def test_the_size_is_bounded_before_and_during_the_read(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(ValueError, match=r"1001 bytes, over the limit of 1000 bytes"):
        read_user_bytes(big, what="file", fail=ValueError, max_bytes=1000)
    assert read_user_bytes(big, what="file", fail=ValueError, max_bytes=1001) == b"x" * 1001
    assert read_user_text(big, what="file", fail=ValueError, max_bytes=2000) == "x" * 1001
