"""PMC estimator (issue 17): tracing on meta tensors equals Table 2's closed forms for GCN, SAGE and GIN on random shapes, agrees with PyTorch's CPU allocator, and refuses bad shapes."""
import math
import random

import pytest

torch = pytest.importorskip("torch")

from splitrpc.services.colocation import op_models, pmc  # noqa: E402


def _shapes(n, seed):
    rng = random.Random(seed)
    return [(rng.randint(1, 4000), rng.randint(1, 40000)) for _ in range(n)]


@pytest.mark.parametrize("kind", op_models.MODELS)
def test_traced_peak_equals_table2_on_20_random_shapes(kind):
    rng = random.Random(kind)
    for i, (nn, ne) in enumerate(_shapes(20, kind)):
        layers, hidden, fin = rng.randint(1, 4), rng.choice([8, 64, 256]), rng.randint(1, 600)
        model = op_models.build(kind, fin, hidden=hidden, layers=layers, classes=rng.randint(2, 50), seed=i)
        for align in (pmc.ALIGN, 1):
            traced = pmc.Estimator(model, align=align).estimate(nn, ne)
            closed = pmc.table2(kind, model.dims, nn, ne, align=align)
            assert (traced.peak, traced.weights, traced.inputs) == (closed.peak, closed.weights, closed.inputs), \
                (kind, nn, ne, model.dims, align)
            assert traced.pmc == closed.pmc == math.ceil(closed.peak * pmc.SAFETY)
            assert traced.operators > 0


@pytest.mark.parametrize("kind", op_models.MODELS)
def test_estimate_within_15_percent_of_the_cpu_allocators_peak(kind):
    model = op_models.build(kind, 100, hidden=64, layers=3, classes=7)
    est = pmc.Estimator(model, align=1)  # the CPU allocator does not round sizes
    for nn, ne in _shapes(4, 7):
        x, ei = op_models.random_request(nn, ne, 100, seed=nn)
        measured = pmc.measured_cpu_peak(model, x, ei)
        assert abs(est.estimate(nn, ne).peak - measured) <= 0.15 * measured, (nn, ne)


def test_estimator_traces_a_torch_geometric_model_too():
    """Not a Table 2 model: PyG's SAGEConv (mean aggregation, its own temporaries). The tracer sees
    what it runs; the CPU allocator's peak agrees within 15%."""
    pytest.importorskip("torch_geometric")
    from torch_geometric.nn import SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = SAGEConv(64, 128), SAGEConv(128, 16)

        def forward(self, x, ei):
            return self.c2(self.c1(x, ei).relu(), ei)

    net = Net().eval()
    est = pmc.Estimator(net, align=1)
    nn, ne = 3000, 30000
    x, ei = op_models.random_request(nn, ne, 64, seed=1)
    measured = pmc.measured_cpu_peak(net, x, ei)
    got = est.estimate(nn, ne, 64).peak
    assert abs(got - measured) <= 0.15 * measured, (got, measured)


def test_estimates_grow_with_the_request_and_are_cached():
    est = pmc.Estimator(op_models.build("gin", 32, hidden=32, layers=2))
    a, b = est.estimate(100, 1000), est.estimate(100, 5000)
    assert b.peak > a.peak and b.weights == a.weights
    assert est.estimate(100, 1000) is a
    assert a.peak % pmc.ALIGN == 0


@pytest.mark.parametrize("nn,ne", [(0, 10), (10, 0), (-1, 5), (5, -1), (2.5, 3), (True, 3)])
def test_bad_shapes_are_refused(nn, ne):
    est = pmc.Estimator(op_models.build("gcn", 8, hidden=8, layers=1))
    with pytest.raises(ValueError):
        est.estimate(nn, ne)
    with pytest.raises(ValueError):
        pmc.table2("gcn", [8, 8], nn, ne)


def test_bad_settings_are_refused():
    m = op_models.build("sage", 8, hidden=8, layers=1)
    for bad in (0.9, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            pmc.Estimator(m, safety=bad)
    with pytest.raises(ValueError):
        op_models.build("gat", 8)
    with pytest.raises(ValueError):
        pmc.table2("gat", [8, 8], 1, 1)
