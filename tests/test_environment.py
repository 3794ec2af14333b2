"""The pinned stack is what is installed, torch stays the CPU 2.13.0 build, and braindecode imports."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements.txt"


def _pins() -> dict[str, str]:
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)", line)
        assert match, f"requirements.txt line is not an exact pin: {line!r}"
        pins[re.sub(r"\[.*\]", "", match.group(1))] = match.group(2)
    return pins


def test_every_requirement_is_pinned_and_installed_at_that_version():
    pins = _pins()
    assert len(pins) > 100
    wrong = {}
    for name, version in pins.items():
        installed = metadata.version(name)
        if installed.split("+")[0] != version.split("+")[0]:
            wrong[name] = (version, installed)
    assert not wrong, f"installed versions differ from the pins: {wrong}"


def test_torch_is_the_pinned_cpu_build():
    import torch

    assert torch.__version__.split("+")[0] == "2.13.0"
    assert not torch.cuda.is_available() or torch.version.cuda is not None


def test_braindecode_imports_and_eegnet_runs():
    torch = pytest.importorskip("torch")
    import braindecode
    from braindecode.models import EEGNet

    model = EEGNet(n_chans=22, n_outputs=2, n_times=500)
    with torch.no_grad():
        out = model(torch.randn(3, 22, 500))
    assert out.shape == (3, 2)
    assert braindecode.__version__


@pytest.mark.parametrize("module", ["diffprivlib", "flwr", "opacus", "dp_accounting", "moabb", "optuna", "dvc",
                                    "mlflow", "pooch", "statsmodels", "mne", "sklearn", "seaborn"])
def test_stack_module_imports(module):
    __import__(module)


def test_scikit_learn_below_1_8_for_diffprivlib():
    import sklearn
    from diffprivlib.mechanisms import GaussianAnalytic

    assert tuple(int(x) for x in sklearn.__version__.split(".")[:2]) < (1, 8)
    assert GaussianAnalytic(epsilon=1.0, delta=1e-5, sensitivity=1.0).randomise(0.0) is not None
