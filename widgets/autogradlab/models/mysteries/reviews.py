"""Sentiment of short reviews: a bag-of-embeddings classifier trained in bf16 mixed precision.

Each review is a sequence of token ids (0 is padding); the label says whether it is positive.
The recipe: AdamW with weight decay on the matrices only, linear warm-up then cosine decay,
bf16 autocast with a GradScaler, gradient clipping after unscaling, a validation pass per epoch.

Run it:  python mystery_1.py
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
    vocab: int = 200
    dim: int = 64
    hidden: int = 128
    n_train: int = 2048
    n_val: int = 512
    batch_size: int = 64
    epochs: int = 3
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    log_every: int = 16
    amp_dtype: torch.dtype = torch.bfloat16


# --------------------------------------------------------------------------- data

POSITIVE = range(1, 13)  # ids of words that make a review positive ...
NEGATIVE = range(13, 25)  # ... or negative; the other ids are neutral words, 0 is padding


def make_reviews(n: int, cfg: Config, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """``n`` padded reviews (n, L), their lengths (n,) and labels (n,) as floats (1 = positive).

    A review holds k words of its own sentiment and k - 2 of the other (k = 2..5) among neutral ones.
    """
    lengths = torch.randint(8, 33, (n,), generator=generator)
    width = int(lengths.max())
    tokens = torch.randint(25, cfg.vocab, (n, width), generator=generator)
    labels = torch.randint(0, 2, (n,), generator=generator)
    k = torch.randint(2, 6, (n, 1), generator=generator)
    words = torch.randint(0, 12, (n, 8), generator=generator)
    positive = labels[:, None].bool()
    own = torch.where(positive, words + POSITIVE.start, words + NEGATIVE.start)
    other = torch.where(positive, words + NEGATIVE.start, words + POSITIVE.start)
    keys = torch.rand(n, width, generator=generator).masked_fill(torch.arange(width) >= lengths[:, None], 2.0)
    where = keys.argsort(dim=1)[:, :8]  # 8 distinct positions inside each review
    slot = torch.arange(8)
    chosen = torch.where(slot < k, own, torch.where(slot < 2 * k - 2, other, tokens.gather(1, where)))
    tokens = tokens.scatter(1, where, chosen)
    padding = torch.arange(width) >= lengths[:, None]
    return tokens.masked_fill(padding, 0), lengths, labels.float()


def batches(data: tuple[torch.Tensor, ...], batch_size: int, generator: torch.Generator | None = None):
    """Mini-batches (tokens, lengths, labels); shuffled when a generator is given."""
    n = len(data[0])
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        yield tuple(t[idx] for t in data)


# --------------------------------------------------------------------------- model


class Float32Head(nn.Module):
    """A linear classifier head that computes in float32 under autocast.

    bf16 keeps 8 bits of mantissa: logits near 0 lose the small differences the loss needs,
    so the head reads float32 copies of its input and weight. The weight starts at zero,
    so the model starts at the prior (the trick of a zero-initialised last layer).
    """

    def __init__(self, dim: int, out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out, dim))
        self.bias = nn.Parameter(torch.zeros(out))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):
            return F.linear(h.float(), self.weight.data.float(), self.bias.float())


class ReviewClassifier(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim, padding_idx=0)
        self.body = nn.Sequential(
            nn.Linear(cfg.dim, cfg.hidden),
            nn.GELU(),
            nn.LayerNorm(cfg.hidden),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.GELU(),
        )
        self.head = Float32Head(cfg.hidden, 1)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.1)
        if isinstance(module, nn.Linear):
            module.bias.data.zero_()
        if isinstance(module, nn.Embedding):
            module.weight.data[module.padding_idx].zero_()

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        summed = self.embed(tokens).sum(dim=1)  # padding embeds to zero
        pooled = summed / lengths[:, None].to(summed.dtype)  # mean over the real tokens
        return self.head(self.body(pooled)).squeeze(-1)


# --------------------------------------------------------------------------- training


def lr_at(step: int, cfg: Config, total: int) -> float:
    """Linear warm-up to cfg.lr, then cosine decay to 10 % of it."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        data = torch.Generator().manual_seed(1000 + cfg.seed)
        self.train_data = make_reviews(cfg.n_train, cfg, data)
        self.val_data = make_reviews(cfg.n_val, cfg, data)
        self.shuffle = torch.Generator().manual_seed(cfg.seed)
        self.model = ReviewClassifier(cfg)
        matrices = [p for p in self.model.parameters() if p.dim() >= 2]
        others = [p for p in self.model.parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": matrices, "weight_decay": cfg.weight_decay}, {"params": others, "weight_decay": 0.0}],
            lr=cfg.lr,
        )
        self.scaler = torch.amp.GradScaler("cpu")  # keeps small bf16 gradients from flushing to zero
        self.total_steps = cfg.epochs * math.ceil(cfg.n_train / cfg.batch_size)
        self.step_count = 0
        self.grad_norm = float("nan")

    def epoch_batches(self):
        return batches(self.train_data, self.cfg.batch_size, self.shuffle)

    def train_step(self, batch) -> torch.Tensor:
        tokens, lengths, labels = batch
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.step_count, self.cfg, self.total_steps)
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=self.cfg.amp_dtype):
            logits = self.model(tokens, lengths)
            loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.grad_norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step_count += 1
        return loss.detach()

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        self.model.eval()
        tokens, lengths, labels = self.val_data
        with torch.autocast("cpu", dtype=self.cfg.amp_dtype):
            logits = self.model(tokens, lengths).float()
        accuracy = ((logits > 0).float() == labels).float().mean().item()
        return F.binary_cross_entropy_with_logits(logits, labels).item(), accuracy

    def fit(self, log=print) -> list[float]:
        losses = []
        for epoch in range(self.cfg.epochs):
            for batch in self.epoch_batches():
                losses.append(self.train_step(batch).item())
                if self.step_count % self.cfg.log_every == 0:
                    recent = losses[-self.cfg.log_every :]
                    log(
                        f"step {self.step_count:4d}  loss {sum(recent) / len(recent):.4f}  "
                        f"grad norm {self.grad_norm:.3f}  scale {self.scaler.get_scale():.0f}"
                    )
            val_loss, val_acc = self.evaluate()
            log(f"epoch {epoch}: validation loss {val_loss:.4f}, accuracy {val_acc:.1%}")
        return losses


def main() -> None:
    Trainer(Config()).fit()


if __name__ == "__main__":
    main()
