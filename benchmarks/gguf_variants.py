"""GGUF variants of a packaged model made with llama.cpp's own quantizer, for the gate-validity study.

    python benchmarks/gguf_variants.py --out variants
    python benchmarks/gguf_variants.py --model qwen2.5-coder-0.5b --out variants/qwen2.5-coder-0.5b --only Q3_K_M Q2_K

writes, once each (files are never committed: ``variants/`` is ignored by git):

* ``smollm2-135m-f32.gguf``: the packaged GGUF (Q4_1) written back at full precision. Each
  tensor is dequantized with the ``gguf`` package and stored as F32, every metadata key is
  copied and the file type set to ALL_F32. Its weights are exactly those the transformers
  backend's ``smollm2-135m`` folder holds (the same dequantization), so it is the study's
  full-precision reference: it has no rounding beyond the Q4_1 of the packaged file.
* ``smollm2-135m-Q8_0.gguf``, ``-Q4_K_M``, ``-Q3_K_M``, ``-Q2_K``: the F32 file quantized by
  llama.cpp's quantizer, ``llama_model_quantize`` (what the ``llama-quantize`` tool runs),
  with its default choices per tensor for each file type and no importance matrix.

A file type names llama.cpp's target, not what every tensor gets: a K-quant packs rows in
blocks of 256, and SmolLM2's width (576) is not a multiple of 256, so the quantizer falls
back to an older type (Q4_0, Q5_0, Q5_1, Q8_0) for every tensor whose rows are 576 wide.
After each file the script prints what it holds, each ggml type's share of the file's
parameters (read with the ``gguf`` package's ``GGUFReader``), and writes that line beside it
(``<file>.holds.txt``). Measured so (llama-cpp-python 0.3.36):

    F32                       F32 100 %
    Q8_0                      Q8_0 100 %
    Q4_K_M                    Q5_0 58 %, Q8_0 22 %, Q4_K 11 %, Q6_K 9 %
    Q3_K_M                    Q4_0 49 %, Q8_0 21 %, Q4_K 19 %, Q5_0 10 %, Q5_K 1 %, Q5_1 0.16 %
    Q2_K                      Q4_0 59 %, Q8_0 21 %, Q3_K 20 %
    Q4_1 (the packaged file)  Q4_1 79 %, Q8_0 21 %

(and F32 0.03 % in each: the norms). Only the feed-forward down projections (1,536 wide)
take a K-quant: the "Q2_K" file holds no 2-bit tensor.

``--model qwen2.5-coder-0.5b`` (Qwen2.5-Coder-0.5B-Instruct, whose packaged file is already quantized, mostly
Q5_0 and Q8_0) quantizes that packaged file itself, as ``llama-quantize --allow-requantize`` does: llama.cpp
de-quantizes each tensor and rounds it again to the smaller type, so the variants hold both roundings, as a
user's would who has only that file. Its reference is the packaged file; no F32 file is made.

    python benchmarks/gguf_variants.py --out variants --fixed-by blame.json

instead makes the fix set of a ``longctx blame --backend llama.cpp --out blame.json`` as
``longctx gguf-fix-set --fixed-by blame.json`` does, named ``<original>-<type>-fixed.gguf`` in
``--out``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_longctx.backends.packaged import PACKAGED as PACKAGED_MODELS
from pytest_longctx.backends.packaged import gguf_file

# the file types to quantize to, as llama.cpp names them (llama_ftype LLAMA_FTYPE_MOSTLY_<name>)
QUANTS = ("Q8_0", "Q4_K_M", "Q3_K_M", "Q2_K")
STEM = "smollm2-135m"
PACKAGED = "Q4_1"  # the packaged file's type
MODELS = {model.alias: model for model in PACKAGED_MODELS}
REQUANTIZED = ("qwen2.5-coder-0.5b",)  # models whose variants are made from the packaged file itself, not from F32


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


def composition(path: Path) -> dict[str, float]:
    """ggml type -> its share of the file's parameters (tensor elements), largest first."""
    from gguf import GGUFReader

    counts: dict[str, int] = {}
    for tensor in GGUFReader(path).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + int(tensor.n_elements)
    total = sum(counts.values())
    return {name: count / total for name, count in sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))}


def holds(path: Path) -> str:
    """What ``path`` holds, as one line: each ggml type and its share of the parameters."""
    return ", ".join(f"{name} {share:.0%}" if share >= 0.005 else f"{name} {share:.2%}"
                     for name, share in composition(path).items()).replace("%", " %")


def noted(path: Path) -> str:
    """``holds(path)``, also written beside the file (``<file>.holds.txt``)."""
    line = holds(path)
    path.with_name(f"{path.name}.holds.txt").write_text(line + "\n")
    return line


def build(out: Path, names: tuple[str, ...] = ("F32", *QUANTS), threads: int = 0, model: str = STEM) -> dict[str, Path]:
    """name -> .gguf file of the packaged ``model``, built when missing: ``F32`` the full-precision
    reference, each other one quantized from it (for a model of REQUANTIZED: from the packaged file)."""
    from pytest_longctx.backends.llama_cpp.quantize import quantize
    from pytest_longctx.backends.llama_cpp.settings import default_threads

    out.mkdir(parents=True, exist_ok=True)
    packaged = Path(gguf_file(MODELS[model]))
    built = {}
    if model in REQUANTIZED:
        source = packaged
    else:
        source = built["F32"] = out / f"{model}-f32.gguf"
        if not source.exists():
            full_precision(packaged, source)
            print(f"F32: {source.name} holds {noted(source)}", file=sys.stderr, flush=True)
    for name in names:
        if name == "F32" and model not in REQUANTIZED:
            continue
        target = out / f"{model}-{name}.gguf"
        if not target.exists():
            if name == "F32":
                full_precision(packaged, target)
            else:
                quantize(source, target, name, threads or default_threads(), requantize=model in REQUANTIZED)
            print(f"{name}: {target.name} holds {noted(target)}", file=sys.stderr, flush=True)
        built[name] = target
    return {name: built[name] for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=list(MODELS), default=STEM, help="the packaged model (default %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("variants"))
    parser.add_argument("--only", nargs="*", choices=("F32", *QUANTS), default=["F32", *QUANTS])
    parser.add_argument("--fixed-by", type=Path, metavar="BLAME_JSON",
                        help="instead: make the fix set of a llama.cpp blame's --out file from its original, "
                             "as its llama-quantize command would")
    args = parser.parse_args()
    if args.fixed_by:
        from pytest_longctx.cli.gguf_fix_set import fix_set_command, fixed_by

        command = fix_set_command(str(args.fixed_by))
        stem = Path(command.original).name.removesuffix(".gguf").removesuffix("-f32")
        target = fixed_by(str(args.fixed_by), str(args.out / f"{stem}-{command.file_type}-fixed.gguf"))
        print(f"{target} ({target.stat().st_size / 2**20:.0f} MiB), holds {noted(target)}")
        return
    files = build(args.out, tuple(args.only), model=args.model)
    label = "packaged, the variants' source" if args.model in REQUANTIZED else f"{PACKAGED} (packaged, the F32 file's source)"
    files[label] = Path(gguf_file(MODELS[args.model]))
    for name, path in files.items():
        print(f"{name}: {path} ({path.stat().st_size / 2**20:.0f} MiB), holds {noted(path) if path.parent == args.out else holds(path)}")


if __name__ == "__main__":
    main()
