"""Which ring does a point lie on? An MLP with LeCun's scaled tanh, trained with Adam.

LeCun et al. (Efficient BackProp, 1998) recommend f(x) = 1.7159 tanh(2x/3): unit variance in,
roughly unit variance out. The activation is a custom autograd Function that keeps only its
output for backward, as torch.tanh does, since tanh's derivative is 1 - tanh²; the scaling is
done in place, so no second activation-sized tensor is allocated.

Run it:  python mystery_4.py
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    seed: int = 0
    rings: int = 3
    hidden: int = 64
    n_train: int = 4096
    n_val: int = 1024
    batch_size: int = 128
    epochs: int = 6
    lr: float = 1e-2
    lr_decay_epochs: int = 5  # multiply the learning rate by 0.1 from this epoch on
    log_every: int = 32


# --------------------------------------------------------------------------- data


def make_rings(n: int, cfg: Config, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` 2-D points (n, 2) on ``cfg.rings`` noisy concentric rings, and the ring of each (n,)."""
    ring = torch.randint(0, cfg.rings, (n,), generator=generator)
    angle = 2 * math.pi * torch.rand(n, generator=generator)
    radius = ring.float() + 1 + 0.25 * torch.randn(n, generator=generator)
    return torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1), ring


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator):
    order = torch.randperm(len(x), generator=generator)
    for start in range(0, len(x), batch_size):
        idx = order[start : start + batch_size]
        yield x[idx], y[idx]


# --------------------------------------------------------------------------- model


class Tanh(torch.autograd.Function):
    """tanh that keeps only its output for backward: d tanh(x)/dx = 1 - tanh(x)²."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x)
        ctx.y = y
        return y

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        return grad_output * (1 - ctx.y * ctx.y)


class ScaledTanh(nn.Module):
    """LeCun's 1.7159 tanh(2x/3)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = Tanh.apply(x * (2 / 3))
        return y.mul_(1.7159)  # in place: no second activation-sized tensor


class RingClassifier(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, cfg.hidden),
            ScaledTanh(),
            nn.Linear(cfg.hidden, cfg.hidden),
            ScaledTanh(),
            nn.Linear(cfg.hidden, cfg.rings),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# --------------------------------------------------------------------------- training


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        data = torch.Generator().manual_seed(4000 + cfg.seed)
        self.x_train, self.y_train = make_rings(cfg.n_train, cfg, data)
        self.x_val, self.y_val = make_rings(cfg.n_val, cfg, data)
        self.shuffle = torch.Generator().manual_seed(cfg.seed)
        self.model = RingClassifier(cfg)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=cfg.lr_decay_epochs, gamma=0.1)
        self.step_count = 0

    def epoch_batches(self):
        return batches(self.x_train, self.y_train, self.cfg.batch_size, self.shuffle)

    def train_step(self, batch) -> torch.Tensor:
        x, y = batch
        self.model.train()
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self.step_count += 1
        return loss.detach()

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        self.model.eval()
        logits = self.model(self.x_val)
        accuracy = (logits.argmax(dim=1) == self.y_val).float().mean().item()
        return F.cross_entropy(logits, self.y_val).item(), accuracy

    def fit(self, log=print) -> list[float]:
        losses = []
        for epoch in range(self.cfg.epochs):
            for batch in self.epoch_batches():
                losses.append(self.train_step(batch).item())
                if self.step_count % self.cfg.log_every == 0:
                    recent = losses[-self.cfg.log_every :]
                    log(f"step {self.step_count:4d}  loss {sum(recent) / len(recent):.1f}")
            self.scheduler.step()
            val_loss, val_acc = self.evaluate()
            log(f"epoch {epoch}: validation loss {val_loss:.1f}, accuracy {val_acc:.0%}")
        return losses


def main() -> None:
    Trainer(Config()).fit()


if __name__ == "__main__":
    main()
