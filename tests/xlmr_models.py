"""XLM-RoBERTa checkpoints for tests/test_xlmr.py, made here without the hub: tiny random
XLMRobertaModel / XLMRobertaForSequenceClassification by transformers, with a SentencePiece
Unigram tokenizer trained on local text and wrapped as transformers' XLMRobertaTokenizerFast.

Two tokenizers: `sentencepiece`'s trainer with its default nmt_nfkc normalization (so the
tokenizer carries a precompiled charsmap, as XLM-R's does), converted by transformers; and
its trainer again without normalization, its pieces given to XLMRobertaTokenizerFast as a plain
vocabulary (no charsmap). Both are trained on one thread, so every run makes the same files."""
from __future__ import annotations

from pathlib import Path

import torch

from embed_models import declare_pooling

XLMR = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=130, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
            bos_token_id=0, eos_token_id=2)

CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Crème brûlée is a dessert; naïve café-goers love it (really).",
    "東京は日本の首都です。 Tokyo is the capital of Japan. 北京是中国的首都。",
    "Embeddings map text to vectors, so that similar meanings land near each other in the space.",
    "Ｆｕｌｌｗｉｄｔｈ letters, ① circled digits and ﬁ ligatures are normalized first.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Rerankers score how well a document answers a query: 3.14159, 42, 2026-12-06.",
]

# Mixed text: accents, CJK, punctuation, whitespace runs, full-width forms, a ligature, an emoji
# (no piece covers it: <unk>), text that only NFKC makes known.
MIXED = CORPUS + [
    "", "a", "  leading and trailing  ", "tabs\tand\nnew  lines   runs", "Ｆｕｌｌ ＡＳＣＩＩ ① ﬁne",
    "emoji 🙂 between words", "über-naïve CAFÉ!!! ... ???", "日本語とEnglishの混在テキスト、句読点。",
    "x" * 40, "Ⅻ ㎏ ½ ™",
]

PAIRS = [
    ("What is the capital of France?", ["Paris is the capital and largest city of France.",
                                         "The quick brown fox jumps over the lazy dog.",
                                         "Tokyo", "France " * 20]),
    ("東京は？", ["東京は日本の首都です。", "Crème brûlée is a dessert."]),
]


def _train_unigram(work: Path, prefix: str, vocab_size: int, **options) -> None:
    """sentencepiece's Unigram trainer on the corpus, one thread (deterministic): work/prefix.model."""
    import sentencepiece as spm
    work.mkdir(parents=True, exist_ok=True)
    (work / "corpus.txt").write_text("\n".join(CORPUS * 10), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(work / "corpus.txt"), model_prefix=str(work / prefix),
                                   vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2, **options)


def _spm_tokenizer(out: Path, work: Path) -> None:
    from transformers import XLMRobertaTokenizerFast
    _train_unigram(work, "m", 400)
    (work / "sentencepiece.bpe.model").write_bytes((work / "m.model").read_bytes())
    XLMRobertaTokenizerFast.from_pretrained(str(work)).save_pretrained(str(out))


def _unigram_tokenizer(out: Path, work: Path) -> None:
    """Pieces and scores from sentencepiece's Unigram trainer without normalization (on one
    thread it is deterministic; `tokenizers`' UnigramTrainer picked different pieces from run to
    run), given to XLMRobertaTokenizerFast as a plain vocabulary: no charsmap."""
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizerFast
    _train_unigram(work, "plain", 300, normalization_rule_name="identity")
    sp = spm.SentencePieceProcessor(model_file=str(work / "plain.model"))
    special = ["<s>", "<pad>", "</s>", "<unk>"]
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())
              if not (sp.is_unknown(i) or sp.is_control(i))]
    vocab = [(t, 0.0) for t in special] + pieces + [("<mask>", 0.0)]
    XLMRobertaTokenizerFast(vocab=vocab).save_pretrained(str(out))


def build_xlmr(out: Path, classifier: bool, charsmap: bool = True) -> Path:
    """A tiny random XLM-R (an embedder declaring mean pooling, or a one-label reranker) beside
    its tokenizer."""
    import transformers as tf
    out.mkdir(parents=True, exist_ok=True)
    if charsmap:
        _spm_tokenizer(out, out.parent / f"{out.name}-spm")
    else:
        _unigram_tokenizer(out, out.parent / f"{out.name}-spm")
    n_vocab = len(tf.AutoTokenizer.from_pretrained(str(out)))
    torch.manual_seed(3 if classifier else 4)
    config = tf.XLMRobertaConfig(**XLMR, vocab_size=n_vocab, num_labels=1)
    config.initializer_range = 0.2      # weights large enough that the layers matter
    if classifier:
        tf.XLMRobertaForSequenceClassification(config).save_pretrained(out)
    else:   # with its pooler, and mean pooling declared as multilingual-e5 declares it
        tf.XLMRobertaModel(config).save_pretrained(out)
        declare_pooling(out, XLMR["hidden_size"], "mean")
    return out


def as_llamacpp_writes(src: Path, dst: Path) -> Path:
    """An F32 file of ours with the keys as llama.cpp's convert_hf_to_gguf.py writes an XLM-R
    reranker (compared key by key on 2026-12-06): no pooling type (its server is told
    --reranking), no cls_token_id, and remove_extra_whitespaces from tokenizer_config's
    clean_up_tokenization_spaces, false for a tokenizer saved by transformers 5."""
    import gguf
    import numpy as np
    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), arch="bert")
    dropped = {"bert.pooling_type", "tokenizer.ggml.cls_token_id", "general.architecture"}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in dropped:
            continue
        value = field.contents()
        if key == "tokenizer.ggml.remove_extra_whitespaces":
            value = False
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, field.types[0], sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, field.types[0])
    for t in reader.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        writer.add_tensor(t.name, np.array(t.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst
