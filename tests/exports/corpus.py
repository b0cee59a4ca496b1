"""What a corpus entry is: a model PyTorch can build and run, exported at opsets 9..17."""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple


@dataclass
class Export:
    """torch.onnx.export's arguments for one model (the same at every opset)."""
    model: Any                       # torch.nn.Module
    args: Tuple                      # the example inputs, as passed to forward()
    input_names: List[str]           # one per flattened input tensor
    output_names: Optional[List[str]] = None
    dynamic_axes: Optional[Dict[str, Dict[int, str]]] = None
    kwargs: Dict[str, Any] = field(default_factory=dict)   # custom_opsets, ...


@dataclass
class Case:
    name: str                        # <name>-op<N> is the case folder
    family: str                      # the row group of the matrix
    build: Callable[[], Export]      # called after torch.manual_seed(seed of the name)
    input_desc: str                  # e.g. "1x3x64x64 (dynamic batch)"
    notes: str = ''
    slice: bool = False              # part of the CI slice
    big: bool = False                # only with --big
    rewrite_args: List[str] = field(default_factory=list)  # extra onnx-rewrite options for the matrix
    module_file: str = ''            # set by the driver
