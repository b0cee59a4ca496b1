"""Rewrite ONNX models from rules so that a target runtime loads them: the onnx-rewrite library.

PyTorch exports carry custom ops (``mydomain::mygroupnorm``, ``custom::deform_conv2d``,
onnxscript functions) that plain runtimes refuse; ONNX Runtime's optimized models carry
``com.microsoft`` ops no other runtime loads. :func:`rewrite` decomposes, remaps, fuses or
de-fuses them with the same rules and engine as the ``onnx-rewrite`` tool, and :func:`check`
names what a target can't load::

    import onnx, onnx_rewrite

    model = onnx.load("model.onnx")
    print(onnx_rewrite.check(model, target="onnx").unloadable)
    result = onnx_rewrite.rewrite(model, target="onnx")
    assert result.target_met, result.check.unloadable
    onnx.save(result.model, "fixed.onnx")

    # Big models, external data: give paths, and the weights never enter Python.
    onnx_rewrite.rewrite("big/model.onnx", target="onnx", output="out/model.onnx")

A model is an ``onnx.ModelProto``, its serialized ``bytes``, or a path. Errors are
:class:`InputError` (a file is unreadable or invalid; ``.file`` names it) and
:class:`UsageError` (an impossible request), both :class:`Error`, with the CLI's messages.
The GIL is released while models are loaded, rewritten, checked and written.
``python3 -m onnx_rewrite ARGS...`` runs the command line. Reference: docs/python.md.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple, Union

from . import _core
from ._errors import Error, InputError, UsageError, VerifyError

if TYPE_CHECKING:
    import onnx  # type: ignore[import]  # optional, and untyped in Debian 12

__version__: str = _core.__version__

__all__ = [
    "CheckReport",
    "Error",
    "InputError",
    "Rule",
    "RuleSet",
    "RuleStats",
    "RewriteResult",
    "Target",
    "Unloadable",
    "UsageError",
    "Verification",
    "VerifyError",
    "builtin_rules",
    "check",
    "load_rules",
    "rewrite",
    "targets",
    "verify",
]

PathLike = Union[str, "os.PathLike[str]"]
#: What :func:`rewrite` and :func:`check` take as a model.
ModelLike = Union["onnx.ModelProto", bytes, bytearray, memoryview, str, "os.PathLike[str]"]
#: What ``input_shapes=`` takes: dims per graph input name (``--input-shape NAME=D0,D1,...``).
InputShapes = Mapping[str, Iterable[int]]
#: What ``rules=`` takes: a rule set, a rule file or directory, rule text, or several of these.
RulesLike = Union["RuleSet", str, "os.PathLike[str]", Iterable[Union["RuleSet", str, "os.PathLike[str]"]]]


# ---- Results ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RuleStats:
    """What one rule did in a rewrite.

    Attributes:
        matches: how often it fired.
        nodes_removed: the nodes its matches covered.
        nodes_added: the nodes that replaced them.
    """

    matches: int
    nodes_removed: int
    nodes_added: int


@dataclass(frozen=True)
class Unloadable:
    """Nodes of one op the target can't load, in one kind of place.

    Attributes:
        domain: the op's domain as the model writes it (``""`` is ai.onnx).
        op_type: the op.
        count: how many such nodes.
        where: ``"main graph"``, ``"subgraph"``, ``"function DOMAIN.NAME"``,
            ``"training initialization"`` or ``"training algorithm"``.
        reason: why the target refuses them, as ``onnx-rewrite check`` says it.
        aten_operator: for ``org.pytorch.aten::ATen`` nodes, the operator they call; else ``""``.
    """

    domain: str
    op_type: str
    count: int
    where: str
    reason: str
    aten_operator: str = ""


@dataclass(frozen=True)
class CheckReport:
    """What a target can't load in a model (``onnx-rewrite check``).

    Attributes:
        target: the target's name.
        max_opset: the highest ai.onnx opset asked for (``opset=``), or ``None``.
        unloadable: the nodes the target refuses, per op and place.
        opset_problems: imports above the opset the target (or ``opset=``) allows, with the nodes
            that keep them there, and an IR version that could not be written.
        notes: what could not be verified (imports newer than the op tables, missing weight
            files, what the target requires of a node beyond its op).
    """

    target: str
    max_opset: Optional[int]
    unloadable: Tuple[Unloadable, ...]
    opset_problems: Tuple[str, ...]
    notes: Tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the target loads every node (``onnx-rewrite check`` exits 0)."""
        return not self.unloadable and not self.opset_problems


@dataclass(frozen=True)
class Rule:
    """One rule, as ``onnx-rewrite rules`` lists it.

    Attributes:
        id: its id (what ``only=`` and ``skip=`` name).
        description: what it does.
        targets: the targets it serves (and those built on them).
        fuse_targets: targets it serves only with ``fuse=True``.
        priority: higher goes first.
        matches: the ops its patterns start from, as ``(domain, op_type)`` (``""`` is ai.onnx).
        file: the rule file (built-in rules: ``rules/FAMILY/NAME.rules``).
        line: its line there.
    """

    id: str
    description: str
    targets: Tuple[str, ...]
    fuse_targets: Tuple[str, ...]
    priority: int
    matches: Tuple[Tuple[str, str], ...]
    file: str
    line: int


class RuleSet:
    """Rules ready to rewrite with: from :func:`load_rules`, :func:`builtin_rules`, or ``+`` of two
    sets. Immutable; one set may serve any number of rewrites, in any threads.

    ``len(rules)``, ``iter(rules)`` (:class:`Rule` objects), ``"rule-id" in rules``, and
    ``rules.ids`` work as expected.
    """

    __slots__ = ("_held", "_rules")

    def __init__(self, _held: Any) -> None:  # made by load_rules / builtin_rules, not by hand
        self._held = _held
        self._rules: Optional[Tuple[Rule, ...]] = None

    @property
    def rules(self) -> Tuple[Rule, ...]:
        """The rules, in the order they were loaded."""
        if self._rules is None:
            self._rules = tuple(
                Rule(id=r["id"], description=r["description"], targets=tuple(r["targets"]),
                     fuse_targets=tuple(r["fuse_targets"]), priority=r["priority"],
                     matches=tuple((m[0], m[1]) for m in r["matches"]), file=r["file"], line=r["line"])
                for r in self._held.describe())
        return self._rules

    @property
    def ids(self) -> Tuple[str, ...]:
        """The rules' ids."""
        return tuple(rule.id for rule in self.rules)

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self.ids

    def __add__(self, other: "RuleSet") -> "RuleSet":
        """Both sets' rules in one; an id in both is an :class:`InputError`."""
        if not isinstance(other, RuleSet):
            return NotImplemented
        return RuleSet(_core.combine_rules([self._held, other._held]))

    def __repr__(self) -> str:
        return f"<onnx_rewrite.RuleSet of {len(self)} rules>"


@dataclass(frozen=True)
class Target:
    """A runtime target, as ``onnx-rewrite targets`` lists it.

    Attributes:
        name: what ``target=`` takes.
        description: what it is.
        builds_on: the targets it builds on, nearest first (their rules serve it too).
        domains: the domains it loads (``""`` is ai.onnx).
        max_opsets: the highest import it loads per capped domain.
        local_functions: whether it runs calls to model-local functions (else they are inlined).
        source: where its op tables come from.
        load_tested: whether the test suite loads models in the runtime itself to check it.
        file: its ``.target`` file.
    """

    name: str
    description: str
    builds_on: Tuple[str, ...]
    domains: Tuple[str, ...]
    max_opsets: Mapping[str, int]
    local_functions: bool
    source: str
    load_tested: bool
    file: str


def _target(item: Dict[str, Any]) -> Target:
    return Target(name=item["name"], description=item["description"], builds_on=tuple(item["builds_on"]),
                  domains=tuple(item["domains"]), max_opsets=dict(item["max_opsets"]),
                  local_functions=item["local_functions"], source=item["source"], load_tested=item["load_tested"],
                  file=item["file"])


def _check_report(item: Dict[str, Any], target: str, max_opset: Optional[int]) -> CheckReport:
    return CheckReport(
        target=target, max_opset=max_opset,
        unloadable=tuple(Unloadable(domain=u["domain"], op_type=u["op_type"], count=u["count"], where=u["where"],
                                    reason=u["reason"], aten_operator=u["aten_operator"]) for u in item["unloadable"]),
        opset_problems=tuple(item["opset_problems"]), notes=tuple(item["notes"]))


class Verification:
    """Both models run in ONNX Runtime on the same inputs, every output of the original compared
    by name: :func:`verify`, ``rewrite(..., verify=True)``, the CLI's ``verify`` (docs/cli.md).

    Attributes:
        status: ``"match"``, ``"mismatch"`` (an output differs or is missing),
            ``"rewritten-failed"`` (the rewritten model does not load or run) or
            ``"not-compared"`` (the original does not run on these inputs: ``reason`` says what
            to give).
        reason: why, for every status but ``"match"``.
        runtime: ``(name, version)`` of the runtime both ran in.
        inputs: per graph input, its ``name``, ``dtype``, ``shape`` and ``file`` (``None``:
            seeded random values).
        outputs: per output of the original, its ``name``, ``status``, ``max_abs``,
            ``max_rel``, tolerances, NaN/Inf counts and ``flags``, as the CLI's ``--json``.
        report: the whole ``verify`` object of the CLI's ``--json``.
    """

    def __init__(self, report: Dict[str, Any]) -> None:
        self.report = report
        self.status: str = report["status"]
        self.reason: Optional[str] = report["reason"]
        runtime = report["runtime"] or {}
        self.runtime: Tuple[str, str] = (runtime.get("name", ""), runtime.get("version", ""))
        self.inputs: Tuple[Dict[str, Any], ...] = tuple(report["inputs"])
        self.outputs: Tuple[Dict[str, Any], ...] = tuple(report["outputs"])

    @property
    def ok(self) -> bool:
        """Whether the rewrite holds: every output matched, or the original could not be run
        (``not-compared``: the rewrite then only had to load)."""
        return self.status not in ("mismatch", "rewritten-failed")

    def __repr__(self) -> str:
        return f"<onnx_rewrite.Verification {self.status}" + (f": {self.reason}>" if self.reason else ">")


class RewriteResult:
    """What :func:`rewrite` did, and the model it made.

    Attributes:
        status: ``"rewritten"``, ``"unchanged"`` (no rule applied: the model is an exact copy) or
            ``"target-not-met"`` (nodes the target can't load remain; the model is still made,
            and written when ``output`` was given), as in the CLI's ``--report``.
        target_met: whether the target loads the result (``check.ok``; the CLI exits 0, not 1).
        changed: whether anything changed.
        rules: per rule that fired, by id, what it did.
        ops_before, ops_after: nodes per ``(domain, op_type)`` in every graph, subgraph and
            function (``""`` is ai.onnx).
        opset_changes: per domain whose import changed, ``(before, after)``; 0 means no import.
        ir_version_change: ``(before, after)`` when ``ir_version=`` changed it, else ``None``.
        notes: what the rewrite could not do and why (e.g. an opset it could not reach).
        check: the check of the result against the target (its own notes included).
        rounds: rounds of rules until none fired.
        nodes_tried: per round, at how many nodes rules were tried.
        functions_inlined: calls to model-local functions inlined.
        output: the path written (``output=``), or ``None``.
        explanation: with ``explain=``, each rule tried at those nodes and why it matched or not.
        verification: with ``verify=True``, the :class:`Verification`; else ``None``.
    """

    def __init__(self, held: Any, info: Dict[str, Any], target: str, max_opset: Optional[int],
                 output: Optional[str]) -> None:
        self._held = held
        self._model: Any = None
        self.status: str = info["status"]
        self.changed: bool = info["changed"]
        self.rules: Dict[str, RuleStats] = {rule_id: RuleStats(*stats) for rule_id, stats in info["rules"].items()}
        self.ops_before: Dict[Tuple[str, str], int] = {(d, op): n for d, op, n in info["ops_before"]}
        self.ops_after: Dict[Tuple[str, str], int] = {(d, op): n for d, op, n in info["ops_after"]}
        self.opset_changes: Dict[str, Tuple[int, int]] = {d: (c[0], c[1]) for d, c in info["opset_changes"].items()}
        change = info["ir_version_change"]
        self.ir_version_change: Optional[Tuple[int, int]] = (change[0], change[1]) if change is not None else None
        self.notes: Tuple[str, ...] = tuple(info["notes"])
        self.check: CheckReport = _check_report(info["check"], target, max_opset)
        self.rounds: int = info["rounds"]
        self.nodes_tried: Tuple[int, ...] = tuple(info["nodes_tried"])
        self.functions_inlined: int = info["functions_inlined"]
        self.output: Optional[str] = output
        self.explanation: str = info["explanation"]
        self.verification: Optional[Verification] = None

    @property
    def target_met(self) -> bool:
        """Whether the target loads every node of the result."""
        return self.check.ok

    @property
    def ops_changed(self) -> Dict[Tuple[str, str], Tuple[int, int]]:
        """``(before, after)`` per op whose count changed: the table the CLI's summary prints."""
        keys = set(self.ops_before) | set(self.ops_after)
        return {key: (self.ops_before.get(key, 0), self.ops_after.get(key, 0)) for key in sorted(keys)
                if self.ops_before.get(key, 0) != self.ops_after.get(key, 0)}

    @property
    def model(self) -> Any:
        """The rewritten model: an ``onnx.ModelProto`` when ``onnx`` can be imported, else its
        bytes. Made on first use and kept (the same object each time). Tensors stored as external
        data stay references to their files (they never enter Python); for a model over 2 GB use
        ``output=`` or :meth:`save` instead, which protobuf in Python can't hold.
        """
        if self._model is None:
            data = self.model_bytes()
            try:
                import onnx  # optional (typed as the import above)
            except ImportError:
                self._model = data
            else:
                self._model = onnx.load_from_string(data)
        return self._model

    def model_bytes(self) -> bytes:
        """The rewritten model serialized, exactly the bytes :meth:`save` writes."""
        return _core.serialize(self._held)

    def save(self, path: PathLike) -> None:
        """Writes the rewritten model with the library's writer: atomically (a temporary file put
        in place when complete), external data copied beside it when ``path`` is in another
        directory than the input, never over the input. Changes made to :attr:`model` in Python
        are not written: save that with ``onnx.save``.
        """
        _core.write(self._held, os.fsencode(os.fspath(path)))

    def __repr__(self) -> str:
        done = [f"{rule_id} x{stats.matches}" for rule_id, stats in self.rules.items()]
        if self.functions_inlined:
            done.append(f"{self.functions_inlined} function call(s) inlined")
        fired = ", ".join(done) or "no rule fired"
        return f"<onnx_rewrite.RewriteResult {self.status}: {fired}; target {self.check.target} " \
               f"{'met' if self.target_met else 'NOT met'}>"


# ---- Arguments -------------------------------------------------------------------------------

def _source(model: ModelLike) -> Tuple[bytes, bool, str]:
    """(path as bytes or the serialized model, is it a path, the name errors give it)."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        return os.fsencode(path), True, os.fsdecode(path)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), False, "<bytes>"
    descriptor = getattr(model, "DESCRIPTOR", None)
    if getattr(descriptor, "full_name", None) == "onnx.ModelProto":
        try:
            return model.SerializeToString(), False, "<ModelProto>"
        except ValueError as e:  # protobuf refuses to serialize 2 GB and more
            raise ValueError(f"{e}: save the model with external data (onnx.save(model, path, "
                             "save_as_external_data=True)) and pass its path, which onnx_rewrite "
                             "reads without loading the weights") from e
    raise TypeError(f"a model is an onnx.ModelProto, bytes or a path, not {type(model).__name__}")


def _opset(name: str, value: Optional[int], low: int, high: int) -> Optional[int]:
    return None if value is None else _bounded(name, value, low, high)


def _bounded(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise UsageError(f"{name}={value} is not in {low}..{high}")
    return value


def _names(name: str, values: Union[str, Iterable[str]]) -> Set[str]:
    if isinstance(values, str):
        values = [values]
    result = set(values)
    for value in result:
        if not isinstance(value, str):
            raise TypeError(f"{name} holds rule ids (str), not {type(value).__name__}")
    return result


def _rule_sets(rules: Optional[RulesLike]) -> List[RuleSet]:
    if rules is None:
        return []
    if isinstance(rules, (RuleSet, str, os.PathLike)):
        rules = [rules]
    return [item if isinstance(item, RuleSet) else load_rules(item) for item in rules]


def _rules(rules: Optional[RulesLike], builtin: bool) -> RuleSet:
    sets = ([builtin_rules()] if builtin else []) + _rule_sets(rules)
    if len(sets) == 1:
        return sets[0]
    return RuleSet(_core.combine_rules([s._held for s in sets]))


def _input_shapes(shapes: Optional[InputShapes]) -> Dict[str, List[int]]:
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise TypeError(f"input_shapes maps input names to dims, not {type(shapes).__name__}")
    result: Dict[str, List[int]] = {}
    for name, dims in shapes.items():
        if not isinstance(name, str):
            raise TypeError(f"input_shapes: an input name is a str, not {type(name).__name__}")
        result[name] = [_bounded(f"input_shapes[{name!r}]", dim, 1, 2**62) for dim in dims]
    return result


def _target_name(target: PathLike) -> str:
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"target is a name or a .target file, not {type(target).__name__}")
    return os.fspath(target)


# ---- The API -----------------------------------------------------------------------------------

def rewrite(model: ModelLike, target: PathLike = "onnx", *, opset: Optional[int] = None,
            to_opset: Optional[int] = None, rules: Optional[RulesLike] = (), fuse: bool = False,
            output: Optional[PathLike] = None, builtin_rules: bool = True, only: Iterable[str] = (),
            skip: Iterable[str] = (), inline_functions: Optional[bool] = None, canonicalize: bool = True,
            simplify: Optional[bool] = None, max_rounds: int = 16, ir_version: Optional[int] = None, provenance: bool = True,
            explain: Optional[str] = None, input_shapes: Optional[InputShapes] = None,
            verify: bool = False, seed: int = 1) -> RewriteResult:
    """Rewrites a model for a target, checks the result, and writes it if ``output`` is given:
    ``onnx-rewrite rewrite`` with the same options and the same result.

    Args:
        model: an ``onnx.ModelProto``, its serialized bytes, or the path of a ``.onnx`` file. Give
            a path for models with external data or over 2 GB: the weights then stay in their
            files (a model in memory has no directory to find external data in, and is refused
            with an :class:`InputError` if it refers to any).
        target: a target name (:func:`targets`: ``"onnx"``, ``"ort"``, ``"tensorrt"``,
            ``"openvino"``, ...) or the path of a ``.target`` file (``--target``).
        opset: the highest ai.onnx opset the runtime loads (``--opset``).
        to_opset: convert to exactly this ai.onnx opset, up or down (``--to-opset``); excludes
            ``opset``.
        rules: more rules, besides the built-in ones: a :class:`RuleSet`, a ``.rules`` file or a
            directory of them, rule text (a ``str`` holding a newline), or a list of these
            (``--rules``).
        fuse: also the rules that fuse for the target only on request (``--fuse``).
        output: where to write the result (``-o``), atomically, with its external-data files
            copied beside it when it goes to another directory; never over the input. Without it
            nothing is written: use :attr:`RewriteResult.model` or :meth:`RewriteResult.save`.
        builtin_rules: ``False`` drops the rules compiled in (``--no-builtin-rules``).
        only: apply only these rule ids (``--only``).
        skip: don't apply these rule ids (``--skip``).
        inline_functions: inline calls to model-local functions first; by default only for
            targets that don't run them (``--inline-functions``).
        canonicalize: ``False`` leaves out the ``canonicalize-*`` rules (``--no-canonicalize``).
        simplify: after the rules, fold what the model already decides and drop what computes
            nothing (``--simplify`` / ``--no-simplify``); by default as the target says (on for
            ``"ort"``).
        max_rounds: rounds before rules that keep firing are an error (``--max-rounds``).
        ir_version: write this IR version, if the model allows (``--ir-version``).
        provenance: record what was done in the output's ``metadata_props``; ``False`` is
            ``--no-provenance``.
        explain: an op type (or ``domain.op``) or node name: :attr:`RewriteResult.explanation`
            then says, for each such node, each rule tried and why it matched or not
            (``--explain``).
        input_shapes: dims per graph input name, fixed before matching as if the model had been
            exported with them, checked against what it declares (``--input-shape``).
        verify: run the original and the rewritten model in ONNX Runtime on seeded random
            inputs (of ``input_shapes``; symbolic dims otherwise 2) and compare every output
            (``--verify``); on a mismatch, or a rewrite that does not load or run, raise
            :class:`VerifyError` and write nothing. For other inputs or tolerances, call
            :func:`verify` on the files.
        seed: the seed of ``verify``'s inputs.

    Returns:
        A :class:`RewriteResult`. A target not met is no error: ``result.target_met`` is
        ``False`` and ``result.check.unloadable`` names the nodes (where the CLI exits 1).

    Raises:
        InputError: the model, its external data, a rule file or a target file can't be read or
            is invalid; the rules keep firing; the output can't be written.
        UsageError: an unknown target or rule id, ``output``'s directory is missing, ``output``
            is the input or a directory; ``verify`` without ONNX Runtime (the message says what
            to install).
        VerifyError: ``verify`` found other numbers, or a rewrite ONNX Runtime can't run.
    """
    target = _target_name(target)
    shapes = _input_shapes(input_shapes)
    if opset is not None and to_opset is not None:
        raise UsageError("opset and to_opset exclude each other")
    max_opset = _opset("opset", opset, 1, 1000) if to_opset is None else _opset("to_opset", to_opset, 1, 1000)
    ir_version = _opset("ir_version", ir_version, 3, 11)
    max_rounds = _bounded("max_rounds", max_rounds, 1, 10000)
    only_ids, skip_ids = _names("only", only), _names("skip", skip)
    if explain is not None and not isinstance(explain, str):
        raise TypeError(f"explain is an op type or node name, not {type(explain).__name__}")
    # In the CLI's order: the target, then the rules, then the model (rewrite.cc).
    target_name = _core.find_target(target)["name"]
    rule_set = _rules(rules, builtin_rules)
    source, is_path, name = _source(model)
    output_path = None if output is None else os.fspath(output)
    # Verified before anything is written: the output goes in place only once it matched.
    held, info = _core.rewrite(
        source, is_path, name, rule_set._held, target, max_opset, to_opset is not None, only_ids, skip_ids,
        inline_functions, bool(fuse), bool(canonicalize), None if simplify is None else bool(simplify), max_rounds, ir_version, explain or "", bool(provenance),
        shapes, None if output_path is None or verify else os.fsencode(output_path))
    result = RewriteResult(held, info, target_name, max_opset, output_path)
    if verify:
        with tempfile.TemporaryDirectory(prefix="onnx-rewrite-verify-") as work:
            original = os.fsdecode(source) if is_path else os.path.join(work, "original.onnx")
            if not is_path:
                with open(original, "wb") as file:
                    file.write(source)
            rewritten = os.path.join(work, "rewritten.onnx")
            result.save(rewritten)
            verification, failure = _verify(original, rewritten, shapes, _bounded("seed", seed, 0, 2**63 - 1), None, None,
                                            "", {})
        result.verification = verification
        if failure:
            error = VerifyError(failure + "; nothing was written", output_path or name)
            error.verification = verification
            raise error
        if output_path is not None:
            result.save(output_path)
    return result


def _verify(original: str, rewritten: str, shapes: Dict[str, List[int]], seed: int, rtol: Optional[float],
            atol: Optional[float], runtime: str, inputs: Dict[str, str]) -> Tuple[Verification, str]:
    report, failure = _core.verify(os.fsencode(original), os.fsencode(rewritten), shapes, seed, rtol, atol, runtime,
                                   {name: os.fsencode(path) for name, path in inputs.items()})
    return Verification(json.loads(report)["verify"]), failure


def verify(original: PathLike, rewritten: PathLike, *, input_shapes: Optional[InputShapes] = None,
           inputs: Optional[Mapping[str, PathLike]] = None, seed: int = 1, rtol: Optional[float] = None,
           atol: Optional[float] = None, runtime: Optional[str] = None) -> Verification:
    """Runs both models in ONNX Runtime on the same inputs and compares every output of the
    original by name with the rewritten model's: ``onnx-rewrite verify ORIGINAL REWRITTEN``.

    Args:
        original, rewritten: paths of ``.onnx`` files (external data beside them, as they refer
            to it).
        input_shapes: dims per graph input name for the inputs made (``--input-shape``);
            symbolic dims otherwise 2.
        inputs: per graph input name, a ``.npy`` or TensorProto ``.pb`` file to feed instead of
            random values (``--inputs``).
        seed: the seed of the random inputs (``--seed``).
        rtol, atol: tolerances for float outputs (``--rtol``, ``--atol``); by default each
            element type's own (float16 looser, integers exact).
        runtime: ``"node"`` (npm's onnxruntime-node) or ``"python"`` (pip's onnxruntime);
            by default the first found (``--runtime``).

    Returns:
        A :class:`Verification`; ``.ok`` is whether the rewrite holds. A mismatch is a result
        here, not an error (the CLI exits 4).

    Raises:
        InputError: a model can't be read.
        UsageError: no ONNX Runtime (the message says what to install), an input ``inputs``
            or ``input_shapes`` names that the model does not have.
    """
    files = {name: os.fspath(path) for name, path in (inputs or {}).items()}
    if runtime not in (None, "node", "python"):
        raise UsageError(f"runtime={runtime!r}: expected 'node' or 'python'")
    verification, _ = _verify(os.fspath(original), os.fspath(rewritten), _input_shapes(input_shapes),
                              _bounded("seed", seed, 0, 2**63 - 1), rtol, atol, runtime or "", files)
    return verification


def check(model: ModelLike, target: PathLike = "onnx", *, opset: Optional[int] = None) -> CheckReport:
    """What a target can't load in a model: ``onnx-rewrite check``.

    Args:
        model: an ``onnx.ModelProto``, bytes, or a path (its weights are not read; their files
            may even be missing, which a note then says).
        target: a target name or ``.target`` file.
        opset: the highest ai.onnx opset the runtime loads: imports above it are problems.

    Returns:
        A :class:`CheckReport`; ``report.ok`` is whether the target loads every node.

    Raises:
        InputError: the model can't be read or is invalid (a cycle, a value computed twice or by
            nothing); a bad ``.target`` file.
        UsageError: an unknown target.
    """
    target = _target_name(target)
    max_opset = _opset("opset", opset, 1, 1000)
    name = _core.find_target(target)["name"]
    source, is_path, model_name = _source(model)
    return _check_report(_core.check(source, is_path, model_name, target, max_opset, False), name, max_opset)


def load_rules(source: PathLike, name: Optional[str] = None) -> RuleSet:
    """Rules from a ``.rules`` file, a directory of them (its ``*.rules``, sorted), or text.

    Args:
        source: a path, or the rules' text: a ``str`` holding a newline is text, anything else
            a path (docs/rules.md describes the language).
        name: for text, the name errors give it (default ``"<rules>"``).

    Raises:
        InputError: nothing at the path, or a rule that does not parse or check (``file`` is
            ``name:line:col``).
    """
    if isinstance(source, str) and "\n" in source:
        return RuleSet(_core.rules_from_text(source, name or "<rules>"))
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"rules come from a path or text, not {type(source).__name__}")
    return RuleSet(_core.rules_from_path(os.fsencode(os.fspath(source))))


def builtin_rules() -> RuleSet:
    """The rules compiled into the library (every family under rules/), parsed once."""
    return RuleSet(_core.builtin_rules())


def targets() -> List[Target]:
    """The targets compiled in (and any ``.target`` files used so far), as ``onnx-rewrite
    targets`` lists them."""
    return [_target(item) for item in _core.targets()]
