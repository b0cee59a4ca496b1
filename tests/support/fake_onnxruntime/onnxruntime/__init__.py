"""A stand-in for pip's onnxruntime, for the tests of the Python runtime driver
(tools/ort-driver/ort_driver.py) on a machine without it: InferenceSession evaluates a handful
of standard ops with numpy (onnx reads the model, external data included). A node of another op
or domain is refused at load, as ONNX Runtime refuses an op it has no kernel for; an op named
Crash loads, and kills the process when run (a crash inside the runtime)."""
import os
import signal

import numpy as np
import onnx
from onnx import numpy_helper

__version__ = "0.0.0-fake"

OPS = {
    "Abs": np.abs,
    "Add": np.add,
    "Identity": lambda x: x,
    "Mul": np.multiply,
    "Neg": np.negative,
    "Relu": lambda x: np.maximum(x, 0).astype(x.dtype),
    "Sub": np.subtract,
}


class GraphOptimizationLevel:
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_ALL = 99


class SessionOptions:
    def __init__(self):
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0


class InferenceSession:
    def __init__(self, path, sess_options=None, providers=None):
        if sess_options is None or sess_options.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL:
            raise RuntimeError("fake onnxruntime: the driver must turn graph optimizations off")
        if providers != ["CPUExecutionProvider"]:
            raise RuntimeError(f"fake onnxruntime: the driver must ask for the CPU provider, not {providers}")
        self.graph = onnx.load(path).graph
        for node in self.graph.node:
            if node.op_type != "Crash" and (node.domain not in ("", "ai.onnx") or node.op_type not in OPS):
                raise RuntimeError(f"[ONNXRuntimeError] : 1 : FAIL : Load model from {path} failed:Fatal error: "
                                   f"{node.domain}:{node.op_type}(-1) is not a registered function/op")

    def run(self, output_names, input_feed):
        values = {tensor.name: numpy_helper.to_array(tensor) for tensor in self.graph.initializer}
        values.update(input_feed)
        for node in self.graph.node:
            if node.op_type == "Crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            values[node.output[0]] = OPS[node.op_type](*(values[name] for name in node.input))
        return [values[name] for name in output_names]
