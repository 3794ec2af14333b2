"""federated layer: Flower task / ClientApp / ServerApp, and one runner with two backends.

- :mod:`task` — what a client computes (weights in, local training, weights out), Flower-free.
- :mod:`client_app` — the Flower ``ClientApp`` (Message API) built from a task and a partition loader.
- :mod:`server_app` — the Flower ``ServerApp``: plain ``flwr.serverapp.strategy.FedAvg``, an optional
  federated StandardScaler, and a log of what the server saw each round.
- :mod:`simulation` — ``run_fedavg``: Flower's simulation engine (``backend="flower"``) or the same apps
  driven in this process (``backend="inprocess"``, deterministic and fast).
- :mod:`apps` — study B's module-level ``server_app``/``client_app`` for Flower's deployment engine (``flwr run``,
  app project ``deploy/flower``), configured by Flower's run and node config; :mod:`cohort` — the per-client
  data they and the stage share. Imported on use (torch).
- :mod:`lockstep` — ``run_fedavg_many``: several in-process federations in lock-step, every round's local training
  of all of them batched (LiRA's shadow federations). Imported on use.
- :mod:`estimator` — ``FedAvgClassifier``, the scikit-learn face of it all.
- :mod:`torch_task` — ``TorchTask``, a PyTorch model (study B) as a task; imported on first use, so study A's
  stages do not pay for importing torch.
- :mod:`dp` — the paper's per-step Laplace step on the batch gradient (``LaplaceGradientDP``); :mod:`dp_sgd` —
  record-level DP-SGD (``GaussianExampleDP``: per-example clipping, Gaussian noise, Poisson sampling) with its
  RDP/PLD accounting and noise calibration to a total ε. Both imported on use (torch).
"""

from eegprivacy.federated.client_app import make_client_app, partition_loader
from eegprivacy.federated.estimator import FedAvgClassifier
from eegprivacy.federated.server_app import (
    FederationLog,
    RecordingGrid,
    combine_moments,
    fedavg_strategy,
    make_server_app,
)
from eegprivacy.federated.simulation import BACKENDS, FederationResult, InProcessGrid, run_fedavg
from eegprivacy.federated.task import MLPTask, Task, derive_seed

__all__ = [
    "FedAvgClassifier",
    "run_fedavg",
    "FederationResult",
    "BACKENDS",
    "InProcessGrid",
    "Task",
    "MLPTask",
    "derive_seed",
    "make_client_app",
    "partition_loader",
    "make_server_app",
    "fedavg_strategy",
    "FederationLog",
    "RecordingGrid",
    "combine_moments",
    "TorchTask",
]


def __getattr__(name: str):
    if name == "TorchTask":
        from eegprivacy.federated.torch_task import TorchTask

        return TorchTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
