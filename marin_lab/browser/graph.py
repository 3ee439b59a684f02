"""A layered layout of an experiment's DAG, drawn by the page as SVG.

Layers are longest-path layers (a step sits one column right of its deepest dependency), so every
edge points rightwards. An edge that skips columns gets a waypoint in each column it crosses (a
"virtual node" in Sugiyama's terms) that takes a row there like a step does, so no step is ever
drawn on top of it. Within a column, steps and waypoints are ordered by the mean row of their
dependencies (one barycentre sweep), which removes most crossings in the pipeline-shaped DAGs
experiments have, in O(steps + edges + columns crossed).

The page lays out experiments of up to a few hundred steps itself with dagre (vendored in
static/); this layout is what it draws for bigger ones, where dagre would take seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

NODE_WIDTH = 200
NODE_HEIGHT = 36
COLUMN_GAP = 70
ROW_GAP = 16

_Waypoint = tuple[str, str, str, int]
"""("~", dependency, node, layer): where an edge crosses a column between its ends."""
_Item = str | _Waypoint


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
    """Positions for every node and the edges between them (with waypoints), in SVG user units."""
    layers = longest_path_layers(nodes, deps)
    known = set(nodes)
    columns: dict[int, list[_Item]] = {}
    for node in nodes:
        columns.setdefault(layers[node], []).append(node)
    # Waypoints of long edges: ("~", dep, node, layer) sit in the columns between their ends.
    direct = {node: [d for d in deps.get(node, ()) if d in known] for node in nodes}
    preds: dict[_Item, list[_Item]] = {node: list(ds) for node, ds in direct.items()}
    edges: list[tuple[str, str, list[_Waypoint]]] = []
    for node in nodes:
        for dep in direct[node]:
            chain: list[_Waypoint] = []
            previous: _Item = dep
            for layer in range(layers[dep] + 1, layers[node]):
                waypoint = ("~", dep, node, layer)
                preds[waypoint] = [previous]
                columns.setdefault(layer, []).append(waypoint)
                chain.append(waypoint)
                previous = waypoint
            edges.append((dep, node, chain))
    row: dict[_Item, float] = {}
    for column in sorted(columns):
        members = columns[column]
        if column > 0:

            def barycentre(item: _Item) -> float:
                rows = [row[d] for d in preds.get(item, ()) if d in row]
                return sum(rows) / len(rows) if rows else float("inf")

            members.sort(key=barycentre)
        for index, item in enumerate(members):
            row[item] = index
    step = NODE_WIDTH + COLUMN_GAP

    def y_of(item: _Item) -> int:
        return int(row[item]) * (NODE_HEIGHT + ROW_GAP)

    positions = {node: {"x": layers[node] * step, "y": y_of(node), "layer": layers[node]} for node in nodes}
    out_edges = []
    for dep, node, chain in edges:
        edge: dict = {"from": dep, "to": node}
        if chain:
            # Across each crossed column, a straight run through the waypoint's empty row.
            edge["points"] = [
                [x, y_of(w) + NODE_HEIGHT // 2] for w in chain for x in (w[3] * step, w[3] * step + NODE_WIDTH)
            ]
        out_edges.append(edge)
    width = (max(layers.values(), default=0) + 1) * step - COLUMN_GAP
    height = max((len(m) for m in columns.values()), default=0) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    return {
        "positions": positions,
        "edges": out_edges,
        "width": max(width, NODE_WIDTH),
        "height": max(height, NODE_HEIGHT),
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
    }
