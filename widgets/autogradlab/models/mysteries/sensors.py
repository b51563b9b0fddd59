"""Land-cover class of a field plot from 12 sensor readings: an MLP trained with SGD and momentum.

The readings are min-max scaled with the training set's range; the four classes come in unequal
shares. The recipe: SGD with Nesterov momentum and weight decay, linear warm-up then cosine decay
of the learning rate, dropout, a validation pass per epoch.

Run it:  python mystery_2.py
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
    features: int = 12
    classes: int = 4
    hidden: int = 64
    n_train: int = 4096
    n_val: int = 1024
    batch_size: int = 128
    epochs: int = 4
    lr: float = 0.1  # the peak learning rate, reached at the end of the warm-up
    momentum: float = 0.9
    weight_decay: float = 1e-4
    warmup_steps: int = 10
    min_lr_ratio: float = 0.05
    dropout: float = 0.1
    log_every: int = 16


# --------------------------------------------------------------------------- data

CLASS_SHARES = (0.45, 0.3, 0.15, 0.1)


def make_readings(n: int, cfg: Config, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows of raw readings (n, features) and their class (n,)."""
    centres = torch.rand(cfg.classes, cfg.features, generator=torch.Generator().manual_seed(7))
    labels = torch.multinomial(torch.tensor(CLASS_SHARES), n, replacement=True, generator=generator)
    x = centres[labels] + 0.25 * torch.randn(n, cfg.features, generator=generator)
    x[:, :4] = 280 + 40 * x[:, :4]  # four temperature channels, in kelvin
    return x, labels


class MinMaxScaler:
    """Scale each feature to [0, 1] with the training set's minimum and maximum."""

    def __init__(self, x: torch.Tensor):
        self.low, self.high = x.min(dim=0).values, x.max(dim=0).values

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.low) / (self.high - self.low)


def batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator | None = None):
    order = torch.randperm(len(x), generator=generator) if generator is not None else torch.arange(len(x))
    for start in range(0, len(x), batch_size):
        idx = order[start : start + batch_size]
        yield x[idx], y[idx]


# --------------------------------------------------------------------------- model


class PlotClassifier(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(cfg.features, cfg.hidden),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, cfg.classes),
        )
        for module in self.layers:
            if isinstance(module, nn.Linear):  # He initialisation suits ReLU layers
                nn.init.kaiming_uniform_(module.weight, nonlinearity="relu")
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


# --------------------------------------------------------------------------- training


def lr_factor(step: int, cfg: Config, total_steps: int) -> float:
    """The schedule, as a factor of the peak learning rate: linear warm-up to 1, cosine decay to min_lr_ratio."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        data = torch.Generator().manual_seed(2000 + cfg.seed)
        x_train, self.y_train = make_readings(cfg.n_train, cfg, data)
        x_val, self.y_val = make_readings(cfg.n_val, cfg, data)
        scale = MinMaxScaler(x_train)
        self.x_train, self.x_val = scale(x_train), scale(x_val)
        self.shuffle = torch.Generator().manual_seed(cfg.seed)
        self.model = PlotClassifier(cfg)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=True, weight_decay=cfg.weight_decay
        )
        self.total_steps = cfg.epochs * math.ceil(cfg.n_train / cfg.batch_size)
        self.step_count = 0

    def epoch_batches(self):
        return batches(self.x_train, self.y_train, self.cfg.batch_size, self.shuffle)

    def update_learning_rate(self) -> None:
        lr = lr_factor(self.step_count, self.cfg, self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def train_step(self, batch) -> torch.Tensor:
        x, y = batch
        self.model.train()
        self.update_learning_rate()
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
                    log(f"step {self.step_count:4d}  loss {sum(recent) / len(recent):.3f}")
            val_loss, val_acc = self.evaluate()
            log(f"epoch {epoch}: validation loss {val_loss:.3f}, accuracy {val_acc:.1%}")
        return losses


def main() -> None:
    Trainer(Config()).fit()


if __name__ == "__main__":
    main()
