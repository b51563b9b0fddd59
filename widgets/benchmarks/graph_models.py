"""The graphs the graph benchmark draws: MLPs, a Transformer encoder, a residual conv net.

Each builder returns ``(loss, named_parameters)`` after one seeded forward pass on CPU.
"""

from __future__ import annotations

import torch
from torch import nn


def mlp(depth: int, width: int = 16, batch: int = 4):
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    net = nn.Sequential(*layers)
    return net(torch.randn(batch, width)).pow(2).mean(), dict(net.named_parameters())


def transformer(layers: int = 12, d_model: int = 32, heads: int = 4, seq: int = 8, batch: int = 2):
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.0, batch_first=True)
    net = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
    return net(torch.randn(batch, seq, d_model)).pow(2).mean(), dict(net.named_parameters())


class _Block(nn.Module):
    def __init__(self, channels: int, stride: int = 1):
        super().__init__()
        out = channels * stride
        self.conv1 = nn.Conv2d(channels, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.down = nn.Conv2d(channels, out, 1, stride, bias=False) if stride != 1 else None

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return torch.relu(skip + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class ResNet(nn.Module):
    """A small residual net: a stem conv, 24 basic blocks (48 convs), 2 downsampling 1x1 convs: 51 convs."""

    def __init__(self, channels: int = 8, blocks: int = 24):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, 1, 1, bias=False)
        stages = []
        for i in range(blocks):
            stride = 2 if i in (blocks // 3, 2 * blocks // 3) else 1
            stages.append(_Block(channels, stride))
            channels *= stride
        self.blocks = nn.Sequential(*stages)
        self.head = nn.Linear(channels, 10)

    def forward(self, x):
        return self.head(self.blocks(torch.relu(self.stem(x))).mean((2, 3)))


def resnet():
    torch.manual_seed(0)
    net = ResNet()
    net.train()
    return net(torch.randn(2, 3, 16, 16)).logsumexp(-1).mean(), dict(net.named_parameters())


GRAPHS = {
    "MLP depth 10": lambda: mlp(10),
    "MLP depth 100": lambda: mlp(100),
    "MLP depth 200": lambda: mlp(200),
    "MLP depth 1000": lambda: mlp(1000),
    "Transformer 12 layers": transformer,
    "ResNet 51 convs": resnet,
}
