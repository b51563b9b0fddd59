"""module_groups: big graphs fold into modules by parameter-name prefix, ops by forward order."""

from collections import Counter

import torch

from autogradlab.graph import capture, module_groups


def test_sequential_mlp_ops_join_the_module_that_ran_before_them():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    g = capture(net(torch.randn(5, 3)).pow(2).mean(), params=net)
    groups = module_groups(g)
    by_name = {(g.node(i).name, g.node(i).param_name): name for i, name in groups.items()}
    assert by_name[("ReluBackward0", None)] == "0"  # after layer 0's linear, before layer 2's
    assert by_name[("AccumulateGrad", "2.weight")] == "2"
    assert by_name[("PowBackward0", None)] == "(loss)" and by_name[("MeanBackward0", None)] == "(loss)"
    assert all(n.id in groups for n in g.nodes if n.kind != "output")


def test_transformer_groups_by_layer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    g = capture(enc(torch.randn(2, 5, 8)).sum(), params=enc)
    counts = Counter(module_groups(g).values())
    assert set(counts) == {"layers.0", "layers.1", "layers.2", "(loss)"}
    assert min(counts["layers.0"], counts["layers.1"], counts["layers.2"]) > 40


def test_input_ops_before_the_first_parameter():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)
    g = capture(lin(x.tanh()).sum(), params=lin)
    groups = module_groups(g)
    assert groups[g.find("TanhBackward0")[0].id] == "(input)"
    unnamed_leaf = next(n for n in g.leaves if n.param_name is None)
    assert groups[unnamed_leaf.id] == "(input)"  # an unnamed leaf joins the op that uses it


def test_many_modules_are_merged_into_runs_and_unnamed_graphs_into_op_ranges():
    net = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(100)])
    g = capture(net(torch.randn(1, 2)).sum(), params=net)
    names = set(module_groups(g, max_groups=10).values())
    assert len(names - {"(loss)"}) == 10 and "0 … 9" in names
    unnamed = set(module_groups(capture(net(torch.randn(1, 2)).sum()), max_groups=10).values())
    assert len(unnamed) == 10 and "ops 0–20" in unnamed
