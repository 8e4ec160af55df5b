"""Shared fixtures: paths to the real data in ../shared and the shipped samples in data/; a tiny exported causal
model for the commands (`model_dir`); for training and fine-tuning tests, a shared token cache, a tiny pretrained model with labelled data to fine-tune, and the steps at
which last.ckpt was written."""

from __future__ import annotations

import importlib
import os
import random
from pathlib import Path

import pytest
import torch

# Decoding's fixed plan, in this process and the commands it starts: results must not depend on how fast each
# product ran (tests/inference/test_fast_decoding.py covers the measured plans).
os.environ.setdefault("BIOTF_DECODE_PLAN", "fixed")
# The precision gate measured in every process: tests change gates and conversions, and must not read figures kept
# by another run (tests/checkpoint/test_gate_cache.py turns the cache on in a temporary directory).
os.environ.setdefault("BIOTF_GATE_CACHE", "off")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: real public proteins, DNA, SMILES and text (see its SOURCES.md)."""
    path = SHARED / "data"
    if not path.is_dir():
        pytest.skip(f"{path} is not present (CI and developer machines have it beside the checkout)")
    return path


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """A tiny causal protein model, exported: enough for embed, plot, generate and export-model."""
    import torch

    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import AminoAcidTokenizer

    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=64, causal=True, pos="rope", norm="rmsnorm", mlp="swiglu")
    return save_pretrained(Transformer(config), AminoAcidTokenizer(), tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def qwen_tokenizer_dir(tmp_path_factory) -> Path:
    """A decompressed copy of ../shared/qwen2.5-tokenizer, loadable by transformers and biotf."""
    from biotf.tokenizers.build import unpacked_copy

    source = SHARED / "qwen2.5-tokenizer"
    if not source.is_dir():
        pytest.skip(f"{source} is not present")
    return unpacked_copy(source, tmp_path_factory.mktemp("qwen2.5-tokenizer"))


def build_random_esm(token_dropout: bool = True, tied: bool = True, position: str = "rotary",
                     embed_norm: bool = False, seed: int = 0, architecture: str = "EsmForMaskedLM",
                     hidden_size: int = 32, max_positions: int = 66, query_key_std: float | None = None):
    """A tiny random transformers ESM model, `EsmForMaskedLM` unless `architecture` names another ESM class
    (3 layers, 4 heads, ESM-2's 33-token vocabulary, <pad> 1, <mask> 32). `query_key_std` draws the query and key
    weights wider than HF's 0.02, so that attention is as sharp (and as sensitive to positions) as a trained model's."""
    import torch

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.EsmConfig(
        vocab_size=33, hidden_size=hidden_size, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=2 * hidden_size, position_embedding_type=position, token_dropout=token_dropout,
        mask_token_id=32, pad_token_id=1, layer_norm_eps=1e-5, emb_layer_norm_before=embed_norm,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=tied,
        max_position_embeddings=max_positions, num_labels=3)
    model = getattr(transformers, architecture)._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():  # HF initialises biases to 0 and norm gains to 1: randomise them so that they count
        for name, parameter in model.named_parameters():
            is_norm = "norm" in name.lower()
            if name.endswith("bias") or is_norm:
                parameter.normal_(1.0 if is_norm and name.endswith("weight") else 0.0, 0.2)
            elif query_key_std and name.endswith(("self.query.weight", "self.key.weight")):
                parameter.normal_(0.0, query_key_std)
    return model.eval()


def build_random_encoder(model_type: str, masked_lm: bool = True, tied: bool = True, hidden_act: str = "gelu",
                         seed: int = 0, type_vocab_size: int | None = None, max_positions: int = 40,
                         vocab_size: int = 33, pad_token_id: int = 1):
    """A tiny random BERT / RoBERTa (3 layers, 4 heads, d 32), by default over the protein tokenizer's ids (<pad> 1).
    HF initialises biases to 0 and norm gains to 1: they are randomised so that they count."""
    transformers = pytest.importorskip("transformers")
    config_class, lm_class, bare_class = {
        "bert": (transformers.BertConfig, transformers.BertForMaskedLM, transformers.BertModel),
        "roberta": (transformers.RobertaConfig, transformers.RobertaForMaskedLM, transformers.RobertaModel)}[model_type]
    torch.manual_seed(seed)
    if type_vocab_size is None:
        type_vocab_size = 2 if model_type == "bert" else 1  # as bert-base and roberta-base
    config = config_class(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                          intermediate_size=64, hidden_act=hidden_act, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, max_position_embeddings=max_positions,
                          pad_token_id=pad_token_id, layer_norm_eps=1e-5, type_vocab_size=type_vocab_size,
                          tie_word_embeddings=tied)
    model = (lm_class if masked_lm else bare_class)._from_config(config, attn_implementation="sdpa",
                                                                 dtype=torch.float32)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            is_norm = "norm" in name.lower()
            if name.endswith("bias") or is_norm:
                parameter.normal_(1.0 if is_norm and name.endswith("weight") else 0.0, 0.2)
            elif "token_type" in name or "position_embeddings" in name:
                parameter.normal_(0.0, 0.5)  # wide enough that a wrong row or offset shows
    return model.eval()


@pytest.fixture(scope="session")
def random_encoder():
    """`build_random_encoder`, for tests that build BERT / RoBERTa models of several shapes."""
    return build_random_encoder


@pytest.fixture(scope="session")
def random_esm():
    """`build_random_esm`, for tests that build ESM models of several shapes."""
    return build_random_esm


def save_esm_directory(model, directory: Path) -> Path:
    """`model` saved as a hub download looks, with the vocab.txt that transformers' EsmTokenizer writes for HF's
    own default ESM-2 vocabulary."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.esm.configuration_esm import get_default_vocab_list

    model.save_pretrained(directory)
    vocab = directory / "source-vocab.txt"
    vocab.write_text("\n".join(get_default_vocab_list()) + "\n")
    transformers.EsmTokenizer(str(vocab)).save_pretrained(directory)
    vocab.unlink()
    return directory


@pytest.fixture(scope="session")
def save_esm():
    """`save_esm_directory`, for tests that save ESM models of their own."""
    return save_esm_directory


@pytest.fixture(scope="session")
def esm2_checkpoint(tmp_path_factory) -> tuple[Path, object]:
    """(directory, model): a tiny random ESM-2 (rotary, token dropout) saved by `save_esm_directory`."""
    model = build_random_esm(seed=5)
    return save_esm_directory(model, tmp_path_factory.mktemp("esm2-tiny")), model


@pytest.fixture(scope="session")
def esm_encoder_checkpoints(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """{architecture: (directory, model)} for the ESM classes without a masked-LM head that biotf loads as encoders."""
    checkpoints = {}
    for seed, architecture in enumerate(("EsmModel", "EsmForSequenceClassification", "EsmForTokenClassification")):
        model = build_random_esm(seed=10 + seed, architecture=architecture)
        checkpoints[architecture] = (save_esm_directory(model, tmp_path_factory.mktemp(architecture)), model)
    return checkpoints


LONGEST_FILE = REPO / "tests" / "docs" / "test_examples.py"  # the documentation's blocks: minutes


def pytest_collection_modifyitems(config, items):
    """Under `pytest -n 2` each file runs whole on one worker, handed out in this order (`--dist loadfile
    --no-loadscope-reorder`): first the files with tests that start several processes, which run one at a time, and
    second the longest file, so that the other worker runs it meanwhile; then the rest as collected."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    files = list(dict.fromkeys(item.path for item in items))
    several = {item.path for item in items if "several_processes" in getattr(item, "fixturenames", ())}
    first = [path for path in files if path in several]
    order = first[:1] + [path for path in files if path == LONGEST_FILE] + first[1:]
    rank = {path: position for position, path in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.path, len(order)))


@pytest.fixture
def several_processes(tmp_path_factory):
    """For tests marked `SEVERAL_PROCESSES` (tests/torchrun_helpers.py): under `pytest -n 2`, one at a time."""
    from torchrun_helpers import one_at_a_time

    with one_at_a_time(tmp_path_factory):
        yield


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tests run tiny models: one intra-op thread is fastest, and on a busy 2-core machine every parallel
    region waits for a descheduled worker (SDPA on 40 keys: 15 ms with 2 threads, 15 us with 1)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread():
    """numpy's, scipy's and scikit-learn's BLAS and OpenMP pools at one thread too, for the whole session: their
    problems here are small, and on a busy 2-core machine a second BLAS thread spins while the first waits (a
    logistic regression on 16,000 rows of 84 features: 0.05 s of CPU with one thread, 1 s with two)."""
    try:
        importlib.import_module("scipy.linalg")  # loads scipy's own OpenBLAS now, so that the limit reaches it
        from threadpoolctl import threadpool_limits
    except ImportError:  # no scikit-learn (the analysis extra): numpy's BLAS keeps its threads
        yield
        return
    with threadpool_limits(1):
        yield


AMINO = "ACDEFGHIKLMNPQRSTVY"  # no W: the fine-tuning classification label is "has a W"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One token cache for the whole session: each shipped file is tokenized once."""
    return tmp_path_factory.mktemp("token-cache")


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory) -> Path:
    """base/: a tiny exported bidirectional model with the protein tokenizer; labelled.csv: 240 proteins with a
    class (contains W), a value (K count + W count / 2), per-residue labels (H for AELMQKRH, else C), a family."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    root = tmp_path_factory.mktemp("finetune")
    tokenizer = build_tokenizer({"kind": "protein"})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size))
    save_pretrained(model, tokenizer, root / "base")
    rng = random.Random(0)
    lines = ["id,sequence,label,value,ss,family"]
    for i in range(240):
        n = rng.randrange(15, 40)
        sequence = "".join(rng.choice(AMINO) for _ in range(n))
        if i % 2:
            p = rng.randrange(n - 3)
            sequence = sequence[:p] + "WWW" + sequence[p + 3:]
        ss = "".join("H" if c in "AELMQKRH" else "C" for c in sequence)
        label = "yes" if "W" in sequence else ("" if i == 4 else "no")  # record p4 is unlabelled
        lines.append(f"p{i},{sequence},{label},{sequence.count('K') + 0.5 * sequence.count('W')},{ss},f{i % 17}")
    (root / "labelled.csv").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def saves(monkeypatch) -> list[int]:
    """The global steps at which last.ckpt was written, in order."""
    from biotf.training import callbacks

    steps: list[int] = []
    save = callbacks.save_checkpoint

    def recording(checkpoint, path):
        if Path(path).name == "last.ckpt":
            steps.append(checkpoint["global_step"])
        return save(checkpoint, path)

    monkeypatch.setattr(callbacks, "save_checkpoint", recording)
    return steps
