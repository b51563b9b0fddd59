"""Next-token prediction on variable-length event sequences, with gradient accumulation.

The recipe was tuned with batches of 32 sequences. A batch of 32 long sequences does not fit
in memory on the target machine, so the script runs micro-batches of 8 and accumulates the
gradients of 4 of them before each optimizer step: the same 32 sequences per step, in the same
order, so the run should follow the batch-32 run. Padding positions are left out of the loss.

Run it:  python mystery_3.py
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

IGNORE = -100  # target id that cross_entropy leaves out (padding)


@dataclass
class Config:
    seed: int = 0
    vocab: int = 32
    dim: int = 32
    hidden: int = 64
    n_train: int = 1024
    micro_batch: int = 8
    accum_steps: int = 4  # micro_batch * accum_steps = the batch of 32 the recipe was tuned with
    epochs: int = 3
    lr: float = 3e-3
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    log_every: int = 8


# --------------------------------------------------------------------------- data


def make_sequences(n: int, cfg: Config, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` event sequences (n, L) padded with 0, and the next-event targets (n, L - 1) with IGNORE on padding.

    Each sequence steps through the event ids with its own stride, with some random events (more
    in short sequences). Most sequences are short, a few are long (lengths 2..48).
    """
    lengths = (2 + 46 * torch.rand(n, generator=generator) ** 3).long()
    width = int(lengths.max())
    start = torch.randint(0, cfg.vocab, (n, 1), generator=generator)
    stride = torch.randint(1, 6, (n, 1), generator=generator)
    events = (start + stride * torch.arange(width)) % cfg.vocab
    noise = torch.rand(n, width, generator=generator) < torch.where(lengths[:, None] <= 6, 0.5, 0.05)
    events = torch.where(noise, torch.randint(0, cfg.vocab, (n, width), generator=generator), events)
    real = torch.arange(width) < lengths[:, None]
    targets = events[:, 1:].masked_fill(~real[:, 1:], IGNORE)
    return events.masked_fill(~real, 0), targets


def windows(n: int, cfg: Config, generator: torch.Generator):
    """Index tensors of the micro-batches, grouped in windows of accum_steps (one optimizer step each)."""
    order = torch.randperm(n, generator=generator)
    size = cfg.micro_batch * cfg.accum_steps
    for start in range(0, n - size + 1, size):
        window = order[start : start + size]
        yield [window[k : k + cfg.micro_batch] for k in range(0, size, cfg.micro_batch)]


# --------------------------------------------------------------------------- model


class NextEvent(nn.Module):
    """Predicts each next event from the current and the previous one."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.mix = nn.Linear(2 * cfg.dim, cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.vocab)

    def forward(self, events: torch.Tensor) -> torch.Tensor:
        e = self.embed(events)
        previous = F.pad(e[:, :-1], (0, 0, 1, 0))  # the event before each position (zeros at the start)
        return self.out(torch.relu(self.mix(torch.cat([e, previous], dim=-1))))


# --------------------------------------------------------------------------- training


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.events, self.targets = make_sequences(cfg.n_train, cfg, torch.Generator().manual_seed(3000 + cfg.seed))
        self.shuffle = torch.Generator().manual_seed(cfg.seed)
        self.model = NextEvent(cfg)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        steps = cfg.epochs * (cfg.n_train // (cfg.micro_batch * cfg.accum_steps))
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=steps, eta_min=cfg.lr / 10)

    def epoch_batches(self):
        """One window (a list of accum_steps micro-batches) per optimizer step."""
        for window in windows(self.cfg.n_train, self.cfg, self.shuffle):
            yield [(self.events[idx], self.targets[idx]) for idx in window]

    def train_step(self, window) -> float:
        self.model.train()
        self.optimizer.zero_grad()
        total = 0.0
        for events, targets in window:
            logits = self.model(events)[:, :-1]  # the last position has no next event
            loss = F.cross_entropy(logits.reshape(-1, self.cfg.vocab), targets.reshape(-1), ignore_index=IGNORE)
            loss = loss / self.cfg.accum_steps  # average over the window's micro-batches
            loss.backward()
            total += loss.item()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return total

    def fit(self, log=print) -> list[float]:
        losses = []
        for epoch in range(self.cfg.epochs):
            for window in self.epoch_batches():
                losses.append(self.train_step(window))
                if len(losses) % self.cfg.log_every == 0:
                    recent = losses[-self.cfg.log_every :]
                    log(f"step {len(losses):4d}  loss {sum(recent) / len(recent):.4f}")
            per_epoch = self.cfg.n_train // (self.cfg.micro_batch * self.cfg.accum_steps)
            log(f"epoch {epoch}: mean training loss {sum(losses[-per_epoch:]) / per_epoch:.4f}")
        return losses


def main() -> None:
    Trainer(Config()).fit()


if __name__ == "__main__":
    main()
