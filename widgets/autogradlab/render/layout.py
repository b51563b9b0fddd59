"""A layered (Sugiyama-style) layout in pure Python: no system binary, linear-ish in graph size.

1. Layers: each node goes one layer below the lowest node that points to it
   (longest path from the outputs), so a leaf sits right under the op that uses it.
2. Long edges get one invisible "dummy" point per layer they cross, so they can
   bend around nodes instead of cutting through them.
3. Order within a layer: depth-first order, then a few barycenter sweeps (each node
   moves towards the mean position of its neighbours) to remove crossings.
4. x positions: each sweep asks every node to sit at the mean x of its neighbours and
   then finds the closest positions that keep the order and the gaps (isotonic
   regression by pool-adjacent-violators, exact and O(n) per layer).

Everything is deterministic: ties are broken by index, never by hashing or ``id()``.

>>> lay = layered_layout([(20, 20, 10), (20, 20, 10), (20, 20, 10)], [(0, 1), (0, 2)])
>>> [lay.layer[i] for i in range(3)]
[0, 1, 1]
>>> lay.x[0] == (lay.x[1] + lay.x[2]) / 2   # the parent is centred over its children
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

H_GAP = 18.0  # horizontal space between neighbours in a layer
V_GAP = 36.0  # vertical space between layers (room for an edge label)
DUMMY_HALF = 3.0
SWEEPS = 4  # barycenter ordering passes
PLACE_PASSES = 3  # x-positioning passes


@dataclass
class Layout:
    """Positions: ``x[i]`` is node i's anchor (where its edges attach), ``y[i]`` its top edge.

    ``routes[k]`` lists the points of edge k from its source's bottom to its target's top.
    """

    x: list[float]
    y: list[float]
    layer: list[int]
    routes: list[list[tuple[float, float]]]
    width: float
    height: float
    layer_tops: list[float] = field(default_factory=list)


def _layers(n: int, edges: list[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Longest-path layering; edges are oriented from lower to higher index (back edges flipped)."""
    down = [(u, v) if u < v else (v, u) for u, v in edges if u != v]
    incoming: list[list[int]] = [[] for _ in range(n)]
    for u, v in down:
        incoming[v].append(u)
    layer = [0] * n
    for v in range(n):  # index order is a topological order of the oriented edges
        for u in incoming[v]:
            if layer[u] + 1 > layer[v]:
                layer[v] = layer[u] + 1
    return layer, down


def _pav(desired: list[float], offsets: list[float]) -> list[float]:
    """Closest positions (least squares) to ``desired`` with x[i+1] - x[i] >= offsets[i+1] - offsets[i]."""
    if len(desired) == 1:
        return list(desired)
    # Shift by the cumulative minimum gaps: the constraint becomes "non-decreasing".
    values = [d - o for d, o in zip(desired, offsets)]
    if all(a <= b for a, b in zip(values, values[1:])):
        return list(desired)  # already feasible: nothing to move
    means: list[float] = []
    counts: list[int] = []
    for value in values:
        mean, count = value, 1
        while means and means[-1] > mean:
            prev_mean, prev_count = means.pop(), counts.pop()
            mean = (prev_mean * prev_count + mean * count) / (prev_count + count)
            count += prev_count
        means.append(mean)
        counts.append(count)
    out: list[float] = []
    for mean, count in zip(means, counts):
        out.extend([mean] * count)
    return [v + o for v, o in zip(out, offsets)]


@dataclass
class _Points:
    """Real nodes (indices < n) and the dummies of long edges: their layer, extents and links."""

    layer: list[int]
    left: list[float]
    right: list[float]
    chains: list[list[int]]  # per oriented edge: the points it passes, source first
    ups: list[list[int]]
    downs: list[list[int]]


def _with_dummies(sizes: list[tuple[float, ...]], layer: list[int], down: list[tuple[int, int]]) -> _Points:
    """Step 2: one dummy point per layer a long edge crosses."""
    points = _Points(list(layer), [s[0] for s in sizes], [s[1] for s in sizes], [], [], [])
    for u, v in down:
        chain = [u]
        for depth in range(layer[u] + 1, layer[v]):
            points.layer.append(depth)
            points.left.append(DUMMY_HALF)
            points.right.append(DUMMY_HALF)
            chain.append(len(points.layer) - 1)
        chain.append(v)
        points.chains.append(chain)
    total = len(points.layer)
    points.ups = [[] for _ in range(total)]
    points.downs = [[] for _ in range(total)]
    for chain in points.chains:
        for a, b in zip(chain, chain[1:]):
            points.downs[a].append(b)
            points.ups[b].append(a)
    return points


def _ordered_rows(points: _Points) -> list[list[int]]:
    """Step 3: points per layer in depth-first order from the top, then barycenter sweeps."""
    total = len(points.layer)
    n_layers = max(points.layer) + 1 if total else 0
    rows: list[list[int]] = [[] for _ in range(n_layers)]
    seen = [False] * total
    for start in range(total):  # depth-first from each top point, so subtrees stay together
        if seen[start] or points.ups[start]:
            continue
        stack = [start]
        while stack:
            p = stack.pop()
            if seen[p]:
                continue
            seen[p] = True
            rows[points.layer[p]].append(p)
            stack.extend(reversed([c for c in points.downs[p] if not seen[c]]))
    for p in range(total):  # anything only reachable through a cycle-free but unseen path
        if not seen[p]:
            seen[p] = True
            rows[points.layer[p]].append(p)

    pos = [0.0] * total
    for row in rows:
        for i, p in enumerate(row):
            pos[p] = float(i)
    for k in range(SWEEPS):
        down = k % 2 == 0
        neighbours = points.ups if down else points.downs
        for r in range(1, n_layers) if down else range(n_layers - 2, -1, -1):
            keys = []
            for i, p in enumerate(rows[r]):
                nbs = neighbours[p]
                keys.append((sum(pos[q] for q in nbs) / len(nbs) if nbs else pos[p], i, p))
            keys.sort()
            rows[r] = [p for _, _, p in keys]
            for i, p in enumerate(rows[r]):
                pos[p] = float(i)
    return rows


def _x_positions(points: _Points, rows: list[list[int]], h_gap: float) -> list[float]:
    """Step 4: pack each row, then pull points towards their neighbours' mean x (keeping order and gaps)."""
    x = [0.0] * len(points.layer)
    offsets_of: list[list[float]] = []
    for row in rows:
        offsets = []
        acc = 0.0
        for i, p in enumerate(row):
            if i:
                acc += points.right[row[i - 1]] + h_gap + points.left[p]
            offsets.append(acc)
        offsets_of.append(offsets)
        half = offsets[-1] / 2 if offsets else 0.0
        for p, o in zip(row, offsets):
            x[p] = o - half
    n_layers = len(rows)
    for k in range(PLACE_PASSES):  # down, up, down: the last pass aligns children under parents
        down = k % 2 == 0
        neighbours = points.ups if down else points.downs
        for r in range(1, n_layers) if down else range(n_layers - 2, -1, -1):
            desired = [
                sum(x[q] for q in neighbours[p]) / len(neighbours[p]) if neighbours[p] else x[p] for p in rows[r]
            ]
            for p, value in zip(rows[r], _pav(desired, offsets_of[r])):
                x[p] = value
    return x


def layered_layout(
    sizes: list[tuple[float, ...]],
    edges: list[tuple[int, int]],
    h_gap: float = H_GAP,
    v_gap: float = V_GAP,
) -> Layout:
    """Lay out nodes given as ``(left_extent, right_extent, height[, edge_start])`` around their anchor.

    Edges leave a node at ``edge_start`` below its top (default: its height), so a
    box with side badges taller than itself sends its edges from its own bottom.

    ``edges`` are ``(upper, lower)`` index pairs; node order should be roughly
    topological (outputs first), as :func:`autogradlab.graph.capture` gives it.
    """
    n = len(sizes)
    layer, down = _layers(n, edges)
    points = _with_dummies(sizes, layer, down)
    rows = _ordered_rows(points)
    x = _x_positions(points, rows, h_gap)

    # y: each layer is as tall as its tallest node.
    heights = [0.0] * len(rows)
    for p in range(n):
        heights[points.layer[p]] = max(heights[points.layer[p]], sizes[p][2])
    tops = []
    acc = 0.0
    for h in heights:
        tops.append(acc)
        acc += h + v_gap
    total = len(points.layer)
    min_x = min((x[p] - points.left[p] for p in range(total)), default=0.0)
    max_x = max((x[p] + points.right[p] for p in range(total)), default=0.0)
    x = [v - min_x for v in x]

    routes: list[list[tuple[float, float]]] = []
    chains = iter(points.chains)
    for u, v in edges:
        if u == v:
            routes.append([])
            continue
        chain = next(chains)
        source = sizes[chain[0]]
        pts = [(x[chain[0]], tops[layer[chain[0]]] + (source[3] if len(source) > 3 else source[2]))]
        for p in chain[1:-1]:
            pts.append((x[p], tops[points.layer[p]] + heights[points.layer[p]] / 2))
        pts.append((x[chain[-1]], tops[layer[chain[-1]]]))
        routes.append(pts if u < v else pts[::-1])
    return Layout(
        x=x[:n],
        y=[tops[layer[i]] for i in range(n)],
        layer=layer,
        routes=routes,
        width=max_x - min_x,
        height=max(acc - v_gap, 0.0),
        layer_tops=tops,
    )
