"""Collectives of a compiled XLA program, read from its optimized HLO text, counted per step.

What a step sends is a fact of the compiled program, not of the model, so it is read from
`compiled.as_text()`:

- Within a slice (ICI): `all-gather`, `all-reduce`, `reduce-scatter`, `all-to-all`,
  `collective-permute` and their async `-start` halves (the `-done` halves are not counted twice).
- Across slices (DCN): a multislice program is compiled per slice; what crosses slices appears as
  host `send`/`recv` pairs tagged `_xla_megascale_transfer_type` (ALL_GATHER, ALL_REDUCE, ...).
  Each `send` is one transfer; its payload is what this chip puts on the data-centre network.

A collective inside a `while` body (the layer scan, microbatch accumulation) runs once per
iteration: every computation is weighted by the product of the trip counts of the loops that
call it. A trip count is read from the loop's `known_trip_count` when XLA states it, else from its
condition (`counter < constant`, the counter starting at the constant the loop is entered with).

Bytes are per chip and per step: an all-gather counts its gathered result, a reduce-scatter its
full input (result x group size), an all-reduce and the rest their buffer, a DCN send its payload.

What a collective carries is named by the JAX `op_name` metadata of the instructions its payload
is made of (a send's operand is often a bitcast or fusion without metadata: the search walks back
along data operands, never along tokens, and into loop-carried values). Backward-pass values are
`transpose(jvp(...))`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import defaultdict, deque

_DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3b11fnuz": 1,
    "f8e4m3fnuz": 1,
    "f8e5m2fnuz": 1,
    "s4": 0.5,
    "u4": 0.5,
}
_ICI_KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][\w\-]*)\((.*)$")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")
_CALLEES = re.compile(
    r"\b(?:body|condition|calls|to_apply|branch_computations|true_computation|"
    r"false_computation)=\{?([^,}]+(?:,\s*%[\w.\-]+)*)\}?"
)
_MEGASCALE = re.compile(r'_xla_megascale_transfer_type="([A-Z_]+)"')
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]")
_LIST_GROUPS = re.compile(r"replica_groups=\{\{([0-9,]*)\}")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_RENDEZVOUS = re.compile(r'_xla_host_transfer_rendezvous="([\w.\-]+?)(?:_\d+)?"')
_NOT_DATA = ("after-all", "partition-id", "replica-id", "constant")
_SOURCE_SEARCH = 256
"""Instructions visited at most when looking for the op_name of a collective's payload."""


@dataclasses.dataclass(frozen=True)
class Collective:
    """One kind of collective over one network, summed over a step."""

    kind: str
    """all-gather, all-reduce, reduce-scatter, all-to-all or collective-permute."""
    scope: str
    """'ici' (within a slice) or 'dcn' (across slices)."""
    count: int
    """How many run per step (loop bodies counted once per iteration)."""
    bytes: int
    """Bytes per chip per step (see the module docstring)."""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Op:
    computation: str
    name: str
    kind: str
    scope: str
    bytes: float
    shape: str
    collective: str
    payload: str
    """The instruction whose value is sent (a send's first operand, else the collective itself)."""


def array_bytes(shape_text: str) -> float:
    """Bytes of every array in an HLO shape (a tuple's arrays summed; tokens and u32 flags too)."""
    total = 0.0
    for dtype, dims in _ARRAY.findall(shape_text):
        if dtype not in _DTYPE_BYTES:
            continue
        total += _DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return total


def _group_size(rest: str) -> int:
    m = _IOTA_GROUPS.search(rest)
    if m:
        return int(m.group(2))
    m = _LIST_GROUPS.search(rest)
    if m:
        return len([x for x in m.group(1).split(",") if x])
    m = _MESH_GROUPS.search(rest)
    if m:
        sizes = dict(re.findall(r"'?([\w]+)'?=(\d+)", m.group(1)))
        axes = re.findall(r"'?([\w]+)'?", m.group(2))
        return math.prod(int(sizes.get(a, 1)) for a in axes) if axes else 1
    return 1


def _payload_shape(shape_text: str) -> str:
    # A send's shape is (payload, u32[] context, token[]): only the payload travels.
    first = _ARRAY.search(shape_text)
    return first.group(0) if first else ""


@dataclasses.dataclass(frozen=True)
class CollectiveOp:
    """One collective instruction of the program."""

    name: str
    kind: str
    scope: str
    runs_per_step: int
    """1 outside loops; the product of the enclosing loops' trip counts inside them."""
    bytes: int
    """Bytes per chip each time it runs."""
    shape: str = ""
    """The payload's HLO shape (a DCN send's payload, a collective's result), e.g. 'bf16[64,8,128]'."""
    collective: str = ""
    """The HLO collective it implements: its own name, or for a DCN send the collective the
    compiler split into host transfers (e.g. 'all-reduce.94')."""
    sources: tuple[str, ...] = ()
    """The JAX op_names of what its payload is made of: along each path back from the payload, the
    first instruction that has one (a combined all-reduce has several; empty if none has one)."""


def parse_collectives(hlo_text: str) -> list[Collective]:
    """Per-step collectives of one optimized HLO module, grouped by (kind, scope)."""
    return aggregate(collective_ops(hlo_text))


def aggregate(ops: list[CollectiveOp]) -> list[Collective]:
    """Instructions grouped by (kind, scope): ICI first, each summed over a step."""
    grouped: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for op in ops:
        grouped[(op.kind, op.scope)][0] += op.runs_per_step
        grouped[(op.kind, op.scope)][1] += op.runs_per_step * op.bytes
    return [
        Collective(kind, scope, count, size)
        for (kind, scope), (count, size) in sorted(grouped.items(), key=lambda kv: (kv[0][1] != "ici", kv[0][0]))
    ]


def collective_ops(hlo_text: str) -> list[CollectiveOp]:
    """Every collective instruction reachable from the entry computation, with how often it runs."""
    ops: list[_Op] = []
    calls: dict[str, list[tuple[str, str | None]]] = defaultdict(list)  # computation -> [(callee, while id)]
    conditions: dict[str, str] = {}  # while instruction -> its condition computation
    while_init: dict[str, str] = {}  # while instruction -> its operand
    known_trips: dict[str, int] = {}
    constants: dict[str, int] = {}
    tuple_first: dict[str, str] = {}
    cond_limit: dict[str, tuple[str, str]] = {}  # condition computation -> (direction, constant name)
    producers: dict[str, tuple[list[str], str]] = {}  # instruction -> (data operands, op_name)
    scalars: set[str] = set()  # loop counters and indices: never what a collective carries
    parameters: dict[str, str] = {}  # parameter instruction -> its computation
    roots: dict[str, str] = {}  # computation -> its ROOT instruction
    element_of: dict[str, tuple[str, int]] = {}  # get-tuple-element -> (tuple, index)
    bodies: dict[str, str] = {}  # while instruction -> its body computation
    entry = None
    current = None
    for line in hlo_text.splitlines():
        head = _COMPUTATION.match(line)
        if head and "=" not in line.split("(", 1)[0]:
            current = head.group(2)
            if head.group(1):
                entry = current
            continue
        if current is None:
            continue
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, shape, op, rest = m.groups()
        operands = _operands(rest)
        op_name = _OP_NAME.search(rest)
        producers[name] = ([] if op in _NOT_DATA else operands, op_name.group(1) if op_name else "")
        if re.fullmatch(r"(?:pred|[su]\d+)\[\]", shape.split("{")[0].strip()):
            scalars.add(name)
        if line.lstrip().startswith("ROOT"):
            roots[current] = name
        if op == "parameter":
            parameters[name] = current
        elif op == "get-tuple-element" and operands:
            position = re.search(r"index=(\d+)", rest)
            if position:
                element_of[name] = (operands[0], int(position.group(1)))
        elif op == "while":
            body = re.search(r"body=%?([\w.\-]+)", rest)
            if body:
                bodies[name] = body.group(1)
        if op == "constant":
            c = re.match(r"\s*(-?\d+)\)", rest)
            if c:
                constants[name] = int(c.group(1))
        elif op == "tuple":
            first = re.match(r"\s*%?([\w.\-]+)", rest)
            if first:
                tuple_first[name] = first.group(1)
        elif op == "compare" and line.lstrip().startswith("ROOT"):
            operands = re.findall(r"%([\w.\-]+)", rest.split(")", 1)[0])
            direction = re.search(r"direction=(\w+)", rest)
            if len(operands) == 2 and direction:
                cond_limit[current] = (direction.group(1), operands[1])
        for callee_list in _CALLEES.findall(rest):
            for callee in re.findall(r"%?([\w.\-]+)", callee_list):
                calls[current].append((callee, name if op == "while" else None))
        if op == "while":
            cond = re.search(r"condition=%?([\w.\-]+)", rest)
            if cond:
                conditions[name] = cond.group(1)
            operand = re.match(r"\s*%?([\w.\-]+)", rest)
            if operand:
                while_init[name] = operand.group(1)
            trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', rest)
            if trip:
                known_trips[name] = int(trip.group(1))
        kind = op.removesuffix("-start")
        if op.endswith("-done"):
            continue
        megascale = _MEGASCALE.search(rest)
        if op == "send" and megascale:
            kind = megascale.group(1).lower().replace("_", "-")
            rendezvous = _RENDEZVOUS.search(rest)
            payload = _payload_shape(shape)
            ops.append(
                _Op(
                    current,
                    name,
                    kind,
                    "dcn",
                    array_bytes(payload),
                    payload,
                    rendezvous.group(1) if rendezvous else name,
                    operands[0] if operands else name,
                )
            )
        elif kind in _ICI_KINDS:
            size = array_bytes(shape)
            if op.endswith("-start") and shape.lstrip().startswith("("):
                # An async start's shape is (operands, results[, context]): the result is the second part.
                size = array_bytes(shape) / 2 if kind != "all-gather" else _async_result(shape)
            if kind == "reduce-scatter":
                size *= _group_size(rest)
            ops.append(_Op(current, name, kind, "ici", size, shape.split("{")[0].strip(), name, name))

    def trip_count(while_name: str) -> int:
        if while_name in known_trips:
            return known_trips[while_name]
        cond = conditions.get(while_name)
        if cond not in cond_limit:
            return 1
        direction, limit_name = cond_limit[cond]
        limit = constants.get(limit_name)
        start = constants.get(tuple_first.get(while_init.get(while_name, ""), ""), 0)
        if limit is None:
            return 1
        trips = limit - start + (1 if direction == "LE" else 0)
        return max(trips, 1) if direction in ("LT", "LE") else 1

    weight: dict[str, float] = defaultdict(float)
    if entry is None:
        return []

    def visit(comp: str, w: float, depth: int) -> None:
        if depth > 64:
            return
        weight[comp] += w
        for callee, via_while in calls.get(comp, ()):
            # A while loop's body runs trip_count times; its condition computation is not weighted.
            in_body = via_while is not None and conditions.get(via_while) != callee
            visit(callee, w * (trip_count(via_while) if via_while is not None and in_body else 1), depth + 1)

    visit(entry, 1.0, 0)
    # Element k of a loop's result, or of its body's parameter (a loop-carried value, e.g. the
    # stacked per-layer gradients), is made by the body: element k of its ROOT tuple.
    body_computations = set(bodies.values())
    for element, (tup, index) in element_of.items():
        loop_body = bodies.get(tup) or parameters.get(tup, "")
        root = producers.get(roots.get(loop_body, "")) if loop_body in body_computations else None
        if root is not None and index < len(root[0]):
            # In place of the loop and its op_name ('jit(step)/while'), which say nothing of the value.
            producers[element] = ([root[0][index]], "")
    return [
        CollectiveOp(
            op.name,
            op.kind,
            op.scope,
            int(round(weight[op.computation])),
            int(round(op.bytes)),
            op.shape,
            op.collective,
            _sources(op.payload, producers, scalars),
        )
        for op in ops
        if weight.get(op.computation)
    ]


def _operands(rest: str) -> list[str]:
    # `rest` is what follows "op(": the operands run to the matching parenthesis.
    depth = 1
    for i, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return re.findall(r"%([\w.\-]+)", rest[:i])
    return []


def _sources(name: str, producers: dict[str, tuple[list[str], str]], scalars: set[str]) -> tuple[str, ...]:
    """Along each path back from `name` (data operands, breadth first, past the scalar indices beside
    an array), the op_name of the first instruction that has one; distinct, nearest first."""
    found: list[str] = []
    queue, seen = deque([name]), set[str]()
    while queue and len(seen) < _SOURCE_SEARCH:
        current = queue.popleft()
        if current in seen or current not in producers:
            continue
        seen.add(current)
        operands, op_name = producers[current]
        if op_name:
            if op_name not in found:
                found.append(op_name)
            continue
        data = [o for o in operands if o not in scalars]
        queue.extend(data or operands)
    return tuple(found)


def _async_result(shape: str) -> float:
    # all-gather-start: ((operands), (results)) or (operand, result): the gathered result is the larger half.
    arrays = [array_bytes(a.group(0)) for a in _ARRAY.finditer(shape)]
    if not arrays:
        return 0.0
    half = len(arrays) // 2 or 1
    return max(sum(arrays[:half]), sum(arrays[half:]))


def summarize(collectives: list[Collective]) -> dict[str, int]:
    """Bytes per chip per step on each network."""
    out = {"ici": 0, "dcn": 0}
    for c in collectives:
        out[c.scope] += c.bytes
    return out


__all__ = ["Collective", "CollectiveOp", "aggregate", "array_bytes", "collective_ops", "parse_collectives", "summarize"]

if __name__ == "__main__":  # python -m marin_lab.cluster.hlo_collectives program.hlo.txt
    import sys

    with open(sys.argv[1]) as f:
        print(json.dumps([c.as_dict() for c in parse_collectives(f.read())], indent=1))
