"""`TransformerConfig`: one flat dataclass of plain values that describes every biotf transformer.

Every field is a str, int, float, bool or None, so `dataclasses.asdict(config)` is YAML- and
JSON-clean and `conf/model/<preset>.yaml` mirrors it key for key. The config is validated at
construction: a bad value or an incompatible combination raises `biotf.errors.ConfigError`
naming the field and the allowed values.

Presets (`PRESETS`, `TransformerConfig.preset(name)`) cite where their numbers come from and are
mirrored one to one by `conf/model/<name>.yaml` (a test checks that they agree). The `vocab_size`
of the biological presets (and `mask_token_id` where token dropout uses it) is a placeholder:
training replaces it with the tokenizer's at build time (`config.for_tokenizer(...)`).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from biotf.errors import ConfigError

POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")
NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
MLPS = ("gelu", "relu", "swiglu")


@dataclass
class TransformerConfig:
    """The architecture of one transformer; see the module docstring and `biotf/model/transformer.py`.

    Fields
    ------
    vocab_size      rows of the token embedding (and columns of the LM head).
    d_model         width of the residual stream.
    n_layers        number of blocks.
    n_heads         query heads; head size is d_model // n_heads.
    n_kv_heads      key/value heads: n_heads = multi-head, 1 = multi-query (Shazeer 2019), in between =
                    grouped-query (Ainslie et al. 2023). None means n_heads.
    d_ff            hidden width of the MLP (for swiglu: of each of the gate and up projections).
    max_seq_len     longest sequence; required by `pos: learned` (table size), informative otherwise.
    dropout         dropout on embeddings, attention probabilities and both residual branches.
    pos             learned | sinusoidal | rope | alibi | none (see `positions.py`).
    rope_theta      RoPE base (10,000 in Su et al.; 1,000,000 in Qwen2.5).
    norm            layernorm | rmsnorm; norm_eps is its epsilon.
    norm_position   pre (normalise each branch's input, plus a final norm; GPT-2, Qwen, ESM-2) |
                    post (normalise after each residual add, no final norm; Vaswani et al. 2017).
    mlp             gelu | relu (two projections) | swiglu (gate, up, down; Shazeer 2020).
    qkv_bias        bias on the query/key/value projections (Qwen2: yes).
    bias            bias on every other linear layer (attention output, MLP) and on LayerNorm.
    tie_embeddings  the LM head reuses the token embedding matrix.
    causal          true: decoder, each position sees only itself and earlier ones, loss is next-token
                    prediction; false: bidirectional encoder, loss is masked-LM on the labelled positions.
    scale_embeddings multiply token embeddings by sqrt(d_model) (Vaswani et al. 2017, section 3.4).
    token_dropout   ESM's masked-token dropout (HF EsmEmbeddings, `token_dropout`): embeddings of `mask_token_id`
                    are zeroed and each sequence's embeddings scaled by (1 - 0.15 * 0.8) / (1 - its share of
                    mask tokens among its real tokens), in training and inference alike (masked LM only).
    mask_token_id   the id of the mask token; required by token_dropout.
    embed_norm      normalise the embeddings (after positions are added) before the first block (ESM-1b's
                    `emb_layer_norm_before`, BERT's embedding LayerNorm).
    lm_head         the model has a language-model head; false for an encoder whose checkpoint has none (HF
                    `EsmModel`, `EsmForSequenceClassification`): hidden states and embeddings only, logits refused.
    lm_head_transform dense (d_model -> d_model) -> GELU -> norm before the output projection (the masked-LM
                    head of BERT, RoBERTa and ESM: HF `EsmLMHead`).
    lm_head_bias    a bias vector added to the logits (HF `EsmLMHead.bias`, kept apart from a tied decoder).
    init_std        standard deviation of the normal initialisation of linear and embedding weights.
    """

    vocab_size: int = 32
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int = 512
    max_seq_len: int | None = 1024
    dropout: float = 0.0
    pos: str = "rope"
    rope_theta: float = 10000.0
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    norm_position: str = "pre"
    mlp: str = "swiglu"
    qkv_bias: bool = False
    bias: bool = False
    tie_embeddings: bool = True
    causal: bool = True
    scale_embeddings: bool = False
    token_dropout: bool = False
    mask_token_id: int | None = None
    embed_norm: bool = False
    lm_head: bool = True
    lm_head_transform: bool = False
    lm_head_bias: bool = False
    init_std: float = 0.02

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "pos": POSITIONS, "norm": NORMS, "norm_position": NORM_POSITIONS, "mlp": MLPS,
    }

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        self._validate()

    # --- validation --------------------------------------------------------------------------
    def _validate(self) -> None:
        ints = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "an integer >= 1")
        if self.max_seq_len is not None and (isinstance(self.max_seq_len, bool) or not isinstance(self.max_seq_len, int)
                                             or self.max_seq_len < 1):
            raise ConfigError("max_seq_len", self.max_seq_len, "an integer >= 1, or null")
        for name, allowed in self.CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(name, getattr(self, name), " | ".join(allowed))
        for name in ("qkv_bias", "bias", "tie_embeddings", "causal", "scale_embeddings", "token_dropout", "embed_norm",
                     "lm_head", "lm_head_transform", "lm_head_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "true | false")
        for name in ("dropout", "rope_theta", "norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(name, value, "a number")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", self.dropout, "0 <= dropout < 1")
        if self.rope_theta <= 0:
            raise ConfigError("rope_theta", self.rope_theta, "a number > 0")
        if self.norm_eps <= 0:
            raise ConfigError("norm_eps", self.norm_eps, "a number > 0")
        if self.init_std <= 0:
            raise ConfigError("init_std", self.init_std, "a number > 0")
        if self.d_model % self.n_heads:
            raise ConfigError("d_model", self.d_model, f"a multiple of n_heads={self.n_heads}",
                              reason=f"d_model must split evenly into n_heads={self.n_heads} heads")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}",
                              reason="each key/value head serves a whole group of query heads")
        if self.pos == "rope" and self.head_dim % 2:
            raise ConfigError("pos", self.pos, " | ".join(p for p in POSITIONS if p != "rope"),
                              reason=f"RoPE rotates pairs of dimensions but the head size d_model/n_heads="
                                     f"{self.head_dim} is odd")
        if self.pos == "sinusoidal" and self.d_model % 2:
            raise ConfigError("d_model", self.d_model, "an even number",
                              reason="sinusoidal positions pair a sine and a cosine per frequency")
        if self.mask_token_id is not None and (isinstance(self.mask_token_id, bool) or not isinstance(
                self.mask_token_id, int) or not 0 <= self.mask_token_id < self.vocab_size):
            raise ConfigError("mask_token_id", self.mask_token_id, f"an id in 0..{self.vocab_size - 1}, or null")
        if self.token_dropout and self.mask_token_id is None:
            raise ConfigError("mask_token_id", None, f"an id in 0..{self.vocab_size - 1}",
                              reason="token_dropout zeroes the embeddings of the mask token, so it needs its id")
        if self.token_dropout and self.causal:
            raise ConfigError("token_dropout", True, "false", reason="token dropout rescales masked-LM inputs; "
                                                                     "a causal model has no mask tokens")
        for name in ("lm_head_transform", "lm_head_bias"):
            if getattr(self, name) and not self.lm_head:
                raise ConfigError(name, True, "false", reason="it is part of the LM head, and lm_head is false")
        if self.pos == "learned" and self.max_seq_len is None:
            raise ConfigError("max_seq_len", None, "an integer >= 1",
                              reason="pos=learned needs max_seq_len rows in its position table")

    # --- derived -----------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    # --- (de)serialisation -------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Build from a plain mapping (a YAML file, a checkpoint's config); unknown keys are refused."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise ConfigError(unknown[0] if len(unknown) == 1 else ", ".join(unknown), values[unknown[0]],
                              allowed=", ".join(cls.field_names()), reason="unknown model config key")
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def for_tokenizer(self, vocab_size: int, mask_id: int | None) -> TransformerConfig:
        """A copy sized for a tokenizer: its vocabulary size and, where token dropout needs it, its mask id (both
        are placeholders in the presets; a token dropout aimed at another token's id would zero the wrong rows)."""
        return self.replace(vocab_size=vocab_size, mask_token_id=mask_id if self.token_dropout else self.mask_token_id)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named preset from `PRESETS` (mirrored by conf/model/<name>.yaml), with optional overrides."""
        if name not in PRESETS:
            raise ConfigError("model", name, " | ".join(sorted(PRESETS)), reason="unknown model preset")
        return cls.from_dict({**copy.deepcopy(PRESETS[name]), **overrides})


# Named presets. Each is mirrored one to one by conf/model/<name>.yaml (tests/model/test_presets.py).
# For bio presets `vocab_size` is a placeholder that training overrides with the tokenizer's size.
PRESETS: dict[str, dict[str, Any]] = {
    # Qwen2.5-0.5B, from its Hugging Face config.json (Qwen/Qwen2.5-0.5B): hidden_size 896, 24 layers,
    # 14 heads, 2 KV heads, intermediate 4,864, rms_norm_eps 1e-6, rope_theta 1e6, tied embeddings;
    # Qwen2 puts biases on q/k/v only. 494,032,768 parameters.
    "qwen2.5-0.5b": dict(vocab_size=151936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2, d_ff=4864,
                         max_seq_len=32768, dropout=0.0, pos="rope", rope_theta=1000000.0, norm="rmsnorm",
                         norm_eps=1e-6, norm_position="pre", mlp="swiglu", qkv_bias=True, bias=False,
                         tie_embeddings=True, causal=True, scale_embeddings=False,
                         token_dropout=False, mask_token_id=None, embed_norm=False, lm_head=True, lm_head_transform=False,
                         lm_head_bias=False, init_std=0.02),
    # ESM-2 8M (Lin et al. 2023; facebook/esm2_t6_8M_UR50D config.json): 6 layers, d 320, 20 heads,
    # d_ff 1,280, rotary positions, LayerNorm eps 1e-5 with biases, Pre-LN, GELU, 1,026 positions,
    # 33-token vocabulary, tied embeddings, bidirectional masked LM; token dropout with <mask> = 32, and the
    # masked-LM head dense -> GELU -> LayerNorm -> tied decoder + bias (HF EsmLMHead).
    "esm2-8m": dict(vocab_size=33, d_model=320, n_layers=6, n_heads=20, n_kv_heads=20, d_ff=1280,
                    max_seq_len=1026, dropout=0.0, pos="rope", rope_theta=10000.0, norm="layernorm",
                    norm_eps=1e-5, norm_position="pre", mlp="gelu", qkv_bias=True, bias=True,
                    tie_embeddings=True, causal=False, scale_embeddings=False, token_dropout=True,
                    mask_token_id=32, embed_norm=False, lm_head=True, lm_head_transform=True, lm_head_bias=True, init_std=0.02),
    # GPT-2 small (Radford et al. 2019; openai-community/gpt2 config.json): 12 layers, d 768, 12 heads,
    # d_ff 3,072, 1,024 learned positions, LayerNorm eps 1e-5 with biases everywhere, Pre-LN, GELU, tied.
    "gpt2-small": dict(vocab_size=50257, d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, d_ff=3072,
                       max_seq_len=1024, dropout=0.1, pos="learned", rope_theta=10000.0, norm="layernorm",
                       norm_eps=1e-5, norm_position="pre", mlp="gelu", qkv_bias=True, bias=True,
                       tie_embeddings=True, causal=True, scale_embeddings=False,
                       token_dropout=False, mask_token_id=None, embed_norm=False, lm_head=True, lm_head_transform=False,
                       lm_head_bias=False, init_std=0.02),
    # Transformer base (Vaswani et al. 2017, table 3) as a decoder-only LM: 6 layers, d 512, 8 heads,
    # d_ff 2,048, sinusoidal positions, Post-LN, ReLU, dropout 0.1, embeddings scaled by sqrt(d_model),
    # shared embedding/softmax weights, 37,000-token shared BPE vocabulary.
    "vaswani": dict(vocab_size=37000, d_model=512, n_layers=6, n_heads=8, n_kv_heads=8, d_ff=2048,
                    max_seq_len=512, dropout=0.1, pos="sinusoidal", rope_theta=10000.0, norm="layernorm",
                    norm_eps=1e-6, norm_position="post", mlp="relu", qkv_bias=True, bias=True,
                    tie_embeddings=True, causal=True, scale_embeddings=True,
                    token_dropout=False, mask_token_id=None, embed_norm=False, lm_head=True, lm_head_transform=False,
                    lm_head_bias=False, init_std=0.02),
    # For tests: tiny, Qwen-shaped (GQA, q/k/v bias, SwiGLU, RMSNorm, RoPE).
    "tiny": dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=128,
                 dropout=0.0, pos="rope", rope_theta=10000.0, norm="rmsnorm", norm_eps=1e-6, norm_position="pre",
                 mlp="swiglu", qkv_bias=True, bias=False, tie_embeddings=True, causal=True,
                 scale_embeddings=False,
                 token_dropout=False, mask_token_id=None, embed_norm=False, lm_head=True, lm_head_transform=False,
                 lm_head_bias=False, init_std=0.02),
    # The default CPU protein masked-LM run: ESM-2-shaped (RoPE, LayerNorm, Pre-LN, GELU, bidirectional)
    # but small enough to train meaningfully on 2 CPU cores in about five minutes (~0.8M parameters).
    "protein-small": dict(vocab_size=33, d_model=128, n_layers=4, n_heads=4, n_kv_heads=4, d_ff=512,
                          max_seq_len=512, dropout=0.0, pos="rope", rope_theta=10000.0, norm="layernorm",
                          norm_eps=1e-5, norm_position="pre", mlp="gelu", qkv_bias=True, bias=True,
                          tie_embeddings=True, causal=False, scale_embeddings=False,
                          token_dropout=False, mask_token_id=None, embed_norm=False, lm_head=True, lm_head_transform=False,
                          lm_head_bias=False, init_std=0.02),
}
