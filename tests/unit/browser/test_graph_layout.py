"""The server's layered layout (big experiments): edges that skip columns never pass under a step."""

import pytest

from marin_lab.browser.graph import NODE_HEIGHT, NODE_WIDTH, layout


def wide_dag(n: int) -> tuple[list[str], dict[str, list[str]]]:
    """Chains of 8 steps joined end to start, with skip edges over 2 and 5 columns."""
    deps: dict[str, list[str]] = {}
    for i in range(n):
        chain, pos = divmod(i, 8)
        parents = [f"s{i - 1:04d}"] if pos else ([f"s{(chain - 1) * 8:04d}"] if chain else [])
        if pos >= 3:
            parents.append(f"s{i - 3:04d}")
        if pos == 7:
            parents.append(f"s{i - 6:04d}")
        deps[f"s{i:04d}"] = parents
    return list(deps), deps


def _segments(g: dict, edge: dict) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    a, b = g["positions"][edge["from"]], g["positions"][edge["to"]]
    points = [
        (a["x"] + NODE_WIDTH, a["y"] + NODE_HEIGHT / 2),
        *map(tuple, edge.get("points", [])),
        (b["x"], b["y"] + NODE_HEIGHT / 2),
    ]
    return list(zip(points, points[1:], strict=False))


def _crosses(seg, box) -> bool:
    (x1, y1), (x2, y2) = seg
    x, y = box
    for k in range(101):  # straight runs and the gap curves both stay within their segment's box
        px, py = x1 + (x2 - x1) * k / 100, y1 + (y2 - y1) * k / 100
        if x < px < x + NODE_WIDTH and y < py < y + NODE_HEIGHT:
            return True
    return False


@pytest.mark.parametrize("n", [8, 64, 320])
def test_skip_edges_get_waypoints_in_free_rows(n):
    nodes, deps = wide_dag(n)
    g = layout(nodes, deps)
    assert len(g["edges"]) == sum(len(v) for v in deps.values())
    boxes = {k: (p["x"], p["y"]) for k, p in g["positions"].items()}
    assert len(set(boxes.values())) == len(boxes)
    for edge in g["edges"]:
        span = g["positions"][edge["to"]]["layer"] - g["positions"][edge["from"]]["layer"]
        assert len(edge.get("points", [])) == 2 * (span - 1)
        for seg in _segments(g, edge):
            # A segment lies either in a gap between columns (no step there) or across one column.
            for key, box in boxes.items():
                if key not in (edge["from"], edge["to"]) and abs(box[0] - seg[0][0]) <= NODE_WIDTH:
                    assert not _crosses(seg, box), f"{edge['from']} -> {edge['to']} passes under {key}"
