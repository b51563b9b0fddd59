"""What to draw: a Graph turned into boxes and arrows, with big graphs collapsed into module groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from autogradlab.graph.groups import module_groups
from autogradlab.graph.model import Graph, Node, Saved, dtype_name, format_shape
from autogradlab.graph.saved_bytes import distinct_bytes
from autogradlab.i18n import _
from autogradlab.render import style
from autogradlab.units import format_bytes

MAX_NODES = 150  # above this, collapse="auto" draws module groups
NOTE_RESERVE = "‖g‖=0.00123"  # room kept for a gradient-norm note while stepping
STUB_TEXT_MAX_BOXES = 60  # "no grad needed" is spelled out only in small drawings


@dataclass
class Box:
    """One drawn box: a node, or a collapsed module group (``members`` lists node ids)."""

    kind: str  # output | op | param | leaf | group
    lines: list[str]
    members: list[int]
    saved: list[Saved] = field(default_factory=list)
    badge_lines: list[tuple[str, str]] = field(default_factory=list)  # (text, state)
    tooltip: str = ""
    no_grad: int = 0
    note: str = ""
    classes: str = ""
    body_w: float = 0.0
    body_h: float = 0.0
    badge_w: float = 0.0
    note_w: float = 0.0
    stub_text: str = ""  # "no grad needed", drawn left of the dashed stub under the box
    reserve_note: bool = False

    @property
    def left(self) -> float:
        # The stub leaves the box 8 px inside its left edge, turns left, and its text ends 5 px left of the edge.
        stub = style.text_width(self.stub_text, small=True) + 5 if self.stub_text else 0.0
        return self.body_w / 2 + max(self.note_w + 6 if self.note or self.reserve_note else 0.0, stub)

    @property
    def right(self) -> float:
        return self.body_w / 2 + (6 + self.badge_w if self.badge_lines else 0.0)

    @property
    def height(self) -> float:
        n = len(self.badge_lines)
        return max(self.body_h, n * style.BADGE_H + max(n - 1, 0) * style.BADGE_GAP)


@dataclass
class Arrow:
    src: int
    dst: int
    label: str
    highlight: bool = False


@dataclass
class Scene:
    boxes: list[Box]
    arrows: list[Arrow]
    collapsed: bool
    groups: list[str]  # names of all groups (collapsed or expanded), in forward order
    shared: bool = False  # some badges share a storage (marked ≡1, ≡2, ...)


def _shape_text(shape, dtype) -> str:
    text = format_shape(shape)
    if dtype is not None and dtype_name(dtype) != "float32":
        text += f" {dtype_name(dtype)}"
    return text


def _badge(saved: Saved, shapes: bool) -> tuple[str, str]:
    text = saved.name
    if saved.state == "freed":
        text += " freed"
    elif shapes:
        text += " " + format_shape(saved.shape)
    if saved.state == "stale":
        text += f" ✗ v{saved.version_saved}→{saved.version_now}"
    return text, saved.state


def _node_box(node: Node, shapes: bool, saved: bool) -> Box:
    if node.kind == "leaf":
        kind = "param" if node.param_name else "leaf"
        second = node.param_name or "leaf"
        if shapes:
            second += " " + _shape_text(node.shape, node.dtype)
        lines = [node.name, second]
        tip = _("{node}: backward adds the gradient into {leaf}.grad").format(
            node=node.name, leaf=node.param_name or _("this leaf")
        )
    else:
        kind = node.kind
        lines = [node.name] + ([_shape_text(node.shape, node.dtype)] if shapes and node.shape is not None else [])
        tip = _("{node}: forward result {shape}").format(node=node.name, shape=_shape_text(node.shape, node.dtype))
        if len(node.output_shapes) > 1:
            tip += _(" (one of {count} outputs: {shapes})").format(
                count=len(node.output_shapes), shapes=", ".join(map(format_shape, node.output_shapes))
            )
    if node.saved and saved:
        tip += "\n" + _("saved for backward:") + "\n" + "\n".join("  " + s.describe() for s in node.saved)
    if node.inputs_without_grad:
        tip += "\n" + _("{count} input(s) need no gradient (next_functions holds None): no grad needed here").format(
            count=node.inputs_without_grad
        )
    box = Box(kind, lines, [node.id], tooltip=tip, no_grad=node.inputs_without_grad)
    if saved:
        box.saved = list(node.saved)
        box.badge_lines = [_badge(s, shapes) for s in node.saved]
    return box


def _group_box(name: str, members: list[Node], saved: bool) -> Box:
    ops = sum(n.kind == "op" for n in members)
    leaves = sum(n.kind == "leaf" for n in members)
    lines = [f"▸ {name}", _("{ops} ops · {leaves} leaves").format(ops=ops, leaves=leaves)]
    records = [s for n in members for s in n.saved]
    stale = sum(s.state == "stale" for s in records)
    if saved:
        held = distinct_bytes(
            (s.storage, s.storage_nbytes) for s in records if s.state != "freed" and s.leaf_name is None
        )
        lines.append(_("saved {size}").format(size=format_bytes(held)) + (f" · {stale} STALE" if stale else ""))
    tip = _("module group {name}: {count} nodes, collapsed (expand it to see them)").format(
        name=name, count=len(members)
    )
    return Box("group", lines, [n.id for n in members], tooltip=tip, classes="stale" if stale else "")


def build_scene(
    graph: Graph,
    *,
    saved: bool = True,
    shapes: bool = True,
    collapse: bool | str = "auto",
    expand: Iterable[str] = (),
    max_nodes: int = MAX_NODES,
    highlight: int | None = None,
    visited: Iterable[int] = (),
    notes: Mapping[int, str] | None = None,
) -> Scene:
    """Boxes and arrows for ``graph`` with the given options (see :func:`autogradlab.render.to_svg`)."""
    if collapse == "auto":
        collapse = len(graph.nodes) > max_nodes
    groups = module_groups(graph) if collapse else {}
    expanded = set(expand)
    group_order: list[str] = []
    for n in sorted(
        (n for n in graph.nodes if n.id in groups), key=lambda n: (n.forward_index is None, n.forward_index or 0, n.id)
    ):
        if groups[n.id] not in group_order:
            group_order.append(groups[n.id])
    box_of: dict[int, int] = {}
    boxes: list[Box] = []
    group_box: dict[str, int] = {}
    members: dict[str, list[Node]] = {}
    for n in graph.nodes:
        g = groups.get(n.id)
        if g is not None and g not in expanded:
            members.setdefault(g, []).append(n)
    for n in graph.nodes:  # node order is topological: keep it for boxes (a group sits at its first member)
        g = groups.get(n.id)
        if g is not None and g not in expanded:
            if g not in group_box:
                group_box[g] = len(boxes)
                boxes.append(_group_box(g, members[g], saved))
            box_of[n.id] = group_box[g]
        else:
            box_of[n.id] = len(boxes)
            boxes.append(_node_box(n, shapes, saved))

    visited = set(visited)
    # Given notes (even none yet), every box keeps room for one, so stepping does not move the layout.
    reserve = style.text_width(NOTE_RESERVE, small=True) if notes is not None else 0.0
    notes = dict(notes or {})
    for box in boxes:
        ids = box.members
        classes = [box.classes] if box.classes else []
        if highlight is not None and highlight in ids:
            classes.append("cur")
        elif any(i in visited for i in ids):
            classes.append("done")
        box.classes = " ".join(classes)
        box.note = " ".join(notes[i] for i in ids if i in notes) if len(ids) == 1 else ""
        if box.no_grad and len(boxes) <= STUB_TEXT_MAX_BOXES:
            box.stub_text = (
                _("no grad needed") if box.no_grad == 1 else _("{count}× no grad needed").format(count=box.no_grad)
            )
    shared = _mark_shared_storage(boxes)
    _measure(boxes, reserve)

    arrows: list[Arrow] = []
    merged: dict[tuple[int, int], int] = {}
    for e in graph.edges:
        a, b = box_of[e.src], box_of[e.dst]
        if a == b:
            continue
        hl = highlight is not None and e.src == highlight
        if boxes[a].kind == "group" or boxes[b].kind == "group":
            key = (a, b)
            if key in merged:
                arrow = arrows[merged[key]]
                count = int(arrow.label.split("×")[1]) + 1 if "×" in arrow.label else 2
                arrow.label = f"×{count}"
                continue
            merged[key] = len(arrows)
        arrows.append(Arrow(a, b, format_shape(e.shape) if shapes and e.shape is not None else "", hl))
    return Scene(boxes, arrows, bool(collapse), group_order, shared)


def _mark_shared_storage(boxes: list[Box]) -> bool:
    """Append ≡k to badges whose tensors share one storage: the memory is held once, not per badge."""
    uses: dict[int, int] = {}
    for box in boxes:
        for s in box.saved:
            if s.storage is not None and s.state != "freed":
                uses[s.storage] = uses.get(s.storage, 0) + 1
    tags: dict[int, int] = {}
    for box in boxes:
        for k, s in enumerate(box.saved):
            if s.storage is not None and s.state != "freed" and uses[s.storage] > 1:
                tag = tags.setdefault(s.storage, len(tags) + 1)
                text, state = box.badge_lines[k]
                box.badge_lines[k] = (f"{text} ≡{tag}", state)
    return bool(tags)


def _measure(boxes: list[Box], note_reserve: float = 0.0) -> None:
    for box in boxes:
        widths = [style.text_width(box.lines[0])] + [style.text_width(t, small=True) for t in box.lines[1:]]
        box.body_w = max(widths) + 2 * style.PAD_X
        box.body_h = 2 * style.PAD_Y + len(box.lines) * style.LINE_H
        if box.badge_lines:
            box.badge_w = max(style.text_width(t, small=True) for t, _ in box.badge_lines) + 10
        if box.note:
            box.note_w = style.text_width(box.note, small=True)
        if note_reserve and box.kind != "group":
            box.note_w = max(box.note_w, note_reserve)
            box.reserve_note = True
