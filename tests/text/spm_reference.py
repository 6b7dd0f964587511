"""SentencePiece reference for the tokenizer parity tests.

Encodes the inputs written by reference.js with Debian's python3-sentencepiece and appends the
.model tokenizers to the manifest. usage: spm_reference.py <data_dir> <out_dir>
"""
import json
import os
import sys

import sentencepiece as spm

data_dir, out_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
inputs = [json.loads(l)["text"] for l in open(os.path.join(out_dir, "inputs.jsonl"), encoding="utf-8")]
manifest_path = os.path.join(out_dir, "manifest.json")
manifest = json.load(open(manifest_path, encoding="utf-8"))
manifest = [m for m in manifest if m.get("kind") != "spm"]

for name in ["llama2.tokenizer.model", "spm_test_model.model"]:
    path = os.path.join(data_dir, "tokenizers", "sentencepiece", name)
    sp = spm.SentencePieceProcessor(model_file=path)
    out_file = os.path.join(out_dir, "spm-" + name.split(".")[0] + ".expected.jsonl")
    with open(out_file, "w", encoding="utf-8") as f:
        for text in inputs:
            ids = sp.encode(text, out_type=int)
            pieces = [sp.id_to_piece(i) for i in ids]
            f.write(json.dumps({"ids": ids, "tokens": pieces, "decode": sp.decode(ids)}) + "\n")
    manifest.append({"name": "spm-" + name.split(".")[0], "kind": "spm", "path": path, "expected": out_file,
                     "add_special": False, "pairs": False, "compare_offsets": False})

json.dump(manifest, open(manifest_path, "w", encoding="utf-8"), indent=1)
print("spm reference: %d inputs" % len(inputs))
