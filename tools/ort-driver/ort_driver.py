#!/usr/bin/env python3
"""onnx-rewrite's runtime driver for Python's `onnxruntime` (protocol: README.md beside it).

    python3 ort_driver.py JOB.json

Runs each model of the job in ONNX Runtime (CPU, graph optimizations off: the model as written),
fed the job's TensorProto files by name; writes each fetched output as a named TensorProto and,
once a model is done, its result JSON. Compares nothing. Needs only onnxruntime and numpy (pip's
onnxruntime does not bring the onnx package): the TensorProtos onnx-rewrite writes hold their
values in raw_data, and that is how outputs are written back.
"""
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

RUNTIME = "onnxruntime"

# TensorProto.DataType <-> numpy (bfloat16, float8, int4, strings: numpy has no such dtype here).
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
          9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
DATA_TYPES = {np.dtype(dtype): data_type for data_type, dtype in DTYPES.items()}


class Unsupported(Exception):
    pass


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def encode_varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def read_tensor(path):
    """dims (1), data_type (2), name (8), raw_data (9); other fields skipped."""
    data = open(path, "rb").read()
    dims, data_type, name, raw, at = [], 0, "", b"", 0
    while at < len(data):
        key, at = varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
            if field == 1:
                dims.append(value)
            elif field == 2:
                data_type = value
        elif wire == 2:
            size, at = varint(data, at)
            chunk = data[at:at + size]
            at += size
            if field == 1:  # packed dims
                inner = 0
                while inner < len(chunk):
                    value, inner = varint(chunk, inner)
                    dims.append(value)
            elif field == 8:
                name = chunk.decode("utf-8")
            elif field == 9:
                raw = chunk
        elif wire == 5:
            at += 4
        elif wire == 1:
            at += 8
        else:
            raise ValueError(f"{path}: unexpected wire type {wire}")
    if data_type not in DTYPES:
        raise Unsupported(f"{RUNTIME} with numpy cannot feed TensorProto data type {data_type} (input '{name}')")
    return np.frombuffer(raw, dtype=np.dtype(DTYPES[data_type]).newbyteorder("<")).reshape(dims).copy()


def field(number, wire, payload):
    return encode_varint(number << 3 | wire) + payload


def write_tensor(path, name, array):
    array = np.ascontiguousarray(array)
    if array.dtype not in DATA_TYPES:
        raise Unsupported(f"output '{name}' has numpy dtype {array.dtype}, which has no TensorProto counterpart here")
    dims = b"".join(encode_varint(int(d)) for d in array.shape)
    raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    encoded = name.encode("utf-8")
    out = b""
    if array.shape:
        out += field(1, 2, encode_varint(len(dims)) + dims)
    out += field(2, 0, encode_varint(DATA_TYPES[array.dtype]))
    out += field(8, 2, encode_varint(len(encoded)) + encoded)
    out += field(9, 2, encode_varint(len(raw)) + raw)
    with open(path, "wb") as f:
        f.write(out)


def one_line(error):
    return " ".join(str(error).split())


def run_model(model, job):
    result = {"runtime": RUNTIME, "version": ort.__version__, "status": "ran", "message": None, "outputs": [],
              "load_seconds": 0, "run_seconds": 0}
    started = time.monotonic()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if job.get("threads"):
        options.intra_op_num_threads = job["threads"]
    try:
        session = ort.InferenceSession(model["path"], options, providers=["CPUExecutionProvider"])
    except Exception as error:  # ORT raises its own exception types; any of them is a refusal
        result.update(status="load-error", message=one_line(error))
        return result
    result["load_seconds"] = time.monotonic() - started
    started = time.monotonic()
    try:
        feeds = {item["name"]: read_tensor(item["file"]) for item in model["inputs"]}
        fetched = session.run(model["outputs"], feeds)
        os.makedirs(model["output_dir"], exist_ok=True)
        for k, (name, value) in enumerate(zip(model["outputs"], fetched)):
            path = os.path.join(model["output_dir"], f"{k}.pb")
            write_tensor(path, name, np.asarray(value))
            result["outputs"].append({"name": name, "file": path})
    except Unsupported as error:
        result.update(status="unsupported", message=str(error))
    except Exception as error:
        result.update(status="run-error", message=one_line(error))
    result["run_seconds"] = time.monotonic() - started
    return result


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python3 ort_driver.py JOB.json\n")
        sys.exit(2)
    with open(sys.argv[1]) as f:
        job = json.load(f)
    for model in job["models"]:
        result = run_model(model, job)
        with open(model["result"], "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
