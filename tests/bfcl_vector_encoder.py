"""A tiny random stand-in for the sentence-transformers encoder BFCL's memory_vector loads
(`SentenceTransformer("all-MiniLM-L6-v2")`), written into a Hugging Face hub cache in the hub's
layout (blobs, a snapshot of links to them, refs/main) with the files the hub's repository holds
(modules.json naming sentence_transformers.models' Transformer, Pooling and Normalize; a BERT
model and its WordPiece vocabulary), so that sentence-transformers resolves it offline as it
resolves the real one. A BERT of hidden size 32 and two layers with random weights: its
embeddings mean nothing, which the tests never rely on."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

REPO = "sentence-transformers/all-MiniLM-L6-v2"
HIDDEN, LAYERS, INTERMEDIATE, POSITIONS = 32, 2, 64, 128
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         *"abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"=_-()[]{}/",
         *("##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789")]  # fmt: skip
CONFIG = {
    "architectures": ["BertModel"], "model_type": "bert", "vocab_size": len(VOCAB),
    "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": 2,
    "intermediate_size": INTERMEDIATE, "max_position_embeddings": POSITIONS,
    "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0,
}  # fmt: skip
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize",
     "type": "sentence_transformers.models.Normalize"},
]  # fmt: skip
POOLING = {"word_embedding_dimension": HIDDEN, "pooling_mode_cls_token": False,
           "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
           "pooling_mode_mean_sqrt_len_tokens": False}  # fmt: skip
TOKENIZER = {"do_lower_case": True, "tokenizer_class": "BertTokenizer",
             "model_max_length": POSITIONS, "unk_token": "[UNK]", "sep_token": "[SEP]",
             "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}  # fmt: skip


def _weights() -> dict[str, np.ndarray]:
    """BertModel's tensors, random (seeded), by the names transformers loads."""
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, shape).astype(np.float32)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {prefix + ".weight": np.ones(HIDDEN, np.float32),
                prefix + ".bias": np.zeros(HIDDEN, np.float32)}  # fmt: skip

    def dense(prefix: str, out: int, into: int) -> dict[str, np.ndarray]:
        return {prefix + ".weight": rand(out, into), prefix + ".bias": rand(out)}

    found = {"embeddings.word_embeddings.weight": rand(len(VOCAB), HIDDEN),
             "embeddings.position_embeddings.weight": rand(POSITIONS, HIDDEN),
             "embeddings.token_type_embeddings.weight": rand(2, HIDDEN),
             **norm("embeddings.LayerNorm"), **dense("pooler.dense", HIDDEN, HIDDEN)}  # fmt: skip
    for i in range(LAYERS):
        layer = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            found |= dense(f"{layer}.attention.self.{part}", HIDDEN, HIDDEN)
        found |= dense(f"{layer}.attention.output.dense", HIDDEN, HIDDEN)
        found |= norm(f"{layer}.attention.output.LayerNorm")
        found |= dense(f"{layer}.intermediate.dense", INTERMEDIATE, HIDDEN)
        found |= dense(f"{layer}.output.dense", HIDDEN, INTERMEDIATE)
        found |= norm(f"{layer}.output.LayerNorm")
    return found


def write_encoder(hub: Path) -> Path:
    """The stand-in in hub cache `hub`; its snapshot folder. Files world-readable, as the hub's
    downloads are (the sandbox reads them as another user where the runner is root)."""
    repo = hub / ("models--" + REPO.replace("/", "--"))
    staged = repo / "staged"
    staged.mkdir(parents=True)
    files = {
        "modules.json": json.dumps(MODULES),
        "config_sentence_transformers.json": json.dumps({"__version__": {}}),
        "sentence_bert_config.json": json.dumps({"max_seq_length": POSITIONS}),
        "1_Pooling/config.json": json.dumps(POOLING),
        "config.json": json.dumps(CONFIG),
        "vocab.txt": "\n".join(VOCAB) + "\n",
        "tokenizer_config.json": json.dumps(TOKENIZER),
    }
    for name, text in files.items():
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_text(text)
    save_file(_weights(), str(staged / "model.safetensors"))
    revision = hashlib.sha1(b"evalpipe tiny encoder").hexdigest()
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir()
    for path in sorted(p for p in staged.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        blob.chmod(0o644)
        link = snapshot / path.relative_to(staged)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * len(link.relative_to(repo).parts[1:])) / "blobs" / blob.name)
    for path in sorted(staged.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    staged.rmdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot
