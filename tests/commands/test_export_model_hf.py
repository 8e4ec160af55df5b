"""`biotf export-model SOURCE DIR --hf [MODEL_TYPE]`: a Hugging Face directory `transformers` loads as it is."""

from __future__ import annotations

import pytest
import torch

from biotf.cli import main

transformers = pytest.importorskip("transformers")

# A tiny random model of two causal families, sized for the tokenizer written beside it.
FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                      num_attention_heads=4, num_key_value_heads=2,
                                                      max_position_embeddings=128)),
}


def hf_directory(kind: str, directory, texts):
    from hf_tokenizer_dirs import write_tokenizer

    write_tokenizer(kind, directory, texts)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    config_class, model_class, settings = FAMILIES[kind]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(vocab_size=len(tokenizer), initializer_range=0.5,
                                                 bos_token_id=tokenizer.bos_token_id,
                                                 eos_token_id=tokenizer.eos_token_id, **settings)
    model = getattr(transformers, model_class)._from_config(config).eval()
    model.save_pretrained(directory)
    return model, tokenizer


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_export_model_hf_writes_what_transformers_loads_with_the_same_logits_and_ids(kind, tmp_path, shared_data,
                                                                                       capsys):
    paragraphs = (shared_data / "text/tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")
    texts, sample = paragraphs[:200], " ".join(paragraphs[-20:])  # the sample is text the tokenizer never saw
    source = tmp_path / "source"
    source.mkdir()
    original, original_tokenizer = hf_directory(kind, source, texts)
    out = tmp_path / "exported"
    assert main(["export-model", str(source), str(out), "--hf", kind]) == 0, capsys.readouterr().err
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    exported_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(exported).__name__ == FAMILIES[kind][1]
    ids = original_tokenizer(sample, return_tensors="pt")["input_ids"][:, :120]
    assert exported_tokenizer(sample, return_tensors="pt")["input_ids"][:, :120].tolist() == ids.tolist()
    with torch.no_grad():
        assert (exported(ids).logits - original(ids).logits).abs().max() <= 1e-5


def test_export_model_hf_refuses_a_family_that_cannot_hold_the_model_and_writes_nothing(tmp_path, shared_data,
                                                                                         capsys):
    texts = (shared_data / "text/tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")[:200]
    source = tmp_path / "source"
    source.mkdir()
    hf_directory("gpt2", source, texts)
    capsys.readouterr()  # transformers' own progress lines while the test wrote the source
    out = tmp_path / "exported"
    assert main(["export-model", str(source), str(out), "--hf", "llama"]) == 2
    err = capsys.readouterr().err
    assert "cannot write a Llama checkpoint: config pos='learned'" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert main(["export-model", str(source), str(out), "--hf", "gpt-neo"]) == 2
    assert "--hf" in capsys.readouterr().err and not out.exists()
