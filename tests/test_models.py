"""Study B's networks: seeded construction, shapes on CSP-sized input, and the ``embed`` hook."""

from __future__ import annotations

import pytest
import torch

from eegprivacy.models import EmbeddingModel, build_model, seeded
from eegprivacy.models.eegnet import EEGNet
from eegprivacy.models.simplenet import SimpleNet


# One torch thread: the 2-core CI box runs these faster without intra-op threading.
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_seeded_construction_fixes_weights_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = SimpleNet(8, seed=5)
    assert torch.equal(torch.rand(3), expected)  # the caller's stream did not move
    assert _same(a, SimpleNet(8, seed=5)) and not _same(a, SimpleNet(8, seed=6))
    with seeded(None):  # no seed: no effect at all
        pass


def test_simplenet_layers_and_hidden_layer_embedding():
    net = SimpleNet(4, n_hidden=16, dropout=0.5, seed=0)
    kinds = [type(m).__name__ for m in net.children()]
    assert kinds == ["Linear", "Dropout", "Linear"] and isinstance(net, EmbeddingModel)
    x = torch.randn(10, 4)
    emb = net.embed(x)
    assert emb.shape == (10, 16) and (emb >= 0).all()  # after the ReLU
    net.eval()
    assert torch.allclose(net(x), net.classifier(emb))
    net.train()
    torch.manual_seed(0)
    assert not torch.allclose(net(x), net.classifier(emb))  # dropout acts between embedding and classifier
    assert build_model("simplenet", (4, 32), seed=0)(torch.randn(2, 4, 32)).shape == (2, 2)  # flattened input


def test_eegnet_runs_on_csp_projected_input_and_embeds_its_last_conv_block():
    net = build_model("eegnet", (4, 512), seed=0).eval()
    assert isinstance(net, EEGNet)
    x = torch.randn(6, 4, 512)
    out = net(x)
    assert out.shape == (6, 2) and torch.allclose(out, net.net(x))  # the wrapper adds nothing to the forward
    emb = net.embed(x)
    assert emb.shape == (6, 16 * 16)  # F2 = 16 maps x 512 / (4 * 8) samples after the two poolings
    assert torch.allclose(net.net.final_layer(emb.reshape(6, 16, 1, 16)), out)
    assert _same(net, build_model("eegnet", (4, 512), seed=0)) and not _same(net, build_model("eegnet", (4, 512),
                                                                                               seed=1))


def test_eegnet_without_batchnorm_ships_parameters_only():
    net = EEGNet(2, 128, seed=0, batch_norm=False).eval()
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
    assert not list(net.buffers()) and net(torch.randn(3, 2, 128)).shape == (3, 2)
    with_bn = EEGNet(2, 128, seed=0)
    assert any(k.endswith("running_mean") for k in with_bn.state_dict())


def test_build_model_refuses_unknown_names_and_shapes():
    with pytest.raises(ValueError, match="unknown model"):
        build_model("resnet", (4,))
    with pytest.raises(ValueError, match="n_chans, n_times"):
        build_model("eegnet", (4,))
