"""`TransformerConfig`: one flat dataclass of plain values that describes every biotf transformer.

Every field is a str, int, float, bool, None or a list of ints (the stem's per-stage settings), so
`dataclasses.asdict(config)` is YAML- and JSON-clean. The config is validated at construction: a bad value or an incompatible combination
raises `biotf.errors.ConfigError` naming the field and the allowed values. `pos`, `norm` and `mlp`
allow the names registered in `positions.py`, `norms.py` and `mlp.py`, and the chosen classes check
the fields they need (`check_config`).

Presets are the files `conf/model/<name>.yaml` (the Hydra `model=` group), which cite their
sources; `TransformerConfig.preset(name)` reads them. The `vocab_size` of the biological presets
(and `mask_token_id` where token dropout uses it) is a placeholder: training replaces it with the
tokenizer's at build time (`config.for_tokenizer(...)`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import yaml

from biotf.errors import ConfigError, check_choice, check_int
from biotf.model.mlp import ACTIVATIONS, MLP_CLASSES
from biotf.model.norms import NORM_CLASSES
from biotf.model.positions import POSITION_CLASSES
from biotf.conventions import CONF_DIR

NORM_POSITIONS = ("pre", "post")
STEMS = ("none", "conv")
# What `stem: conv` means when its settings are left null: two stages of d_model channels, each pooling by 2 (4 bases
# per bin), behind a first convolution as wide as Enformer's (15 bases).
STEM_DEFAULT_POOL = (2, 2)
STEM_DEFAULT_KERNEL = 15
PRESET_DIR = CONF_DIR / "model"
# The most numbers one weight matrix may hold (2**50: 4 PiB in float32, far beyond any machine, yet 2**13 times below
# the 2**63 bytes where torch's storage size calculation overflows).
MAX_TENSOR_ELEMENTS = 2**50


@dataclass
class TransformerConfig:
    """The architecture of one transformer; see the module docstring and `biotf/model/transformer.py`.

    Fields
    ------
    vocab_size      rows of the token embedding (and columns of the LM head).
    d_model         width of the residual stream.
    n_layers        number of blocks.
    n_heads         query heads; head size is d_model // n_heads (or d_head).
    n_kv_heads      key/value heads: n_heads = multi-head, 1 = multi-query (Shazeer 2019), in between =
                    grouped-query (Ainslie et al. 2023). None means n_heads.
    d_ff            hidden width of the MLP (for the gated ones: of each of the gate and up projections).
    max_seq_len     longest sequence; required by `pos: learned` (table size), informative otherwise.
    dropout         dropout on embeddings, attention probabilities and both residual branches.
    pos             learned | sinusoidal | rope | alibi | t5 | none (see `positions.py`; t5: T5's learned bias of
                    bucketed relative distances, one table shared by every layer).
    rope_theta      RoPE base (10,000 in Su et al.; 1,000,000 in Qwen2.5).
    norm            layernorm | rmsnorm; norm_eps is its epsilon.
    norm_position   pre (normalise each branch's input, plus a final norm; GPT-2, Qwen, ESM-2) |
                    post (normalise after each residual add, no final norm; Vaswani et al. 2017).
    mlp             gelu | gelu_tanh | relu (two projections) | swiglu (gate, up, down; Shazeer 2020). gelu is the exact
                    erf form (BERT, ESM), gelu_tanh its tanh approximation (GPT-2's `gelu_new`, BLOOM). The gate's
                    activation may also be geglu (exact GELU), geglu_tanh (T5 v1.1's and Ankh's gated-gelu), reglu.
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
    lm_head_transform dense (d_model -> d_model, or d_embed) -> lm_head_activation -> norm before the output
                    projection (the masked-LM head of BERT, RoBERTa, ESM and ALBERT: HF `BertPredictionHeadTransform`,
                    `EsmLMHead`, `AlbertMLMHead`).
    lm_head_bias    a bias vector added to the logits (HF `EsmLMHead.bias`, kept apart from a tied decoder).
    contact_head    a contact-prediction head: a logistic regression over every layer x head's symmetrised,
                    APC-corrected attention map (Rao et al. 2020; ESM-2's `contact_head.regression`,
                    `heads.py`).
    init_std        standard deviation of the normal initialisation of linear and embedding weights.
    type_vocab_size rows of a token-type (segment) embedding added to the token embeddings (BERT, RoBERTa); 0: none.
                    biotf feeds one segment, so every token gets row 0, as HF does when no token_type_ids are given.
    position_offset learned positions: position p reads row p + position_offset of a table of max_seq_len +
                    position_offset rows (HF RoBERTa and ESM-1b number real tokens from pad id + 1, fairseq's
                    `make_positions`; the rows below serve HF's padding positions only).
    lm_head_activation the activation of lm_head_transform: gelu (ESM, RoBERTa, BERT's `gelu`) | gelu_tanh | relu
                    (BERT's head uses its hidden_act).
    sliding_window  causal attention sees only the last `sliding_window` positions, the query's own included (Mistral,
                    HF `sliding_window`; Beltagy et al. 2020); None: every earlier position.
    qk_norm         normalise queries and keys over their full width (all heads together, before the heads are split;
                    `norm`, with no bias) right after their projection (ESM C's `q_norm` / `k_norm`; OLMo 2).
    residual_scale  each residual branch's output is multiplied by it before the add: 1.0 a plain residual; ESM C
                    (ESM3's residue scaling) divides by sqrt(n_layers / 36).
    norm_bias       a bias on the norms (LayerNorm; RMSNorm has none) but the final one, the head transform's and the
                    q/k norms; null: as `bias`.
    final_norm_bias a bias on the final norm (Pre-LN only); null: as norm_bias. ESM C: false, its blocks' norms true.
    lm_head_transform_bias a bias on lm_head_transform's dense layer and (a LayerNorm's) norm; null: as `bias`. ESM C:
                    true, with bias false.
    stem            none | conv: convolutions and pooling turn the embedded tokens (bases) into bins before the blocks,
                    ceil(L / stem_factor) of them, and a learned upsampling turns the bins back into one vector per
                    token for the LM head (`stem.py`; an Enformer-like stem, bidirectional models only). max_seq_len
                    still counts tokens; positions count bins.
    stem_widths     channels of each conv stage (a list, one per stage; the last is projected to d_model when it
                    differs). Null with stem=conv: d_model at every stage. Null with stem=none.
    stem_kernel     width of every stage's convolution, odd (Enformer's first: 15). Null with stem=conv: 15.
    stem_pool       pooling factor of each stage (a list); their product, `stem_factor`, is the bases per bin. Null
                    with stem=conv: [2, 2].
    d_head          width of each attention head; null: d_model / n_heads. Set, the heads together may be wider or
                    narrower than d_model (T5's d_kv: ProtT5-XL has 32 heads of 128 over d_model 1,024).
    scale_attention scores are q.k / sqrt(head size) (Vaswani et al. 2017); false: q.k unscaled (T5, whose
                    initialisation folds the scale into the query weights).
    relative_buckets pos=t5: the number of relative-distance buckets of T5's learned attention bias (half per
                    direction in a bidirectional model; exact distances up to a quarter of them, logarithmic beyond).
    relative_max_distance pos=t5: distances from this on share the last bucket.
    d_embed         ALBERT's factorised embedding: tokens (and learned positions, token types, the embedding norm)
                    live in d_embed dimensions and a linear map (`embed_project`) takes them to d_model; the masked-LM
                    head's transform maps back to d_embed. Null: no factorisation.
    share_layers    one block's weights serve all n_layers layers (ALBERT's single layer group).
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
    contact_head: bool = False
    init_std: float = 0.02
    type_vocab_size: int = 0
    position_offset: int = 0
    lm_head_activation: str = "gelu"
    sliding_window: int | None = None
    # ESM C's switches (`hf/esmc.py`), each general; their defaults are off, as before they existed.
    qk_norm: bool = False
    residual_scale: float = 1.0
    norm_bias: bool | None = None
    final_norm_bias: bool | None = None
    lm_head_transform_bias: bool | None = None
    stem: str = "none"
    stem_widths: list[int] | None = None
    stem_kernel: int | None = None
    stem_pool: list[int] | None = None
    # T5 / ALBERT switches (see the field list).
    d_head: int | None = None
    scale_attention: bool = True
    relative_buckets: int = 32
    relative_max_distance: int = 128
    d_embed: int | None = None
    share_layers: bool = False

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.stem == "conv":  # the stem's null settings mean its defaults (see the field list)
            if self.stem_pool is None:
                self.stem_pool = list(STEM_DEFAULT_POOL)
            if self.stem_widths is None and isinstance(self.stem_pool, list):
                self.stem_widths = [self.d_model] * len(self.stem_pool)
            if self.stem_kernel is None:
                self.stem_kernel = STEM_DEFAULT_KERNEL
        self._validate()

    # --- validation --------------------------------------------------------------------------
    @staticmethod
    def choices() -> dict[str, tuple[str, ...]]:
        """The allowed values of each choice field, from the registries (so a registered class is allowed)."""
        return {"pos": tuple(POSITION_CLASSES), "norm": tuple(NORM_CLASSES), "norm_position": NORM_POSITIONS,
                "mlp": tuple(MLP_CLASSES)}

    def _validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            check_int(name, getattr(self, name))
        check_int("max_seq_len", self.max_seq_len, optional=True)
        for name in ("type_vocab_size", "position_offset"):
            check_int(name, getattr(self, name), minimum=0)
        check_int("sliding_window", self.sliding_window, optional=True)
        for name in ("d_head", "d_embed"):
            check_int(name, getattr(self, name), optional=True)
        for name, allowed in self.choices().items():
            check_choice(name, getattr(self, name), allowed)
        check_choice("lm_head_activation", self.lm_head_activation, ACTIVATIONS)
        for name in ("qkv_bias", "bias", "tie_embeddings", "causal", "scale_embeddings", "token_dropout", "embed_norm",
                     "lm_head", "lm_head_transform", "lm_head_bias", "contact_head", "scale_attention", "share_layers"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "true | false")
        for name in ("dropout", "rope_theta", "norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(name, value, "a finite number")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", self.dropout, "0 <= dropout < 1")
        if self.rope_theta <= 0:
            raise ConfigError("rope_theta", self.rope_theta, "a number > 0")
        if self.norm_eps <= 0:
            raise ConfigError("norm_eps", self.norm_eps, "a number > 0")
        if self.init_std <= 0:
            raise ConfigError("init_std", self.init_std, "a number > 0")
        self._check_sizes()
        if self.d_head is None and self.d_model % self.n_heads:
            raise ConfigError("d_model", self.d_model, f"a multiple of n_heads={self.n_heads}",
                              reason=f"d_model must split evenly into n_heads={self.n_heads} heads")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("n_kv_heads", self.n_kv_heads, f"a divisor of n_heads={self.n_heads}",
                              reason="each key/value head serves a whole group of query heads")
        if self.mask_token_id is not None and (isinstance(self.mask_token_id, bool) or not isinstance(
                self.mask_token_id, int) or not 0 <= self.mask_token_id < self.vocab_size):
            raise ConfigError("mask_token_id", self.mask_token_id, f"an id in 0..{self.vocab_size - 1}, or null")
        if self.token_dropout and self.mask_token_id is None:
            raise ConfigError("mask_token_id", None, f"an id in 0..{self.vocab_size - 1}",
                              reason="token_dropout zeroes the embeddings of the mask token, so it needs its id")
        if self.token_dropout and self.causal:
            raise ConfigError("token_dropout", True, "false", reason="token dropout rescales masked-LM inputs; "
                                                                     "a causal model has no mask tokens")
        if self.position_offset and self.pos != "learned":
            raise ConfigError("position_offset", self.position_offset, "0",
                              reason=f"only a learned position table is offset, and pos is {self.pos}")
        if self.sliding_window is not None and not self.causal:
            raise ConfigError("sliding_window", self.sliding_window, "null",
                              reason="a sliding window limits a causal model's look-back; this model is bidirectional")
        for name in ("lm_head_transform", "lm_head_bias"):
            if getattr(self, name) and not self.lm_head:
                raise ConfigError(name, True, "false", reason="it is part of the LM head, and lm_head is false")
        self._validate_stem()
        self._validate_esmc_switches()
        self._validate_t5_albert()
        # What the chosen position, norm and MLP classes need of the other fields.
        for cls in (POSITION_CLASSES[self.pos], NORM_CLASSES[self.norm], MLP_CLASSES[self.mlp]):
            check = getattr(cls, "check_config", None)
            if check is not None:
                check(self)

    def _check_sizes(self) -> None:
        """Refuse sizes whose largest matrix could never be allocated, before anything is built: torch cannot even
        describe a tensor of more than 2**63 bytes (not on the meta device either), and an edited config.json
        (`n_embd: 1e9`) would otherwise fail deep inside module construction. A size within the limit is checked
        against the weights' shapes by the loaders."""
        width = self.d_model
        for name, elements in (("d_model", 3 * width * width), ("vocab_size", self.vocab_size * width),
                               ("d_ff", 2 * self.d_ff * width), ("max_seq_len", (self.max_seq_len or 0) * width)):
            if elements > MAX_TENSOR_ELEMENTS:
                raise ConfigError(name, getattr(self, name), reason=f"with d_model={width} its matrix would hold "
                                  f"{elements:.3g} numbers, more than any machine can allocate "
                                  f"({MAX_TENSOR_ELEMENTS:.3g})")

    def _validate_stem(self) -> None:
        check_choice("stem", self.stem, STEMS)  # not among `choices`: those of the block, which every stem composes with
        settings = ("stem_widths", "stem_kernel", "stem_pool")
        if self.stem == "none":
            for name in settings:
                if getattr(self, name) is not None:
                    raise ConfigError(name, getattr(self, name), "null",
                                      reason="stem is none; the stem's settings take effect with stem: conv")
            return
        for name in ("stem_pool", "stem_widths"):
            value = getattr(self, name)
            if not (isinstance(value, list) and value and all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
                raise ConfigError(name, value, "a non-empty list of integers >= 1, one per stage (e.g. [2, 2])")
        if len(self.stem_widths) != len(self.stem_pool):
            raise ConfigError("stem_widths", self.stem_widths, f"a list of {len(self.stem_pool)} widths",
                              reason=f"one width per stage, and stem_pool={self.stem_pool} has {len(self.stem_pool)}")
        check_int("stem_kernel", self.stem_kernel)
        if self.stem_kernel % 2 == 0:
            raise ConfigError("stem_kernel", self.stem_kernel, "an odd integer >= 1",
                              reason="an odd kernel is centred on its base, so the convolution shifts nothing")
        if self.causal:
            raise ConfigError("stem", self.stem, "none", reason="a bin mixes its bases, so a causal model would see "
                                                                "the tokens it predicts; the stem is for encoders")
        if self.contact_head:
            raise ConfigError("contact_head", True, "false", reason="contacts are per token, and a stem's attention "
                                                                    "runs over bins")

    def _validate_esmc_switches(self) -> None:
        """qk_norm, residual_scale and the three bias switches (see the field list)."""
        value = self.residual_scale
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError("residual_scale", value, "a finite number > 0")
        if not isinstance(self.qk_norm, bool):
            raise ConfigError("qk_norm", self.qk_norm, "true | false")
        for name in ("norm_bias", "final_norm_bias", "lm_head_transform_bias"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(name, value, "true | false | null")
            if value and name != "lm_head_transform_bias" and self.norm != "layernorm":
                raise ConfigError(name, True, "false | null", reason=f"norm is {self.norm}, which has no bias")
        if self.final_norm_bias is not None and self.norm_position != "pre":
            raise ConfigError("final_norm_bias", self.final_norm_bias, "null",
                              reason="only Pre-LN models (norm_position: pre) have a final norm")
        if self.lm_head_transform_bias is not None and not self.lm_head_transform:
            raise ConfigError("lm_head_transform_bias", self.lm_head_transform_bias, "null",
                              reason="it is part of lm_head_transform, which is false")

    def _validate_t5_albert(self) -> None:
        """The switches T5 and ALBERT brought: relative buckets only with pos=t5, a factorised embedding only where
        every stage that reads the embedding width can follow it."""
        check_int("relative_buckets", self.relative_buckets, minimum=2)
        check_int("relative_max_distance", self.relative_max_distance, minimum=1)
        defaults = TransformerConfig.__dataclass_fields__
        for name in ("relative_buckets", "relative_max_distance"):
            if self.pos != "t5" and getattr(self, name) != defaults[name].default:
                raise ConfigError(name, getattr(self, name), str(defaults[name].default),
                                  reason=f"only T5's relative position bias has buckets, and pos is {self.pos}")
        if self.d_embed is None:
            return
        if self.stem != "none":
            raise ConfigError("d_embed", self.d_embed, "null", reason="the conv stem reads d_model-wide embeddings; "
                                                                      "a factorised embedding is for ALBERT-style "
                                                                      "encoders without a stem")
        if self.lm_head and not self.lm_head_transform:
            raise ConfigError("lm_head_transform", False, "true", reason=f"with d_embed={self.d_embed} the LM head's "
                              "matrix is d_embed wide, and the head transform is what maps d_model back to it")

    # --- derived -----------------------------------------------------------------------------
    @property
    def norm_has_bias(self) -> bool:
        """Whether the blocks', the embedding's and the stem's norms have a bias (`norm_bias`, null: `bias`)."""
        return self.bias if self.norm_bias is None else self.norm_bias

    @property
    def final_norm_has_bias(self) -> bool:
        return self.norm_has_bias if self.final_norm_bias is None else self.final_norm_bias

    @property
    def head_transform_has_bias(self) -> bool:
        return self.bias if self.lm_head_transform_bias is None else self.lm_head_transform_bias

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def embed_width(self) -> int:
        """Width of the token embedding (and of what is added to it before `embed_project`): d_embed or d_model."""
        return self.d_embed if self.d_embed is not None else self.d_model

    @property
    def stem_factor(self) -> int:
        """Tokens (bases) per bin: the product of stem_pool; 1 without a stem."""
        return math.prod(self.stem_pool) if self.stem == "conv" else 1

    # --- (de)serialisation -------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Build from a plain mapping (a YAML file, a checkpoint's config); unknown keys are refused."""
        if not isinstance(values, Mapping):
            raise ConfigError("model", values, reason="expected a mapping of model settings")
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

    @staticmethod
    def preset_names() -> list[str]:
        return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """The preset `conf/model/<name>.yaml` (Hydra's `model=<name>`), with optional field overrides."""
        path = PRESET_DIR / f"{name}.yaml"
        if not path.is_file():
            raise ConfigError("model", name, " | ".join(cls.preset_names()), reason="unknown model preset")
        return cls.from_dict({**yaml.safe_load(path.read_text(encoding="utf-8")), **overrides})
