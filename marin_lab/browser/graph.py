"""A layered layout of an experiment's DAG, drawn by the page as SVG.

Layers are longest-path layers (a step sits one column right of its deepest dependency), so every
edge points rightwards. Within a column, steps are ordered by the mean row of their dependencies
(one barycentre sweep), which removes most crossings in the pipeline-shaped DAGs experiments
have, in O(steps + edges).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

NODE_WIDTH = 200
NODE_HEIGHT = 36
COLUMN_GAP = 70
ROW_GAP = 16


def longest_path_layers(nodes: Sequence[str], deps: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Layer of each node: 0 without dependencies, else 1 + the deepest dependency's layer.

    Dependencies outside `nodes` are ignored; a cycle (never written by the executor, but a
    corrupt file might hold one) is broken where it is found rather than looping forever.
    """
    known = set(nodes)
    layer: dict[str, int] = {}
    on_stack: set[str] = set()
    for start in nodes:
        if start in layer:
            continue
        # Iterative depth-first search: experiments can be thousands of steps deep.
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, index = stack.pop()
            parents = [d for d in deps.get(node, ()) if d in known]
            if index == 0:
                on_stack.add(node)
            if index < len(parents):
                stack.append((node, index + 1))
                parent = parents[index]
                if parent not in layer and parent not in on_stack:
                    stack.append((parent, 0))
                continue
            on_stack.discard(node)
            layer[node] = 1 + max((layer[p] for p in parents if p in layer), default=-1)
    return layer


def layout(nodes: Sequence[str], deps: Mapping[str, Sequence[str]]) -> dict:
    """Positions for every node and the edges between them, in SVG user units."""
    layers = longest_path_layers(nodes, deps)
    columns: dict[int, list[str]] = {}
    for node in nodes:
        columns.setdefault(layers[node], []).append(node)
    row: dict[str, float] = {}
    for column in sorted(columns):
        members = columns[column]
        if column > 0:
            def barycentre(node: str) -> float:
                rows = [row[d] for d in deps.get(node, ()) if d in row]
                return sum(rows) / len(rows) if rows else float("inf")

            members.sort(key=barycentre)
        for index, node in enumerate(members):
            row[node] = index
    positions = {
        node: {
            "x": layers[node] * (NODE_WIDTH + COLUMN_GAP),
            "y": int(row[node]) * (NODE_HEIGHT + ROW_GAP),
            "layer": layers[node],
        }
        for node in nodes
    }
    edges = [
        {"from": dep, "to": node}
        for node in nodes
        for dep in deps.get(node, ())
        if dep in positions
    ]
    width = (max(layers.values(), default=0) + 1) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    height = max((len(m) for m in columns.values()), default=0) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    return {
        "positions": positions,
        "edges": edges,
        "width": max(width, NODE_WIDTH),
        "height": max(height, NODE_HEIGHT),
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
    }
