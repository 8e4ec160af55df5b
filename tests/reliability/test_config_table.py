"""Every invalid config value and combination fails at startup, before data is read, naming the key
and the allowed values: one row per case, run through `biotf train` exactly as a user types it.

"Before data is read" is shown by the data file itself: it is binary garbage, so reading it would
fail with a different message; and no run directory may appear.
"""

from __future__ import annotations

import pytest

from biotf.cli import main

# (overrides, the key the one error line must name, a fragment of the allowed values it must list)
TABLE = [
    # trainer
    (["trainer.precision=16"], "trainer.precision", "32 | 32-true | bf16-mixed"),
    (["trainer.strategy=deepspeed"], "trainer.strategy", "auto | ddp | fsdp"),
    (["trainer.accelerator=tpu"], "trainer.accelerator", "auto | cpu | gpu"),
    (["trainer.logger=wandb"], "trainer.logger", "csv | tensorboard"),
    (["trainer.progress=dots"], "trainer.progress", "auto | bar | lines"),
    (["trainer.max_steps=0"], "trainer.max_steps", "an integer >= 1"),
    (["trainer.val_check_interval=-5"], "trainer.val_check_interval", "an integer >= 1"),
    (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches", "an integer >= 1"),
    (["trainer.checkpoint_every_n_steps=0"], "trainer.checkpoint_every_n_steps", "an integer >= 1"),
    (["trainer.limit_val_batches=1.5"], "trainer.limit_val_batches", "a fraction in (0.0, 1.0]"),
    (["trainer.limit_val_batches=0"], "trainer.limit_val_batches", "a fraction in (0.0, 1.0]"),
    (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val", ">= 0"),
    (["trainer.devices=0"], "trainer.devices", "an integer >= 1"),
    (["trainer.max_steps=ten"], "trainer.max_steps", "Integer"),
    (["+trainer.max_step=10"], "trainer.max_step", "max_steps"),
    # data
    (["data.validation_fraction=0"], "data.validation_fraction", "0 < fraction < 1"),
    (["data.validation_fraction=1.0"], "data.validation_fraction", "0 < fraction < 1"),
    (["data.mask_probability=0"], "data.mask_probability", "0 < probability < 1"),
    (["data.long_policy=wrap"], "data.long_policy", "crop"),
    (["data.batch_size=0"], "data.batch_size", ">= 1"),
    (["data.max_length=1"], "data.max_length", ">= 2"),
    (["data.num_workers=-1"], "data.num_workers", ">= 0"),
    (["data.max_length=512", "model.max_seq_len=256"], "data.max_length", "<= model.max_seq_len=256"),
    (["data.path=/nonexistent/proteins.fasta"], "data.path", "does not exist"),
    (["+data.shuffle=false"], "data.shuffle", "batch_size"),
    # optim
    (["optim.lr=0"], "optim.lr", "a number > 0"),
    (["optim.lr=-1e-3"], "optim.lr", "a number > 0"),
    (["optim.betas=[0.9]"], "optim.betas", "two numbers in [0, 1)"),
    (["optim.betas=[0.9,1.0]"], "optim.betas", "two numbers in [0, 1)"),
    (["optim.weight_decay=-0.1"], "optim.weight_decay", ">= 0"),
    (["optim.warmup_steps=-1"], "optim.warmup_steps", ">= 0"),
    (["optim.min_lr_ratio=2"], "optim.min_lr_ratio", "0 <= ratio <= 1"),
    # model
    (["model.pos=xpos"], "model.pos", "learned | sinusoidal | rope | alibi | t5 | none"),
    (["model.norm=batchnorm"], "model.norm", "layernorm | rmsnorm"),
    (["model.norm_position=sandwich"], "model.norm_position", "pre | post"),
    (["model.mlp=mish"], "model.mlp", "gelu | gelu_tanh | relu | swiglu | geglu | geglu_tanh | reglu"),
    (["model.d_model=100", "model.n_heads=3"], "model.d_model", "a multiple of n_heads=3"),
    (["model.n_kv_heads=3"], "model.n_kv_heads", "a divisor of n_heads"),
    (["model.dropout=1.0"], "model.dropout", "0 <= dropout < 1"),
    (["model.n_layers=0"], "model.n_layers", "an integer >= 1"),
    (["model.max_seq_len=0"], "model.max_seq_len", "an integer >= 1"),
    (["model.rope_theta=0"], "model.rope_theta", "a number > 0"),
    (["model.pos=learned", "model.max_seq_len=null"], "model.max_seq_len", "an integer >= 1"),
    (["+model._target_=pathlib.Path.touch"], "model._target_", "d_model"),
    (["model=gpt5"], "model", "tiny"),
    # tokenizer
    (["tokenizer.kind=rna"], "tokenizer.kind", "protein"),
    (["tokenizer.unknown=skip"], "tokenizer.unknown", "error | to_unk"),
    (["tokenizer.lowercase=keep"], "tokenizer.lowercase", "fold | error"),
    (["tokenizer.rare_residues=drop"], "tokenizer.rare_residues", "keep | to_x | error"),
    (["+tokenizer.k=3"], "tokenizer.k", "lowercase, rare_residues, unknown"),
    (["tokenizer=dna", "tokenizer.k=13"], "tokenizer.k", "an integer from 1 to 12"),
    (["tokenizer=dna", "tokenizer.stride=7"], "tokenizer.stride", "from 1 to k=6"),
    (["tokenizer=dna", "tokenizer.uracil=keep"], "tokenizer.uracil", "error | to_t"),
    (["tokenizer=dna", "tokenizer.iupac=keep"], "tokenizer.iupac", "to_n | error"),
    (["tokenizer=smiles", "tokenizer.whitespace=keep"], "tokenizer.whitespace", "error | strip"),
    (["tokenizer=bpe", "+tokenizer.dropout=0.1"], "tokenizer.dropout", "path, vocab_size"),
    # groups, top level, resume
    (["experiment=protein_clm"], "experiment", "protein_mlm"),
    (["ckpt_path=/nonexistent/last.ckpt"], "ckpt_path", "an existing checkpoint file"),
    (["+_target_=os.system"], "_target_", "experiment, seed"),
    (["seed=abc"], "seed", "Integer"),
]


@pytest.mark.parametrize("overrides, key, allowed", TABLE, ids=[" ".join(row[0]) for row in TABLE])
def test_invalid_config_fails_at_startup(capsys, tmp_path, overrides, key, allowed):
    garbage = tmp_path / "garbage.fasta"
    garbage.write_bytes(bytes(range(256)) * 4)  # reading it would fail with "not UTF-8 text"
    data_path = [] if any(o.startswith("data.path=") for o in overrides) else [f"data.path={garbage}"]
    status = main(["train", "model=tiny", "data.max_length=64", "model.max_seq_len=64", *data_path, *overrides,
                   f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert key in lines[0] and allowed in lines[0], lines[0]
    assert "UTF-8" not in lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_a_sweep_is_checked_value_by_value_before_any_job_runs(capsys, tmp_path):
    """In `-m` sweeps the one bad value fails the command at startup, before the good ones train."""
    garbage = tmp_path / "garbage.fasta"
    garbage.write_bytes(bytes(range(256)) * 4)
    status = main(["train", "-m", "model=tiny", "model.pos=rope,xpos,alibi", f"data.path={garbage}",
                   f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    err = capsys.readouterr().err
    assert status == 2 and "model.pos" in err and "xpos" in err and not (tmp_path / "sweep").exists()
