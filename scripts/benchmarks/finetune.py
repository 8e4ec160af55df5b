"""Fine-tuning section: LoRA and gradient checkpointing against full fine-tuning at the same shape.

A sequence classifier (`biotf.model.heads.TaskModel`, mean pool, 10 classes) on an ESM-2 8M-shaped trunk
(6 layers, d 320, 20 heads, GELU, LayerNorm, rotary), one training step = forward + backward + AdamW:
- full fine-tuning (every weight trains) vs LoRA (rank 8 on qkv and out; the trunk frozen): time per step;
- full fine-tuning with and without gradient checkpointing: time per step;
- frozen: a step of the head on the trunk's cached features (`biotf.finetune.features`) vs a step that runs the
  frozen trunk (finetune.cache_features=false), and the one-off pass that computes the features;
- the memory a step holds, counted from the tensors themselves so that it means the same on any device:
  weights + gradients + AdamW state (two moments per trainable weight) + the activations autograd saves for
  backward (`torch.autograd.graph.saved_tensors_hooks`, each storage counted once). With checkpointing the
  blocks save only their inputs; in backward each block's activations exist again while it is recomputed, one
  block at a time: the largest block's share of the plain run is added as "recompute". On CUDA the allocator's
  peak (`torch.cuda.max_memory_allocated`) is recorded too.
"""

from __future__ import annotations

import statistics

import torch

from biotf.finetune.features import compute_features
from biotf.model.modes import Frozen
from biotf.model import Transformer, TransformerConfig
from biotf.model.lora import LoRAConfig, apply_lora
from biotf.model.heads import TaskModel
from biotf.tokenizers import AminoAcidTokenizer

MiB = 2**20


def build(mode: str, device: torch.device, checkpointing: bool = False) -> TaskModel:
    torch.manual_seed(0)
    trunk = Transformer(TransformerConfig.preset("esm2-8m", lm_head=False, lm_head_transform=False,
                                                 lm_head_bias=False, token_dropout=False, mask_token_id=None))
    trunk.gradient_checkpointing = checkpointing
    model = TaskModel(trunk, "classification", 10).to(device).train()
    if mode == "lora":
        apply_lora(model.trunk, ["qkv", "out"], rank=8, alpha=16)
    return model


def batch(size: int, length: int, device: torch.device) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 24, (size, length), generator=generator)
    ids[:, 0], ids[:, -1] = 0, 2  # <cls> ... <eos>
    mask = torch.ones_like(ids)
    content = mask.clone()
    content[:, [0, -1]] = 0
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "content_mask": content.to(device),
            "labels": torch.randint(0, 10, (size,), generator=generator).to(device)}


def step_fn(model: TaskModel, data: dict[str, torch.Tensor], features: torch.Tensor | None = None):
    """One optimizer step: of the whole model, or of its head alone on `features` (cached trunk outputs)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step():
        out = model(**data) if features is None else model.from_features(features, data["labels"])
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def saved_activations(model: TaskModel, data: dict[str, torch.Tensor]) -> tuple[float, float]:
    """MiB autograd saves for backward in one forward: in all, and in the block that saves most."""
    storages: dict[int, tuple[int, int]] = {}  # storage -> (bytes, block index or -1)
    weights = {p.data_ptr() for p in model.parameters()}
    current = [-1]
    hooks = []
    for index, block in enumerate(model.trunk.blocks):
        hooks.append(block.register_forward_pre_hook(lambda module, args, index=index: current.__setitem__(0, index)))
        hooks.append(block.register_forward_hook(lambda *args: current.__setitem__(0, -1)))

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:  # weights are counted as weights
            storages.setdefault(storage.data_ptr(), (storage.nbytes(), current[0]))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(**data).loss.backward()
    for hook in hooks:
        hook.remove()
    model.zero_grad(set_to_none=True)
    per_block: dict[int, int] = {}
    for size, block in storages.values():
        per_block[block] = per_block.get(block, 0) + size
    return sum(per_block.values()) / MiB, max((v for k, v in per_block.items() if k >= 0), default=0) / MiB


def step_bytes(model: TaskModel, data: dict[str, torch.Tensor], recompute: float = 0.0) -> dict[str, float]:
    """MiB of weights, gradients, AdamW state and saved activations of one training step (+ `recompute`)."""
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    parts = {"weights": weights / MiB, "gradients": trainable / MiB, "adamw": 2 * trainable / MiB,
             "activations": saved_activations(model, data)[0]}
    return {**parts, "recompute": recompute} if recompute else parts


def run(bench, quick: bool) -> None:
    device = torch.device(bench.device)
    size, length = (4, 128) if quick else (8, 512)
    data = batch(size, length, device)
    tokens = size * length
    full, lora, checkpointed = build("full", device), build("lora", device), build("full", device, True)

    bench.compare(f"training step, LoRA r8 qkv+out vs full fine-tuning (ESM-2 8M shape, {size} x {length})",
                  step_fn(lora, data), step_fn(full, data), anchor_name="full fine-tuning", unit="tokens",
                  work=tokens)
    bench.compare(f"training step, gradient checkpointing vs none (full fine-tuning, {size} x {length})",
                  step_fn(checkpointed, data), step_fn(full, data), anchor_name="no checkpointing", unit="tokens",
                  work=tokens)
    frozen = build("full", device)
    Frozen(LoRAConfig()).prepare(frozen.trunk)
    frozen.trunk.eval()  # as the frozen mode runs it
    tokenizer = AminoAcidTokenizer()
    records = [row[row != tokenizer.pad_id].cpu().numpy() for row in data["input_ids"]]
    features = None

    def compute() -> None:
        nonlocal features
        features = compute_features(frozen, tokenizer, records)
    once = statistics.median(bench.time(compute))
    bench.record(f"frozen: computing the trunk features once ({size} x {length})", once * 1e3, "ms")
    cached = torch.from_numpy(features.values).to(device)
    bench.compare(f"frozen training step, head on cached features vs running the frozen trunk ({size} x {length})",
                  step_fn(frozen, data, cached), step_fn(frozen, data), anchor_name="trunk every step",
                  unit="records", work=size)
    largest_block = saved_activations(full, data)[1]
    for name, model in (("full", full), ("lora", lora), ("full + checkpointing", checkpointed)):
        parts = step_bytes(model, data, largest_block if model is checkpointed else 0.0)
        total = sum(parts.values())
        detail = ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
        bench.record(f"step memory, {name}", total, "MiB", note=f"({detail} MiB)")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            step_fn(model, data)()
            torch.cuda.synchronize()
            bench.record(f"CUDA peak allocated, {name}", torch.cuda.max_memory_allocated() / MiB, "MiB")
