"""GGUF variants of SmolLM2 made with llama.cpp's own quantizer, for the gate-validity study.

    python benchmarks/gguf_variants.py --out variants

writes, once each (files are never committed: ``variants/`` is ignored by git):

* ``smollm2-135m-f32.gguf``: the packaged GGUF (Q4_1) written back at full precision. Each
  tensor is dequantized with the ``gguf`` package and stored as F32, every metadata key is
  copied and the file type set to ALL_F32. Its weights are exactly those the transformers
  backend's ``smollm2-135m`` folder holds (the same dequantization), so it is the study's
  full-precision reference: it has no rounding beyond the Q4_1 of the packaged file.
* ``smollm2-135m-Q8_0.gguf``, ``-Q4_K_M``, ``-Q3_K_M``, ``-Q2_K``: the F32 file quantized by
  llama.cpp's quantizer, ``llama_model_quantize`` (what the ``llama-quantize`` tool runs),
  with its default choices per tensor for each file type and no importance matrix.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

# the file types to quantize to, as llama.cpp names them (llama_ftype LLAMA_FTYPE_MOSTLY_<name>)
QUANTS = ("Q8_0", "Q4_K_M", "Q3_K_M", "Q2_K")
STEM = "smollm2-135m"


def full_precision(source: Path, target: Path) -> None:
    """``source`` (any GGUF) written as ``target`` with every tensor in F32."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
    from gguf.quants import dequantize

    reader = GGUFReader(source)
    architecture = reader.fields["general.architecture"].contents()
    partial = target.with_name(f".{target.name}.partial")
    writer = GGUFWriter(partial, architecture)  # writes general.architecture itself
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        kind = field.types[0]
        writer.add_key_value(name, field.contents(), kind, sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)
    writer.add_file_type(LlamaFileType.ALL_F32)
    for tensor in reader.tensors:
        if tensor.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            values = np.asarray(tensor.data, dtype=np.float32)
        else:
            values = dequantize(tensor.data, tensor.tensor_type)  # numpy order: [rows, columns]
        writer.add_tensor(tensor.name, np.ascontiguousarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(target)


def quantize(source: Path, target: Path, file_type: str, threads: int) -> None:
    """``source`` quantized to ``file_type`` by llama.cpp's own quantizer."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{file_type}")
    params.nthread = threads
    partial = target.with_name(f".{target.name}.partial")
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params)
    if status != 0:
        raise SystemExit(f"llama.cpp's quantizer failed on {source} -> {file_type} (status {status})")
    partial.rename(target)


def build(out: Path, names: tuple[str, ...] = ("F32", *QUANTS), threads: int = 0) -> dict[str, Path]:
    """name -> .gguf file, built when missing; ``F32`` is the full-precision reference."""
    from pytest_longctx.backends.aliases import smollm2_gguf

    out.mkdir(parents=True, exist_ok=True)
    reference = out / f"{STEM}-f32.gguf"
    if not reference.exists():
        full_precision(Path(smollm2_gguf()), reference)
    built = {"F32": reference}
    for name in names:
        if name == "F32":
            continue
        target = out / f"{STEM}-{name}.gguf"
        if not target.exists():
            quantize(reference, target, name, threads or len(os.sched_getaffinity(0)))
        built[name] = target
    return {name: built[name] for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("variants"))
    parser.add_argument("--only", nargs="*", choices=("F32", *QUANTS), default=["F32", *QUANTS])
    args = parser.parse_args()
    for name, path in build(args.out, tuple(args.only)).items():
        print(f"{name}: {path} ({path.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
