"""Inference precision (`biotf.model.precision`): bf16 and int8 against fp32 on the same model, at the fidelity gates
(per-record embedding cosine >= 0.999 bf16 / 0.99 int8, pseudo-log-likelihood drift < 0.1 nats per sequence,
zero-shot Spearman on TEM-1 within 0.01), on a small protein model trained here on DeepLoc, through the paths embed and
score use (length-grouped and packed), and on an ESM-2 checkpoint against `transformers` in fp32; the gate refuses a
broken quantization; `auto` picks from the CPU's flags."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

import biotf
from biotf.checkpoint import save_pretrained
from biotf.model import Transformer, TransformerConfig
from biotf.model import precision
from biotf.model.int8 import Int8Scheme
from biotf.model.precision import COSINE_GATE, LIKELIHOOD_GATE, PrecisionError, auto_precisions
from biotf.scoring.mutations import difference
from biotf.scoring.scorer import Scorer
from biotf.tokenizers import AminoAcidTokenizer

SPEARMAN_GATE = 0.01
REDUCED = ("bf16", "int8")
# The flags of the two CPU kinds this project runs on (/proc/cpuinfo, abridged): an Intel Xeon with AMX, and an
# AMD EPYC with AVX2 alone.
XEON_AMX = {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile"}
EPYC_AVX2 = {"avx2", "fma", "sse4_2"}


def read_fasta(path) -> list[tuple[str, str]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    records, name = [], None
    with opener(path, "rt") as handle:
        for line in handle:
            line = line.strip()
            if line.startswith(">"):
                name = line[1:]
                records.append([name, ""])
            elif line:
                records[-1][1] += line
    return [(name, sequence) for name, sequence in records]


@pytest.fixture(scope="module")
def deeploc(shared_data) -> list[str]:
    return [sequence for _, sequence in read_fasta(shared_data / "proteins" / "deeploc_test_set.fasta")]


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory, deeploc):
    """A 64-wide, 2-layer protein masked LM trained for 60 steps on 126-residue windows of DeepLoc (its
    predictions follow the residues' frequencies at least: a random model's are near uniform), saved."""
    tokenizer = AminoAcidTokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the autouse one-thread fixture is per test; this one runs before it
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    config = TransformerConfig(vocab_size=33, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128,
                               max_seq_len=320, causal=False, pos="rope", norm="layernorm", mlp="gelu")
    model = Transformer(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        windows = []
        for index in rng.integers(0, len(deeploc), 16):
            start = rng.integers(0, max(1, len(deeploc[index]) - 126))
            windows.append(tokenizer.encode(deeploc[index][start:start + 126]))
        ids = torch.full((len(windows), max(map(len, windows))), tokenizer.pad_id)
        for row, window in enumerate(windows):
            ids[row, :len(window)] = torch.tensor(window)
        masked = (torch.rand(ids.shape) < 0.15) & ~torch.isin(ids, torch.tensor(sorted(tokenizer.special_ids)))
        labels = torch.where(masked, ids, -100)
        loss = model(ids.masked_fill(masked, tokenizer.mask_id), attention_mask=ids != tokenizer.pad_id,
                     labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    return save_pretrained(model.eval(), tokenizer, tmp_path_factory.mktemp("precision") / "trained")


@pytest.fixture(scope="module")
def loaded(trained_model):
    """{precision: biotf.Model} of the trained model."""
    return {name: biotf.Model.load(trained_model, precision=name) for name in ("fp32", *REDUCED)}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("name", REDUCED)
def test_reduced_precisions_pass_their_gates_on_a_trained_model(loaded, deeploc, name):
    chosen = loaded[name].precision
    assert chosen.precision == name and chosen.fidelity.passes(name), chosen
    records = deeploc[:24]
    reference = loaded["fp32"].embed(records)
    for packing in (False, True):
        vectors = loaded[name].embed(records, packing=packing)
        assert cosines(vectors, reference).min() >= COSINE_GATE[name]
    short = [sequence for sequence in deeploc if len(sequence) <= 80][:4]  # PLL: one masked copy a residue
    fp32 = loaded["fp32"].score(short, method="pll")["log_likelihood"]
    for packing in (False, True):
        drift = (loaded[name].score(short, method="pll", packing=packing)["log_likelihood"] - fp32).abs()
        assert drift.max() < LIKELIHOOD_GATE, drift.tolist()


@pytest.mark.parametrize("name", REDUCED)
def test_tem1_zero_shot_spearman_stays_within_001_of_fp32(loaded, shared_data, name):
    from scipy.stats import spearmanr

    records = read_fasta(shared_data / "proteins" / "esm_P62593_TEM1_variants.fasta.gz")
    wild_type = next(sequence for header, sequence in records if header.endswith("P20P|1.581033423"))
    variants, fitness = [], []
    for header, sequence in records[:400]:
        variant = difference(wild_type, sequence, header)
        if variant.mutations:  # synonymous rows are the wild type itself
            variants.append(variant)
            fitness.append(float(header.rsplit("|", 1)[1]))
    rho = {}
    for precision_name in ("fp32", name):
        model = loaded[precision_name]
        scores = Scorer(model.network, model.tokenizer).variant_scores(wild_type, variants, "masked-marginal")
        rho[precision_name] = spearmanr([score.score for score in scores], fitness).statistic
    assert abs(rho[name] - rho["fp32"]) <= SPEARMAN_GATE, rho


@pytest.mark.parametrize("name", REDUCED)
def test_an_esm2_checkpoint_stays_at_the_gates_against_transformers_fp32(esm2_checkpoint, name):
    directory, hf_model = esm2_checkpoint
    model = biotf.Model.load(directory, precision=name)
    sequences = ["MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQ"[:60], "MSLEQKKGADIISKILQIQNS"]
    ours = model.embed(sequences)
    tokenizer = model.tokenizer
    with torch.no_grad():
        theirs = []
        for sequence in sequences:
            hidden = hf_model.esm(torch.tensor([tokenizer.encode(sequence)])).last_hidden_state[0]
            theirs.append(hidden[1:-1].mean(0).numpy())  # content tokens: <cls> and <eos> left out
    assert cosines(ours, np.stack(theirs)).min() >= COSINE_GATE[name]


def test_a_broken_int8_scale_is_refused_in_one_line_naming_the_model(trained_model, monkeypatch):
    from biotf.model import int8

    rounded = int8.error_fed

    def wrong_scale(*args):  # the right integers under four times their scale
        right = rounded(*args)
        return torch._make_per_channel_quantized_tensor(right.int_repr(), right.q_per_channel_scales() * 4,
                                                        right.q_per_channel_zero_points(), 0)

    monkeypatch.setattr(int8, "error_fed", wrong_scale)
    with pytest.raises(PrecisionError) as refused:
        biotf.Model.load(trained_model, precision="int8")
    message = str(refused.value)
    assert "\n" not in message and "precision int8 is refused for" in message and str(trained_model) in message
    assert "precision='fp32'" in message  # a Python caller; the command line reads --precision fp32


def test_auto_tries_its_next_precision_when_one_fails_the_gate(trained_model, monkeypatch):
    def noisy_bf16(network, calibration):
        conversion = precision._to_bf16(network, calibration)
        with torch.no_grad():
            for parameter in network.blocks.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.5)
        return conversion

    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(XEON_AMX))
    monkeypatch.setitem(precision.CONVERSIONS, "bf16", noisy_bf16)
    reference = biotf.Model.load(trained_model)
    model = biotf.Model.load(trained_model, precision="auto")
    assert model.precision.precision == "int8" and "bf16 failed the gate" in str(model.precision)
    assert model.network.embed.weight.dtype == torch.float32 and model.network.float_head is None  # bf16 undone
    monkeypatch.setitem(precision.CONVERSIONS, "int8", noisy_bf16)
    model = biotf.Model.load(trained_model, precision="auto")
    assert model.precision.precision == "fp32" and str(model.precision).count("failed the gate") == 2
    np.testing.assert_array_equal(model.embed(["MKTAYIAKQR"]), reference.embed(["MKTAYIAKQR"]))  # fp32 restored


def test_auto_takes_bf16_then_int8_only_where_the_cpu_computes_them_natively():
    assert auto_precisions("cpu", XEON_AMX) == [("bf16", "auto: the CPU has amx_bf16"),
                                                ("int8", "auto: the CPU has amx_int8"), ("fp32", "auto: fp32")]
    assert [name for name, _ in auto_precisions("cpu", {"avx512f", "avx512_vnni"})] == ["int8", "fp32"]
    [(chosen, why)] = auto_precisions("cpu", EPYC_AVX2)
    assert chosen == "fp32" and "has none of amx_bf16" in why


def test_int8_on_a_gpu_is_refused_in_one_line():
    with pytest.raises(PrecisionError, match="int8 runs on the CPU only"):
        precision.check_device("int8", "cuda")


def test_a_fine_tuned_model_predicts_in_each_precision(tmp_path):
    from biotf.checkpoint.task_model import TaskInfo, save_task_model
    from biotf.model.heads import TaskModel

    torch.manual_seed(0)
    tokenizer = AminoAcidTokenizer()
    trunk = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=33))
    for task in ("classification", "regression"):
        outputs = 1 if task == "regression" else 2
        info = TaskInfo(task, None if task == "regression" else ["no", "yes"], "mean", 64, "crop")
        directory = save_task_model(TaskModel(trunk, task, outputs, pool="mean"), tokenizer, info, tmp_path / task)
        tables = {name: biotf.Model.load(directory, precision=name).predict(["MKTAYIAKQR", "GAVLIM"])
                  for name in ("fp32", *REDUCED)}
        column = "prediction" if task == "regression" else "p_yes"
        for name in REDUCED:
            assert np.allclose(tables[name][column].astype(float), tables["fp32"][column].astype(float), atol=0.02)


def test_the_commands_print_the_precision_in_their_summary(trained_model, tmp_path, capsys):
    from biotf.cli import main

    fasta = tmp_path / "p.fasta"
    fasta.write_text(">a\nMKTAYIAKQR\n>b\nGAVLIMKTAY\n")
    assert main(["embed", "--model", str(trained_model), "--input", str(fasta), "--output", str(tmp_path / "e.npz"),
                 "--precision", "int8", "--no-progress"]) == 0
    assert "precision int8 (gate: cosine >= " in capsys.readouterr().err
    assert main(["score", "--model", str(trained_model), "--input", str(fasta), "--output", str(tmp_path / "s.csv"),
                 "--precision", "auto", "--no-progress"]) == 0
    assert f"precision {auto_precisions('cpu')[0][0]}" in capsys.readouterr().err.splitlines()[-1]



def test_contact_maps_stay_close_in_each_precision(esm2_checkpoint):
    directory, _ = esm2_checkpoint
    sequences = ["MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"]
    reference = biotf.Model.load(directory).contacts(sequences)[0]
    for name in REDUCED:
        maps = biotf.Model.load(directory, precision=name).contacts(sequences)[0]
        assert maps.dtype == np.float32 and np.abs(maps - reference).max() < 0.02, name


def test_an_unknown_precision_is_one_line_naming_the_allowed_ones(trained_model):
    from biotf.errors import ConfigError

    with pytest.raises(ConfigError, match=r"precision='fp16' \(allowed: fp32 \| bf16 \| int8 \| auto\)"):
        biotf.Model.load(trained_model, precision="fp16")


def test_a_model_without_an_lm_head_is_gated_on_its_hidden_states_and_says_so(esm_encoder_checkpoints, monkeypatch):
    directory, _ = esm_encoder_checkpoints["EsmModel"]
    chosen = biotf.Model.load(directory, precision="bf16").precision
    assert chosen.fidelity.drift is None and chosen.fidelity.passes("bf16")
    assert "hidden states only: no LM head" in str(chosen) and "nats" not in str(chosen), str(chosen)

    def noisy_int8(network, calibration):
        conversion = precision._to_int8(network, calibration)
        with torch.no_grad():
            network.embed.weight.add_(torch.randn_like(network.embed.weight))
        return conversion

    monkeypatch.setitem(precision.CONVERSIONS, "int8", noisy_int8)
    with pytest.raises(PrecisionError) as refused:
        biotf.Model.load(directory, precision="int8")
    message = str(refused.value)
    assert "hidden states only: no LM head" in message and "the gate needs cosine >= 0.99 (" in message
    assert "nats" not in message and "drift" not in message, message


def with_outlier_channels(directory, out_directory, factor: float = 30.0):
    """The model of `directory` rewritten to compute the same function with outliers such as real checkpoints have:
    four channels of each block's attention norm scaled up by `factor` and the query/key/value columns that read
    them scaled down by it (activation outliers), and the same four value rows scaled up with the output
    projection's columns that read them scaled down (weight rows far larger than the rest)."""
    model = biotf.Model.load(directory)
    channels = torch.tensor([3, 17, 40, 51])
    with torch.no_grad():
        for block in model.network.blocks:
            d_model = block.attn.out.weight.shape[0]
            block.attn_norm.weight[channels] *= factor
            block.attn.qkv.weight[:, channels] /= factor
            block.attn.qkv.weight[2 * d_model + channels] *= factor  # the value rows (n_kv_heads = n_heads)
            block.attn.out.weight[:, channels] /= factor
    return save_pretrained(model.network, model.tokenizer, out_directory)


def test_outliers_refuse_per_tensor_int8_and_pass_per_channel_smoothed_int8(trained_model, tmp_path, monkeypatch):
    import functools

    from biotf.model.int8 import PER_TENSOR

    outliers = with_outlier_channels(trained_model, tmp_path / "outliers")
    sequences = ["MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "MSLEQKKGADIISKILQIQNS"]
    np.testing.assert_allclose(biotf.Model.load(outliers).embed(sequences),
                               biotf.Model.load(trained_model).embed(sequences), rtol=1e-4, atol=1e-5)
    chosen = biotf.Model.load(outliers, precision="int8").precision
    assert chosen.precision == "int8" and chosen.fidelity.cosine >= 0.999 and chosen.fidelity.drift < 0.05, chosen
    assert "per-channel int8 weights, GPTQ rounding, SmoothQuant alpha 0.5" in str(chosen), str(chosen)
    assert "fitted on 20 seeded rows" in str(chosen)
    assert chosen.identity() == {"precision": "int8", "precision_scheme": chosen.scheme}
    monkeypatch.setitem(precision.CONVERSIONS, "int8", functools.partial(precision._to_int8, scheme=PER_TENSOR))
    with pytest.raises(PrecisionError, match="precision int8 is refused for") as refused:
        biotf.Model.load(outliers, precision="int8")
    drift = float(str(refused.value).split("log-likelihood drift <= ")[1].split()[0])
    assert drift >= LIKELIHOOD_GATE, str(refused.value)
    # per-tensor int8 passes the same model without the outliers
    assert biotf.Model.load(trained_model, precision="int8").precision.precision == "int8"


def test_the_int8_scheme_follows_the_cpus_int8_dot_products():
    assert precision.int8_scheme(XEON_AMX) == Int8Scheme(
        kernel="onednn" if torch.backends.mkldnn.is_available() else "fbgemm")
    assert precision.int8_scheme(EPYC_AVX2) == Int8Scheme(activation_bits=7, kernel="fbgemm")
    assert precision.int8_scheme({"asimd", "asimddp"}) == Int8Scheme(kernel="fbgemm")  # ARM: no oneDNN int8 matmul
    with pytest.raises(ValueError, match="int8 kernel"):
        Int8Scheme(kernel="cublas")


def test_gptq_rounding_shrinks_the_products_error_on_its_inputs():
    from biotf.model.int8 import error_fed, quantized_weight

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 96, generator=generator) * 0.05
    inputs = torch.randn(400, 24, generator=generator) @ torch.randn(24, 96, generator=generator)  # correlated inputs
    nearest = quantized_weight(weight, per_channel=True)
    fed = error_fed(weight, nearest, inputs.T @ inputs)
    assert torch.equal(fed.q_per_channel_scales(), nearest.q_per_channel_scales())
    assert fed.int_repr().abs().max() <= 127
    error = {name: float(((q.dequantize() - weight) @ inputs.T).norm()) for name, q in (("rtn", nearest),
                                                                                       ("gptq", fed))}
    assert error["gptq"] < 0.5 * error["rtn"], error


def test_quantized_activations_are_uint8_codes_of_their_range():
    from biotf.model.int8 import quantized_activations

    x = torch.randn(50, 32) * 3 + 1
    for levels in (255, 127):
        codes, scale, zero_point = quantized_activations(x, levels)
        assert codes.dtype == torch.uint8 and codes.shape == x.shape and int(codes.max()) <= levels
        restored = (codes.float() - zero_point) * scale
        assert float((restored - x).abs().max()) <= scale / 2 + 1e-6


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")
def test_the_onednn_and_fbgemm_kernels_compute_the_same_int8_product():
    from biotf.model.int8 import InputStatistics, SmoothedInt8Linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96)
    x = torch.randn(3, 40, 64)
    x[..., 5] *= 20  # an outlier channel
    flat = x.reshape(-1, 64)
    statistics = InputStatistics(flat.abs().amax(0), flat.mean(0), flat.T @ flat)
    reference = linear(x).detach()
    outputs = {kernel: SmoothedInt8Linear(linear, statistics, Int8Scheme(kernel=kernel))(x)
               for kernel in ("onednn", "fbgemm")}
    assert outputs["onednn"].shape == reference.shape and outputs["onednn"].dtype == torch.float32
    scale = float(reference.abs().max())
    assert float((outputs["onednn"] - outputs["fbgemm"]).abs().max()) < 1e-3 * scale
    assert float((outputs["onednn"] - reference).abs().max()) < 0.02 * scale


@pytest.mark.slow
def test_int8_passes_the_gates_on_random_esm2_8m_shaped_models_of_two_seeds(tmp_path):
    transformers = pytest.importorskip("transformers")
    from transformers.models.esm.configuration_esm import get_default_vocab_list

    vocabulary = tmp_path / "source-vocab.txt"
    vocabulary.write_text("\n".join(get_default_vocab_list()) + "\n")
    for seed in (0, 1):  # seed 1 drifted 0.243 nats with round-to-nearest weights, refused; 0.096 with GPTQ's
        torch.manual_seed(seed)
        config = transformers.EsmConfig(vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20,
                                        intermediate_size=1280, max_position_embeddings=1026,
                                        position_embedding_type="rotary", pad_token_id=1, mask_token_id=32,
                                        token_dropout=True, emb_layer_norm_before=False)
        model = transformers.EsmForMaskedLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
        directory = tmp_path / str(seed)
        model.eval().save_pretrained(directory)
        transformers.EsmTokenizer(str(vocabulary)).save_pretrained(directory)
        chosen = biotf.Model.load(directory, precision="int8").precision
        assert chosen.fidelity.cosine >= COSINE_GATE["int8"] and chosen.fidelity.drift < LIKELIHOOD_GATE, chosen
