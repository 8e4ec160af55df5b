"""Contact prediction benchmark (issue 25): `biotf.model.heads.predict_contacts` against `transformers`'
`EsmForMaskedLM.predict_contacts` on the same checkpoint.

The checkpoint: a random `EsmForMaskedLM` of ESM-2 8M's shape (6 layers x 20 heads x 320, rotary, ESM-2's 33
tokens) with a random contact regression, written by `save_pretrained` into a temporary directory; biotf loads it
with `biotf.Model.load`, transformers with `from_pretrained(attn_implementation="eager")` (attentions need eager).
One random protein each of 100, 300 and 1,000 residues (quick: 100 and 300), batch of one, float32, CPU, one
intra-op thread on both sides: on a shared machine, wall time with several threads measures the other jobs (threads
spin while descheduled), so the CPU time of the process is printed first and the wall time beside it.

Each measurement is a fresh child process (so one side's peak never hides in the other's): it loads the model,
predicts once to warm up, resets the kernel's peak RSS (VmHWM, "5" to /proc/self/clear_refs) and then times
`repeats` predictions, reporting their times and the peak RSS above the RSS before them (the loaded model and
imports excluded). Children alternate biotf / transformers so drift hits both. Targets: biotf >= 1.5x faster and
<= 0.5x the peak memory, which streaming the maps one layer at a time into the regression is for (transformers
keeps every layer's attention maps, layers x heads x L^2 floats, and stacks them).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

LENGTHS = (100, 300, 1000)
RESIDUES = np.array(list("ACDEFGHIKLMNPQRSTVWY"))

CHILD = """
import json, statistics, sys, time
import torch

side, directory, sequence, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

if side == "biotf":
    from biotf import Model
    from biotf.model.heads import predict_contacts

    loaded = Model.load(directory)
    model, tokenizer = loaded.network, loaded.tokenizer
    ids = torch.tensor([tokenizer.encode(sequence)])
    predict = lambda: predict_contacts(model, ids)[0]
else:
    import transformers

    model = transformers.EsmForMaskedLM.from_pretrained(directory, attn_implementation="eager").eval()
    ids = transformers.EsmTokenizer.from_pretrained(directory)(sequence, return_tensors="pt")["input_ids"]
    def predict():
        with torch.no_grad():
            return model.predict_contacts(ids, torch.ones_like(ids))[0]

first = predict()
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")
baseline = status("VmRSS")
seconds, cpu_seconds = [], []
for _ in range(repeats):
    start, cpu_start = time.perf_counter(), time.process_time()
    result = predict()
    seconds.append(time.perf_counter() - start)
    cpu_seconds.append(time.process_time() - cpu_start)
    del result
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_kib": status("VmHWM") - baseline,
                  "shape": list(first.shape), "checksum": float(first.double().sum())}))
"""


def checkpoint(directory: Path) -> Path:
    """A random ESM-2-8M-shaped EsmForMaskedLM with a random contact head, as a hub download looks."""
    import torch
    import transformers
    from transformers.models.esm.configuration_esm import get_default_vocab_list

    torch.manual_seed(0)
    config = transformers.EsmConfig(vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20,
                                    intermediate_size=1280, max_position_embeddings=1026,
                                    position_embedding_type="rotary", token_dropout=True, mask_token_id=32,
                                    pad_token_id=1, emb_layer_norm_before=False)
    model = transformers.EsmForMaskedLM(config).eval()
    with torch.no_grad():
        model.esm.contact_head.regression.weight.normal_(0.0, 1.0)
    model.save_pretrained(directory)
    vocab = directory / "source-vocab.txt"
    vocab.write_text("\n".join(get_default_vocab_list()) + "\n")
    transformers.EsmTokenizer(str(vocab)).save_pretrained(directory)
    vocab.unlink()
    return directory


def measure(side: str, directory: Path, sequence: str, repeats: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, side, str(directory), sequence, str(repeats)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{side} child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(bench, quick: bool) -> None:
    rounds, repeats = (1, 1) if quick else (2, 2)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="biotf-bench-contacts-") as tmp:
        directory = checkpoint(Path(tmp) / "esm2_8m_shape")
        for length in LENGTHS[:2] if quick else LENGTHS:
            sequence = "".join(rng.choice(RESIDUES, length))
            found: dict[str, list[dict]] = {"biotf": [], "transformers": []}
            for turn in range(rounds):
                for side in ("biotf", "transformers") if turn % 2 == 0 else ("transformers", "biotf"):
                    found[side].append(measure(side, directory, sequence, repeats))
            sums = {side: results[0]["checksum"] for side, results in found.items()}
            assert abs(sums["biotf"] - sums["transformers"]) <= 1e-3 * length, sums  # the same maps
            for key, clock in (("cpu_seconds", "CPU time"), ("seconds", "wall time")):
                ours, theirs = ([s for result in found[side] for s in result[key]] for side in found)
                bench.add(f"contacts of one {length}-residue protein, ESM-2 8M shape (6 x 20 x 320), 1 thread, "
                          f"{clock}", "proteins", 1, ours, theirs,
                          anchor_name="transformers EsmForMaskedLM.predict_contacts", target=1.5)
            peaks = {side: statistics.median(r["peak_kib"] for r in results) / 1024 for side, results in found.items()}
            bench.record(f"contacts L={length}: peak RSS above the loaded model, biotf", peaks["biotf"], "MiB")
            bench.record(f"contacts L={length}: peak RSS above the loaded model, transformers", peaks["transformers"],
                         "MiB")
            bench.record(f"contacts L={length}: peak RSS biotf / transformers", peaks["biotf"] / peaks["transformers"],
                         "x", target="<= 0.5")
