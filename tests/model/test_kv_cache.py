"""KV cache: incremental decoding gives the logits and greedy tokens of full recomputation."""

from __future__ import annotations

import pytest
import torch

from biotf.model import KVCache, Transformer, TransformerConfig
from biotf.model.attention import Attention

TOLERANCE = 1e-5


def greedy_with_cache(model, ids, steps, mask=None, chunks=1):
    """Prefill (optionally in `chunks` pieces), then decode `steps` tokens one at a time; logits of every step."""
    cache = KVCache(model.config.n_layers, initial_capacity=4)  # small: decoding must grow the buffers
    pieces = ids.tensor_split(chunks, dim=1)
    seen = 0
    for piece in pieces:
        seen += piece.shape[1]
        out = model(piece, attention_mask=None if mask is None else mask[:, :seen], past_key_values=cache,
                    use_cache=True)
    assert out.past_key_values is cache and cache.seq_len == ids.shape[1]
    step_logits = [out.logits[:, -1]]
    tokens = []
    for _ in range(steps):
        token = step_logits[-1].argmax(-1, keepdim=True)
        tokens.append(token)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        out = model(token, attention_mask=mask, past_key_values=cache, use_cache=True)
        step_logits.append(out.logits[:, -1])
    return torch.cat(tokens, dim=1), step_logits


def greedy_recompute(model, ids, steps, mask=None):
    step_logits, tokens = [], []
    for _ in range(steps + 1):
        logits = model(ids, attention_mask=mask).logits[:, -1]
        step_logits.append(logits)
        token = logits.argmax(-1, keepdim=True)
        tokens.append(token)
        ids = torch.cat([ids, token], dim=1)
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
    return torch.cat(tokens[:-1], dim=1), step_logits


def check(model, ids, mask=None, steps=12, chunks=1):
    with torch.no_grad():
        cached_tokens, cached_logits = greedy_with_cache(model, ids, steps, mask, chunks)
        full_tokens, full_logits = greedy_recompute(model, ids, steps, mask)
    assert torch.equal(cached_tokens, full_tokens)
    for cached, full in zip(cached_logits, full_logits):
        assert (cached - full).abs().max().item() <= TOLERANCE


def model_for(**changes):
    torch.manual_seed(0)
    # std 0.2: peaked distributions, so greedy tokens are decided by margins well above float noise
    return Transformer(TransformerConfig.preset("tiny", init_std=0.2, **changes)).eval()


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "sinusoidal", "none"])
def test_cached_decoding_equals_full_recompute(pos):
    model = model_for(pos=pos)
    check(model, torch.randint(0, 64, (2, 9)))


def test_left_padded_batch_decodes_like_full_recompute():
    model = model_for()
    ids = torch.randint(0, 64, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[2, :1] = 0
    check(model, ids, mask)


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_chunked_prefill_with_padding(pos):
    model = model_for(pos=pos, n_kv_heads=1)  # multi-query attention
    ids = torch.randint(0, 64, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    check(model, ids, mask, chunks=3)


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_sliding_window_decodes_like_full_recompute(pos, chunks):
    """A window of 4 positions, exceeded by the 10-token prompt and by every step: the cache keeps every position and
    the mask hides those outside the window, in prefill (whole or chunked) and in decoding alike."""
    model = model_for(pos=pos, sliding_window=4)
    ids = torch.randint(0, 64, (3, 10))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    check(model, ids, mask, chunks=chunks)
    check(model, ids[1:], chunks=chunks)
    with torch.no_grad():  # the window changes the outputs (so the check above is not the unwindowed model's)
        unwindowed = model.state_dict()
        plain = Transformer(model.config.replace(sliding_window=None)).eval()
        plain.load_state_dict(unwindowed)
        assert (plain(ids[1:]).logits[:, 4:] - model(ids[1:]).logits[:, 4:]).abs().max() > 1e-3
        torch.testing.assert_close(plain(ids[1:]).logits[:, :4], model(ids[1:]).logits[:, :4], rtol=0, atol=1e-6)


@pytest.mark.parametrize("pos, window", [("alibi", None), ("rope", 4), ("learned", None)])
def test_attention_in_chunks_decodes_like_full_recompute(pos, window, monkeypatch):
    """A budget of 2 query rows per chunk of the 10-token prompt: the prefill (whole or in pieces after a cache) and
    the recomputation run in chunks of queries; the tokens and logits are still those of full recomputation."""
    model = model_for(pos=pos, sliding_window=window)
    ids = torch.randint(0, 64, (3, 10))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    model.attention_element_budget = 2 * 3 * model.config.n_heads * 10
    chunks_run = []
    rows = Attention._rows
    monkeypatch.setattr(Attention, "_rows", lambda self, *args: chunks_run.append(1) or rows(self, *args))
    for chunks in (1, 3):
        check(model, ids, mask, chunks=chunks)
    assert len(chunks_run) > 100
    check(model, ids[1:], chunks=3)


def test_post_ln_model_with_biases_decodes_like_full_recompute():
    model = model_for(norm="layernorm", norm_position="post", mlp="gelu", bias=True)
    check(model, torch.randint(0, 64, (2, 7)))


def test_greedy_tokens_match_hf_generate():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                                      tie_word_embeddings=True, initializer_range=0.2)
    hf = transformers.Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    model = Transformer.from_hf(hf)
    ids = torch.randint(0, 97, (2, 6))
    with torch.no_grad():
        ours, _ = greedy_with_cache(model, ids, 10)
        theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[:, 6:]
    assert torch.equal(ours, theirs)
