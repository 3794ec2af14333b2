"""Fixtures and helpers shared by the data-layer tests (imported by them; conftest.py belongs to others)."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test loudly instead of downloading."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted during a data test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget which once-per-process data warnings were already given, so a test can see its own."""
    from eegprivacy.data import _local

    monkeypatch.setattr(_local, "_WARNED", set())


def mirror_dataset(src: Path, dst: Path, folder: str, *, copy=(), skip=()) -> Path:
    """A cheap stand-in for a dataset folder: symlinks to the mirror, real copies of ``copy``, no ``skip``."""
    for path in sorted((src / folder).rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(src / folder).as_posix()
        if rel in skip:
            continue
        target = dst / folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in copy:
            shutil.copyfile(path, target)
        else:
            os.symlink(path, target)
    return dst


def flip_byte(path: Path, offset: int = -100) -> None:
    """Corrupt one byte (default: in the last record, so headers still parse)."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
