# Type stubs of the extension onnx_rewrite._core (python/src/module.cc): internal; the package's
# API is onnx_rewrite (__init__.py). python/tests/test_stubs.py holds these to the module.
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

__version__: str

class Model:
    """A model held by the library."""

    @property
    def path(self) -> str: ...

class Rules:
    """A set of rules held by the library."""

    def __len__(self) -> int: ...
    def describe(self) -> List[Dict[str, Any]]: ...

def builtin_rules() -> Rules: ...
def rules_from_path(path: Union[str, bytes]) -> Rules: ...
def rules_from_text(text: str, name: str) -> Rules: ...
def combine_rules(sets: Sequence[Rules]) -> Rules: ...
def targets() -> List[Dict[str, Any]]: ...
def find_target(name_or_file: Union[str, bytes]) -> Dict[str, Any]: ...
def serialize(model: Model) -> bytes: ...
def write(model: Model, path: Union[str, bytes]) -> None: ...
def check(
    source: bytes, is_path: bool, name: str, target: Union[str, bytes], max_opset: Optional[int], exact: bool
) -> Dict[str, Any]: ...
def rewrite(
    source: bytes,
    is_path: bool,
    name: str,
    rules: Rules,
    target: Union[str, bytes],
    max_opset: Optional[int],
    exact_opset: bool,
    only: Set[str],
    skip: Set[str],
    inline_functions: Optional[bool],
    fuse: bool,
    canonicalize: bool,
    simplify: Optional[bool],
    max_rounds: int,
    ir_version: Optional[int],
    explain: str,
    provenance: bool,
    input_shapes: Dict[str, List[int]],
    output: Optional[Union[str, bytes]],
) -> Tuple[Model, Dict[str, Any]]: ...
def verify(
    original: Union[str, bytes],
    rewritten: Union[str, bytes],
    input_shapes: Dict[str, List[int]],
    seed: int,
    rtol: Optional[float],
    atol: Optional[float],
    runtime: str,
    inputs: Dict[str, Union[str, bytes]],
) -> Tuple[str, str]: ...
def run_cli(argv: Sequence[Union[str, bytes]]) -> int: ...
