"""XLA's compiled HLO text, read back to say what each instruction of a program does (profiled
trials, backends/profiling.py). Imports no framework: it parses the text that an XLA executable
prints (`HloModule.to_string()`, `compiled.as_text()`).

A trace of XLA:CPU names each executed thunk after its HLO instruction (`hlo_op`); many of those
names say little (`wrapped_iota.2`, `concatenate_bitcast_fusion`, `ynn_fusion.12`) and the events
carry no metadata. The compiled program does: each instruction has an opcode, the computation it
calls (a fusion's fused computation, a reduction's region) and usually `metadata={op_name=...}`,
the framework op it came from (JAX: `jit(step)/transpose(jvp())/select_and_scatter`).

`categories(text)` gives each instruction's category, by its dominant op: of the framework ops
it was made from (the last part of its own op_name and of those in its fused body, `calls=`; not
of the regions its ops apply), the category that comes first in SIGNAL_RULES (pooling before
convolution before matmul ... before copies), so a fusion of a convolution and its ReLU is a
convolution, and a reduce-window made from `cumsum` is a reduction, not pooling. An instruction
with no op_name there (XLA's own expansions: the iotas, arg-max reduce-window, index
concatenations and zero broadcasts that XLA:CPU makes of max-pool's backward, select-and-scatter)
takes the category of its users where they all agree, the work it was made for; else the first
category of every op_name and opcode in it and what it calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Signals: JAX primitive names (the last part of an op_name) and HLO opcodes. The first rule
# any signal of an instruction matches (fully, case-insensitive) is its category.
SIGNAL_RULES: tuple[tuple[str, str], ...] = (
    (r"select_and_scatter\w*|select_and_gather\w*|reduce_window\w*|select-and-scatter|reduce-window|"
     r"\w*max_pool\w*|\w*avg_pool\w*", "pooling"),
    (r"conv_general_dilated|convolution|conv\w*", "convolution"),
    (r"dot_general|dot|\w*matmul\w*|einsum|ragged_dot", "matmul"),
    (r"rsqrt|\w*_norm|layernorm|batchnorm", "normalisation"),
    (r"reduce_\w+|reduce|argmax|argmin|cum\w+|\w*softmax\w*|logsumexp|sort|top_k", "loss and reductions"),
    (r"add|add_any|sub|subtract|mul|multiply|div|divide|max|maximum|min|minimum|exp|exp2|exponential|log|"
     r"log1p|tanh|logistic|erf|erf_inv|integer_pow|pow|power|sqrt|cbrt|neg|negate|abs|sign|select_n|select|"
     r"eq|ne|lt|le|gt|ge|compare|and|or|not|xor|convert_element_type|convert|clamp|square|rem|"
     r"floor|ceil|round|is_finite|nextafter|sin|cos|atan2|stop_gradient|random_\w+|threefry2x32|"
     r"rng_bit_generator|rng|shift_\w+|population_count|tan|expm1", "elementwise and activation"),
    (r"transpose|reshape|broadcast_in_dim|broadcast|concatenate|copy|copy_p|bitcast|squeeze|expand_dims|"
     r"slice|dynamic_slice|dynamic_update_slice|dynamic-slice|dynamic-update-slice|gather|scatter\w*|"
     r"scatter-add|pad|iota|rev|reverse|tuple|get-tuple-element|device_put|pjit|split|"
     r"constant|parameter|convert_layout|copy-start|copy-done", "copies and layout"),
)

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s*->\s*.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|select|scatter|branch_computations)=\{?%?([\w.\-]+)"
                     r"((?:,\s*%[\w.\-]+)*)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OPERAND = re.compile(r"%([\w.\-]+)")


@dataclass
class Instruction:
    name: str
    opcode: str
    operands: list[str] = field(default_factory=list)
    called: list[str] = field(default_factory=list)
    op_names: list[str] = field(default_factory=list)
    fused: list[str] = field(default_factory=list)  # the computations it runs as its body (calls=)


@dataclass
class Module:
    name: str
    computations: dict[str, list[Instruction]] = field(default_factory=dict)

    def instructions(self) -> Iterable[Instruction]:
        for body in self.computations.values():
            yield from body


def _skip_type(rest: str) -> str:
    """The text after an instruction's shape (a tuple shape is in balanced parentheses)."""
    rest = rest.lstrip()
    if not rest.startswith("("):
        return rest.split(" ", 1)[1] if " " in rest else ""
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return rest[i + 1:].lstrip()
    return ""


def _balanced(text: str) -> tuple[str, str]:
    """(inside, after) of the parenthesis that `text` starts with."""
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return text[1:i], text[i + 1:]
    return text[1:], ""


def parse(text: str) -> Module:
    """The computations of an HLO module's text and their instructions."""
    header = re.match(r"\s*HloModule\s+([\w.\-]+)", text)
    module = Module(header.group(1) if header else "")
    current: list[Instruction] | None = None
    for line in text.splitlines():
        if current is None:
            found = _COMPUTATION.match(line)
            if found:
                current = module.computations.setdefault(found.group(2), [])
            continue
        if line.strip() == "}":
            current = None
            continue
        found = _INSTRUCTION.match(line)
        if not found:
            continue
        name, rest = found.groups()
        after_type = _skip_type(rest)
        opcode_match = re.match(r"([\w\-]+)\(", after_type)
        if not opcode_match:
            continue
        operands, attributes = _balanced(after_type[len(opcode_match.group(1)):])
        called = []
        for first, more in _CALLED.findall(attributes):
            called += [first, *_OPERAND.findall(more)]
        fused = re.findall(r"\bcalls=%?([\w.\-]+)", attributes)
        current.append(Instruction(name, opcode_match.group(1), _OPERAND.findall(operands), called,
                                   _OP_NAME.findall(attributes), fused))
    return module


def primitive(op_name: str) -> str:
    """The op an op_name names: its last path part (`jit(f)/transpose(jvp())/select_and_scatter`
    -> `select_and_scatter`), without a numeric suffix."""
    last = op_name.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[.\[].*$", "", last)


def _compiled_rules() -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(pattern, re.IGNORECASE), category) for pattern, category in SIGNAL_RULES]


def _first(signals: set[str], rules: list[tuple[re.Pattern[str], str]]) -> str | None:
    return next((category for pattern, category in rules if any(pattern.fullmatch(s) for s in signals)), None)


def _users(module: Module) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for inst in module.instructions():
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst.name)
    return users


def _op_names(inst: Instruction, computations: dict[str, list[Instruction]], seen: set[str]) -> list[str]:
    """The op_names of an instruction and of what it calls, transitively."""
    out = list(inst.op_names)
    for callee in inst.called:
        if callee not in seen:
            seen.add(callee)
            for sub in computations.get(callee, ()):
                out += _op_names(sub, computations, seen)
    return out


def backward(text: str) -> set[str]:
    """The instructions of the backward pass: JAX names what reverse-mode autodiff made
    `transpose(...)` in the op_name's path (`jit(step)/transpose(jvp(conv))/conv_general_dilated`);
    an instruction is backward where every op_name in it (and in what it calls) is, and one with
    none where all its users are."""
    module = parse(text)
    users = _users(module)
    out: set[str] = set()
    for body in module.computations.values():
        for inst in reversed(body):
            names = [n for n in _op_names(inst, module.computations, set()) if "/" in n]
            if names:
                if all("transpose(" in n for n in names):
                    out.add(inst.name)
            elif users.get(inst.name) and all(u in out for u in users[inst.name]):
                out.add(inst.name)
    return out


def categories(text: str) -> dict[str, str]:
    """Each instruction's category by its dominant op (module docstring), by instruction name."""
    module = parse(text)
    rules = _compiled_rules()
    by_computation = module.computations

    def inside(inst: Instruction, seen: set[str]) -> tuple[set[str], set[str]]:
        """(op-name primitives, opcodes) of an instruction and what it calls, transitively."""
        names, opcodes = {primitive(n) for n in inst.op_names if n}, {inst.opcode}
        for callee in inst.called:
            if callee in seen:
                continue
            seen.add(callee)
            for sub in by_computation.get(callee, ()):
                more_names, more_opcodes = inside(sub, seen)
                names |= more_names
                opcodes |= more_opcodes
        return names - {""}, opcodes

    users = _users(module)
    out: dict[str, str] = {}
    undecided: dict[str, set[str]] = {}
    for body in by_computation.values():
        for inst in reversed(body):  # users are listed after what they use
            # the framework ops it was made from: its own op_name and its fused body's (not the
            # regions its ops apply: a reduce-window's `ge` says nothing of the reduce-window)
            names = {primitive(n) for n in inst.op_names}
            for callee in inst.fused:
                names |= {primitive(n) for sub in by_computation.get(callee, ()) for n in sub.op_names}
            names -= {""}
            own = _first(names, rules) if names else None
            if own is None:
                of_users = {out.get(u) for u in users.get(inst.name, ())}
                own = of_users.pop() if len(of_users) == 1 and None not in of_users else None
            if own is None:
                undecided[inst.name] = set().union(*inside(inst, set()))
            else:
                out[inst.name] = own
    for name, opcodes in undecided.items():
        category = _first(opcodes - {"parameter", "constant"}, rules)
        if category is not None:
            out[name] = category
    return out
