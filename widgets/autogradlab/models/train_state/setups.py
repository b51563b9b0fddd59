"""The small seeded set-ups chapter 06's exercises run on: the notebook's demos and the checkers build the same ones.

Every builder takes a ``seed`` and leaves the global RNG as it found it, except where a run is meant
to draw from it (Dropout masks during training).

>>> model, optimizer, batches, validation = step_setup(0)
>>> len(batches), tuple(batches[0][0].shape), model.training
(3, (6, 5), True)
"""

from __future__ import annotations

import torch


def step_setup(seed: int, steps: int = 3):
    """Exercise 1: a float64 Linear-Tanh-Dropout-Linear with Adam, ``steps`` batches and a validation batch."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(
            torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Dropout(0.3), torch.nn.Linear(7, 3)
        ).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + seed)
    pair = lambda n: (
        torch.randn(n, 5, generator=gen, dtype=torch.float64),
        torch.randn(n, 3, generator=gen, dtype=torch.float64),
    )
    batches = [pair(6) for _ in range(steps)]
    return model, optimizer, batches, pair(4)


def after_validation(model, validation, loss_fn) -> None:
    """What a validation pass that forgot ``no_grad`` leaves: eval mode and stale ``.grad``."""
    model.eval()
    loss_fn(model(validation[0]), validation[1]).backward()


def coverage_scenarios():
    """Exercise 2: (label, model, optimizer) with a head added late, a frozen layer kept inside, groups, equal values."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        body = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
        opt = torch.optim.AdamW(body.parameters(), lr=1e-3)
        body.add_module("head", torch.nn.Linear(3, 3))  # added after the optimizer was built
        torch.nn.init.zeros_(body.head.bias)
        torch.nn.init.zeros_(body[2].bias)  # equal values to the head's bias: only identity tells them apart
        yield "a head added after the optimizer was built", body, opt

        net = torch.nn.ModuleDict({"embed": torch.nn.Embedding(6, 3), "proj": torch.nn.Linear(3, 5)})
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net["embed"].weight.requires_grad_(False)  # frozen after the optimizer was built
        yield "an embedding frozen after the optimizer was built", net, opt

        net = torch.nn.Sequential(torch.nn.Linear(2, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 1))
        net[0].requires_grad_(False)  # frozen before, correctly left out
        opt = torch.optim.SGD([{"params": net[1].parameters(), "lr": 0.01}, {"params": net[2].parameters()}], lr=0.1)
        yield "two param groups, a frozen layer correctly left out", net, opt

        net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
        opt = torch.optim.Adam([net[0].weight, net[1].bias], lr=0.1)
        net[1].bias.requires_grad_(False)
        net[0].bias.requires_grad_(False)
        yield "a hand-picked list of parameters", net, opt


def eval_setup(seed: int):
    """Exercise 3: a Linear-BatchNorm-ReLU-Dropout-Linear (running statistics not the defaults) and batches of 5, 3, 7."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 6),
            torch.nn.BatchNorm1d(6),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.4),
            torch.nn.Linear(6, 2),
        ).double()
        with torch.no_grad():  # a few training batches so the running statistics are not the defaults
            for _ in range(3):
                model(torch.randn(8, 4, dtype=torch.float64) * 2 + 1)
    gen = torch.Generator().manual_seed(50 + seed)
    batches = [
        (torch.randn(n, 4, generator=gen, dtype=torch.float64), torch.randn(n, 2, generator=gen, dtype=torch.float64))
        for n in (5, 3, 7)
    ]
    return model, batches


def resume_setup(seed: int):
    """Exercise 4: model with Dropout, AdamW, StepLR, and a loader that shuffles with its own generator.

    ``seed`` sets the initial weights, as a new process would; the data and the loader's seed are the run's
    configuration and do not change, so a fresh loader starts its shuffle sequence from the beginning.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(
            torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)
        ).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True).sin())
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    return model, optimizer, scheduler, loader


def resume_train(model, optimizer, scheduler, loader, epochs: int) -> None:
    """``epochs`` epochs over ``loader``: Dropout draws from the global RNG, the order from the loader's generator."""
    for _ in range(epochs):
        for x, y in loader:
            model.train()
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            scheduler.step()


__all__ = ["after_validation", "coverage_scenarios", "eval_setup", "resume_setup", "resume_train", "step_setup"]
