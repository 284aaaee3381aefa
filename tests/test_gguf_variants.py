"""What a GGUF variant holds (benchmarks/gguf_variants.py): each ggml type's share of the
file's parameters, read back from the file, since a llama.cpp file type names only the
quantizer's target (SmolLM2's "Q2_K" holds no 2-bit tensor)."""
from __future__ import annotations

import numpy as np
from kit.needs import needs

pytestmark = needs("gguf", install='pip install -e ".[hf]"')


def test_a_gguf_variant_says_what_types_it_holds_by_parameters(tmp_path):
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    from gguf_variants import composition, noted

    path = tmp_path / "tiny.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_tensor("norm.weight", np.ones(32, dtype=np.float32))  # 32 parameters in F32
    packed = quantize(np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32), GGMLQuantizationType.Q8_0)
    writer.add_tensor("w.weight", packed, raw_dtype=GGMLQuantizationType.Q8_0)  # 96 in Q8_0
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert composition(path) == {"Q8_0": 0.75, "F32": 0.25}
    assert noted(path) == "Q8_0 75 %, F32 25 %"
    assert (tmp_path / "tiny.gguf.holds.txt").read_text() == "Q8_0 75 %, F32 25 %\n"
