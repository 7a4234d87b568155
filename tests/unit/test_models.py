import numpy as np

import mgpu

mx = mgpu.mx


def _count(net):
    return sum(p.data().size for p in net.collect_params().values())


def test_lenet_scratch_shapes_and_determinism():
    p1, p2 = mgpu.lenet_params(seed=1), mgpu.lenet_params(seed=1)
    assert [p.shape for p in p1] == mgpu.models.LENET_SHAPES
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert mgpu.lenet_forward(mx.nd.zeros((5, 1, 28, 28)), p1).shape == (5, 10)


def test_gluon_lenet_matches_scratch_size():
    net = mgpu.LeNet()
    net.initialize()
    assert net(mx.nd.zeros((3, 1, 28, 28))).shape == (3, 10)
    assert _count(net) == sum(p.size for p in mgpu.lenet_params())


def test_resnet18_28_shapes_and_size():
    net = mgpu.resnet18_28()
    net.initialize()
    net.hybridize()
    assert net(mx.nd.zeros((2, 1, 28, 28))).shape == (2, 10)
    params = net.collect_params()
    trainable = [p for p in params.values() if p.grad_req != "null"]
    # 11.17 M parameters, like every ResNet-18 with a 10-way output
    assert 11_100_000 < _count(net) < 11_250_000
    assert len(trainable) == 62
    small = mgpu.resnet18_28(width=16)
    small.initialize()
    assert small(mx.nd.zeros((1, 1, 28, 28))).shape == (1, 10)
    assert _count(small) < _count(net) / 10
