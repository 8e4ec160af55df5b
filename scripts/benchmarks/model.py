"""Model section: biotf's Transformer against Hugging Face at the same config, dtype, batch and weights.

- causal training step (forward + backward + AdamW), Qwen2-shaped tiny config, fp32, vs Qwen2ForCausalLM (sdpa),
  with the model FLOPs utilisation of both against this machine's fp32 matmul peak (measured here);
- the same step with bf16-mixed autocast vs HF fp32;
- on a CPU with native bf16: biotf's attention forward + backward on bf16 inputs (float32 where PyTorch's bf16
  kernel is slow backwards) vs torch's bf16 `scaled_dot_product_attention`, at 128 to 1,024 keys;
- masked-LM training step, ESM-shaped tiny config, vs EsmForMaskedLM (sdpa);
- prefill (1 x 512), and greedy decoding with the KV cache (`generate_ids`) vs HF `generate`, whose tokens are
  compared on the initial weights (before the training steps change each side's differently).
Each side uses its own best everyday settings: biotf its fused AdamW and, as its trainer does, the fused head + loss
(`language_model_loss(fused=True)`, no logits) and decoding through `optimize_for_decoding`; HF torch's default
AdamW (foreach) and its logits, which it always returns.
"""

from __future__ import annotations

import copy

import torch

from biotf.inference.fast import optimize_for_decoding
from biotf.inference.generation import generate_ids
from biotf.model import Transformer, TransformerConfig
from biotf.model.loss import language_model_loss

VOCAB = 8192


def qwen_shaped(quick: bool):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=2, rope_theta=1e6, tie_word_embeddings=True,
                       max_position_embeddings=4096)


def matmul_peak_flops(bench, dtype: torch.dtype = torch.float32) -> float:
    """Best observed matmul throughput (FLOP/s) on square matrices: this machine's practical peak."""
    best = 0.0
    if bench.device == "cuda":
        sizes = (4096, 8192)
    else:
        sizes = (1024, 2048) if dtype == torch.float32 and not bench.quick else (512,) if dtype != torch.float32 \
            else (1024,)
    for n in sizes:
        a, b = (torch.randn(n, n, dtype=dtype, device=bench.device) for _ in range(2))
        bench.time(lambda: a @ b, repeats=1)  # warm-up
        for _ in range(3 if bench.quick or dtype != torch.float32 else 6):
            best = max(best, 2 * n ** 3 / bench.time(lambda: a @ b, repeats=1, warmup=0)[0])
    return best


def training_flops(model: Transformer, tokens: int, length: int) -> float:
    """6 x (non-embedding parameters + LM head) per token plus attention scores/values (Kaplan et al.; PaLM app. B)."""
    config = model.config
    dense = model.num_parameters(exclude_embeddings=True) + config.vocab_size * config.d_model * config.tie_embeddings
    return tokens * (6 * dense + 12 * config.n_layers * length * config.d_model)


def train_step(model, optimizer, batch, autocast: bool = False):
    device_type = batch["input_ids"].device.type

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
            if isinstance(model, Transformer):  # as biotf's LanguageModelTask calls it
                loss = language_model_loss(model, batch["input_ids"], batch["labels"], batch.get("attention_mask"),
                                           fused=True).loss
            else:
                loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def greedy_matches_hf(hf, ours: Transformer, start_ids: torch.Tensor, new_tokens: int) -> bool:
    """Whether biotf's greedy decoding (through `optimize_for_decoding`, as `biotf generate` decodes) gives HF
    generate's tokens. Both models are put in eval mode and `ours` is rearranged for decoding in place."""
    hf.eval()
    ours.eval()
    with torch.no_grad():
        expected = hf.generate(start_ids, attention_mask=torch.ones_like(start_ids), max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)[:, start_ids.shape[1]:]
        return generate_ids(optimize_for_decoding(ours), start_ids.tolist(), max_new_tokens=new_tokens) \
            == expected.tolist()


def attention_backward(bench, quick: bool) -> None:
    """biotf's attention (float32 where bf16 backward is slow on the CPU: `attention.UPCAST_KEYS_BY_DIM`) against
    PyTorch's SDPA on the same bf16 queries, keys and values, forward + backward, 4,096 tokens a call (2,048 quick)."""
    import torch.nn.functional as F

    from biotf.model.attention import Attention

    tokens = 2048 if quick else 4096
    for keys, head_dim in ((128, 32), (512, 32), (128, 64), (1024, 64)):
        heads = 256 // head_dim
        attention = Attention(TransformerConfig.preset("tiny", d_model=256, n_heads=heads, n_kv_heads=heads))
        q, k, v = (torch.randn(tokens // keys, heads, keys, head_dim, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        gradient = torch.randn_like(q)

        def ours():
            attention._sdpa(q, k, v, None, True).backward(gradient)

        def sdpa():
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(gradient)

        bench.compare(f"causal attention forward + backward, bf16 ({keys} keys, head_dim {head_dim}, {heads} heads)",
                      ours, sdpa, anchor_name="torch scaled_dot_product_attention bf16", unit="tokens", work=tokens,
                      repeats=7)


def run(bench, quick: bool) -> None:
    import transformers
    from transformers import EsmConfig, EsmForMaskedLM, Qwen2ForCausalLM

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    batch_size, length = (4, 128) if quick else (8, 256)
    device = torch.device(bench.device)
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"{torch.get_num_threads()} threads"

    peak = matmul_peak_flops(bench)
    bench.record("fp32 matmul peak", peak / 1e9, "GFLOP/s", note=where)

    # --- causal LM training step, Qwen2-shaped ---------------------------------------------------------
    hf = Qwen2ForCausalLM._from_config(qwen_shaped(quick), attn_implementation="sdpa").to(device).train()
    ours = Transformer.from_hf(hf).to(device).train()
    # Greedy decoding is compared on identical weights, copies of both models as built: the timed steps below
    # train the two sides differently (fused vs foreach AdamW, and bf16 autocast on biotf's side only), after
    # which near-tied logits may pick other tokens on either side.
    new_tokens = 32 if quick else 128
    start_ids = torch.randint(0, VOCAB, (1, 16), device=device)
    same = greedy_matches_hf(copy.deepcopy(hf), copy.deepcopy(ours), start_ids, new_tokens)
    bench.record("greedy decode tokens identical to HF generate", float(same), "bool",
                 note="on the initial weights, before the timed training steps")
    ids = torch.randint(0, VOCAB, (batch_size, length), device=device)
    batch = {"input_ids": ids, "labels": ids}
    hf_optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-4)
    our_optimizer = torch.optim.AdamW(ours.parameters(), lr=1e-4, fused=True)
    flops = training_flops(ours, batch_size * length, length)
    shape = f"d 256, 4 layers, 8/2 heads, d_ff 704, vocab {VOCAB}, batch {batch_size}x{length}"
    fp32 = bench.compare(f"causal train step fp32 ({shape})", train_step(ours, our_optimizer, batch),
                         train_step(hf, hf_optimizer, batch), anchor_name="transformers Qwen2ForCausalLM fp32",
                         unit="tokens", work=batch_size * length, repeats=7, target=1.15)
    for side, seconds in (("biotf", fp32.biotf_seconds), ("HF", fp32.anchor_seconds)):
        median = sorted(seconds)[len(seconds) // 2]
        bench.record(f"MFU causal train step fp32, {side}", 100 * flops / median / peak, "% of fp32 matmul peak")
    # bf16-mixed: fast on GPUs and where the CPU multiplies bf16 natively (AVX512-BF16 / AMX); elsewhere oneDNN's
    # reference path is tens of times slower than fp32, so the step is timed fewer times and the reason printed.
    if device.type == "cuda":
        native_bf16 = torch.cuda.is_bf16_supported()
    else:
        native_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    bench.record("bf16 matmul peak", matmul_peak_flops(bench, torch.bfloat16) / 1e9, "GFLOP/s",
                 note="native bf16 here" if native_bf16 else "no native bf16 on this CPU (reference path)")
    bench.compare(f"causal train step bf16-mixed vs HF fp32 ({shape})",
                  train_step(ours, our_optimizer, batch, autocast=True), train_step(hf, hf_optimizer, batch),
                  anchor_name="transformers Qwen2ForCausalLM fp32", unit="tokens", work=batch_size * length,
                  repeats=7 if native_bf16 else 1, warmup=2 if native_bf16 else 0, target=1.3)
    del hf_optimizer, our_optimizer
    if device.type == "cpu" and native_bf16:
        attention_backward(bench, quick)

    # --- inference: prefill 1 x 512 and greedy decoding with the KV cache -----------------------------
    hf.eval()
    ours.eval()
    prompt = torch.randint(0, VOCAB, (1, 512), device=device)

    @torch.no_grad()
    def our_prefill():
        return ours(prompt, use_cache=True).logits

    @torch.no_grad()
    def hf_prefill():
        return hf(prompt, use_cache=True).logits

    bench.compare("prefill 1x512 (Qwen2-shaped)", our_prefill, hf_prefill, anchor_name="transformers Qwen2ForCausalLM",
                  unit="tokens", work=512, repeats=9, target=1.0)

    decoder = optimize_for_decoding(ours)  # as `biotf generate` does

    def our_decode():
        return generate_ids(decoder, start_ids.tolist(), max_new_tokens=new_tokens)

    @torch.no_grad()
    def hf_decode():
        return hf.generate(start_ids, attention_mask=torch.ones_like(start_ids), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)

    bench.compare(f"greedy decode with KV cache (16-token prompt, {new_tokens} new tokens)", our_decode, hf_decode,
                  anchor_name="transformers generate", unit="tokens", work=new_tokens, repeats=5, target=1.5)
    del hf, ours, decoder

    # --- masked-LM training step, ESM-shaped -----------------------------------------------------------
    # ESM-2's shape (RoPE, LayerNorm, Pre-LN, GELU, biases, d_ff = 4 d, 33 tokens, token dropout, MLM head
    # transform and logit bias) at d 320, 6 layers (esm2_t6_8M): the esm2-8m preset on both sides.
    esm_config = EsmConfig(vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20,
                           intermediate_size=1280, position_embedding_type="rotary", max_position_embeddings=1026,
                           token_dropout=True, emb_layer_norm_before=False, pad_token_id=1, mask_token_id=32,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    hf_esm = EsmForMaskedLM._from_config(esm_config, attn_implementation="sdpa").to(device).train()
    ours_esm = Transformer(TransformerConfig.preset("esm2-8m")).to(device).train()
    ids = torch.randint(4, 24, (batch_size, length), device=device)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, device=device) < 0.15
    labels[chosen] = ids[chosen]
    masked = ids.masked_fill(chosen, 32)
    mask = torch.ones_like(ids)
    batch = {"input_ids": masked, "attention_mask": mask, "labels": labels}
    bench.compare(f"masked-LM train step fp32 (esm2-8m shape, batch {batch_size}x{length})",
                  train_step(ours_esm, torch.optim.AdamW(ours_esm.parameters(), lr=1e-4, fused=True), batch),
                  train_step(hf_esm, torch.optim.AdamW(hf_esm.parameters(), lr=1e-4), batch),
                  anchor_name="transformers EsmForMaskedLM fp32", unit="tokens", work=batch_size * length,
                  repeats=7, target=1.1)
