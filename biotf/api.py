"""`biotf.Model`: one object for every job biotf does with a trained model, from Python.

    import biotf

    model = biotf.Model.load("outputs/protein_mlm/<run>")      # a run, a .ckpt, an export, a Hugging Face dir
    vectors = model.embed(["MKTAYIAKQR", "MSLEQKKGAD"])          # (2, d_model) float32, mean-pooled
    table = model.score(["MKTAYIAKQR"])                         # a pandas DataFrame: log_likelihood, perplexity ...
    assays = model.score_assays("DMS_dir/", "DMS_substitutions.csv")  # ProteinGym's metrics, one row per assay
    maps = model.contacts(["MKTAYIAKQR"])                       # one (L, L) contact probability map a sequence
    texts = model.generate(["The ribosome"], max_new_tokens=20)  # a causal model's completions
    labels = biotf.Model.load("outputs/finetune/<run>").predict(["MKTAYIAKQR"])  # a fine-tuned model's predictions
    model.save("exported/")                                     # what `biotf export-model` writes
    fast = biotf.Model.load("exported/", precision="auto")     # bf16 / int8 where the CPU has them, gated vs fp32

Every method checks its arguments first (`biotf.api_arguments`): a bad one is one `ArgumentError` naming it.
Each job runs the same code as its command (`biotf embed`, `score`, `contacts`, `generate`, `predict`,
`export-model`) on sequences in memory, and returns arrays or data frames where the command writes a file: the same
tokenizer policies, windows, batches and checks, so a vector or a score equals the command's to the last bit. Sources
are whatever `find_source` recognises (`biotf.checkpoint.loading.MODEL_SOURCES`, each of whose loaders returns what
`Model.load` builds on); a fine-tuned model (a fine-tuning run or its `model/`) also carries its task head, which
`predict` uses while the other jobs use its trunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from biotf.checkpoint.gate_cache import gate_cache_for
from biotf.checkpoint.hf_directory import parse_dtype
from biotf.checkpoint.loading import LoadedModel, SourceOptions, load_source
from biotf.checkpoint.store import save_hf_pretrained, save_pretrained
from biotf.io.readers import Record
from biotf.data.packing import check_packable
from biotf.api_arguments import checked_arguments
from biotf.errors import ArgumentError, CheckpointError, check_choice, check_int
from biotf.export.embed import Embedder, EmbedOptions, EmbedStats
from biotf.export.sentence_transformers import check_pooling_width, embed_defaults, transformer_directory
from biotf.inference.fast import DecodingModel, optimize_for_decoding
from biotf.inference.fast.layout import loaded_in_decode_layout, plan_before_loading
from biotf.inference.generation import sampling_over
from biotf.inference.predict import PredictionSummary, loaded_task_model, prediction_header, prediction_rows
from biotf.model.positions import reading_length
from biotf.inference.pretrained import GenerationDefaults, complete
from biotf.conventions import PRECISIONS
from biotf.model.precision import Calibration, PrecisionChoice, calibration_batch, set_precision
from biotf.scoring.assays import AssaySummary, PublishedTable, assay_table
from biotf.scoring.score_job import ScoreSummary, sequence_rows
from biotf.scoring.fitness_metrics import METRICS
from biotf.scoring.scorer import ScoreOptions, Scorer
from biotf.structure.contact_files import ContactOptions, ContactStats, check_contact_head, contact_maps, proteins
from biotf.tokenizers.base import Tokenizer

if TYPE_CHECKING:
    import pandas

__all__ = ["Model"]


def as_records(sequences: str | Iterable[str | Record], ids: Sequence[str] | None = None) -> list[Record]:
    """Records of `sequences` (one string, strings or `Record`s, as `checked_arguments` let through), ids from `ids`
    or else their 0-based numbers, as the readers number a file's records without an id column."""
    items = [sequences] if isinstance(sequences, str) else list(sequences)  # checked: `checked_arguments`
    if ids is not None and len(ids) != len(items):
        raise ArgumentError("ids", f"{len(ids)} ids", allowed=f"one id per sequence ({len(items)})")
    return [item if isinstance(item, Record) else
            Record(str(index) if ids is None else str(ids[index]), item, {}, index)
            for index, item in enumerate(items)]


def _calibration(network: torch.nn.Module, tokenizer: Tokenizer) -> Calibration:
    """The precision gate's batch for `network` over `tokenizer`'s content ids, framed as its records start and end
    (<cls> or <bos>; <eos>)."""
    start = tokenizer.cls_id if tokenizer.cls_id is not None else tokenizer.bos_id
    return calibration_batch(tokenizer.vocab_size, tokenizer.special_ids, network.config.max_seq_len,
                             network.config.causal, tokenizer.mask_id,
                             prefix=() if start is None else (start,),
                             suffix=() if tokenizer.eos_id is None else (tokenizer.eos_id,))


def _gated_precision(network: torch.nn.Module, tokenizer: Tokenizer, precision: str, model_name: str,
                     task: torch.nn.Module | None) -> PrecisionChoice:
    """`set_precision` on the gate's batch, with the figures an earlier process measured for the same weights,
    batch, code and device where it kept them (`biotf.checkpoint.gate_cache`)."""
    calibration = _calibration(network, tokenizer)
    return set_precision(network, precision, calibration, model_name, task, gate_cache_for(network, calibration, task))


def _frame(rows: list[dict[str, object]], columns: Sequence[str]) -> pandas.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, columns=list(rows[0]) if rows else list(columns))


def _generation_defaults(loaded: LoadedModel) -> GenerationDefaults | None:
    """What `loaded` generates with unless told otherwise: what its source stores (a Hugging Face directory's
    generation_config.json, read now), else a causal biotf run's (it stores none); None for a masked-LM."""
    if loaded.generation_settings is not None:
        return GenerationDefaults.from_settings(loaded.generation_settings(), loaded.tokenizer,
                                                loaded.network.config.vocab_size)
    return GenerationDefaults.for_run(loaded.tokenizer) if loaded.network.config.causal else None


@dataclass
class Model(LoadedModel):
    """A loaded model (`LoadedModel`: its `network`, a `biotf.model.Transformer` in eval mode, its `tokenizer`, where it
    came from, and when fine-tuned its `task` model and `task_info`) with its generation defaults, and every job.
    Build one with `Model.load`."""

    generation: GenerationDefaults | None = None
    precision: PrecisionChoice = PrecisionChoice("fp32", "fp32")
    _decoder: DecodingModel | None = field(default=None, repr=False)

    # --- loading and saving -------------------------------------------------------------------------------
    @classmethod
    @checked_arguments
    def load(cls, source: str | Path, *, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32",
             tokenizer_options: Mapping[str, Any] | None = None, for_generation: bool = False,
             precision: str = "fp32") -> Model:
        """The model of `source` on `device` in `dtype` (float32 | bfloat16); `tokenizer_options` change
        policies of its tokenizer, never its vocabulary (`stop="strip_terminal"`, `unknown="to_unk"`: what
        `--option` sets in the commands). Every file is checked as the commands check it (CRCs, the tokenizer
        against the weights, the config against the weights' shapes) before a tensor is allocated. With
        `for_generation` (what `biotf generate` loads with), a Hugging Face decoder's matrices are read straight into
        their decoding layout, one copy per tensor (`SourceOptions.materialise`), and a directory of a family or
        architecture biotf does not generate with is refused before its weights are read (`decoding` refuses a
        masked-LM). `precision` (fp32 | bf16 | int8 | auto) converts the loaded float32 network for inference after
        its fidelity gate against fp32 (`biotf.model.precision`; a failed gate refuses it in one line); the choice and
        why is `Model.precision`."""
        path = transformer_directory(Path(source))  # a sentence-transformers directory's model (`embed` pools as it)
        torch_dtype = parse_dtype(dtype)  # an unknown dtype or precision is refused before any weight is read
        check_choice("precision", precision, PRECISIONS)
        options = SourceOptions(torch_dtype, for_generation, loaded_in_decode_layout if for_generation else None,
                                partial(plan_before_loading, dtype=torch_dtype) if for_generation else None)
        loaded = load_source(path, options, device, tokenizer_options)
        check_pooling_width(Path(source), loaded.network.config.d_model)  # a sentence-transformers directory's
        chosen = (PrecisionChoice("fp32", "fp32") if precision == "fp32" else  # fp32 as loaded: no gate to run
                  _gated_precision(loaded.network, loaded.tokenizer, precision, str(source), loaded.task))
        stored = for_generation or loaded.generation_settings is None  # else read when generation is asked for
        parts = {name.name: getattr(loaded, name.name) for name in fields(LoadedModel)}
        return cls(**{**parts, "source": str(source)}, generation=_generation_defaults(loaded) if stored else None,
                   precision=chosen)

    @checked_arguments
    def save(self, directory: str | Path, hf: str | None = None) -> Path:
        """Write the model into a new `directory`: a biotf export (config.json, model.safetensors, tokenizer.json;
        what `Model.load` reads), or with `hf` a Hugging Face checkpoint of that family
        ("auto": the first that holds it) that `transformers`' `AutoModel*` loads. A fine-tuned model saves its
        trunk."""
        if hf is None:
            return save_pretrained(self.network, self.tokenizer, directory)
        return save_hf_pretrained(self.network, self.tokenizer, directory, None if hf == "auto" else hf)

    @property
    def device(self) -> torch.device:
        return self.network.device

    def decoding(self) -> tuple[DecodingModel, GenerationDefaults]:
        """The network arranged for decoding (`optimize_for_decoding`, once) and its generation defaults; a model
        that cannot generate (a masked-LM, an encoder directory) is refused, naming what can. A Hugging Face
        directory's generation settings (generation_config.json) are read here, the first time, not at every load."""
        if self.generation is None:
            self.generation = _generation_defaults(self)  # a directory biotf does not generate with names what can
        if self.generation is None:
            raise CheckpointError(f"{self.source or 'this model'} is a masked-LM (causal: false), which cannot "
                                  "generate: generation needs a causal model (trained with model.causal=true, e.g. "
                                  "experiment=smiles_clm)")
        if self._decoder is None:
            self._decoder = optimize_for_decoding(self.network)
        return self._decoder, self.generation

    # --- the jobs -----------------------------------------------------------------------------------------
    @checked_arguments
    def embed(self, sequences: str | Iterable[str | Record], *, ids: Sequence[str] | None = None,
              pool: str | None = None, layer: int | str = -1, batch_tokens: int = 16384,
              max_length: int | None = None, long: str | None = None, overlap: int | None = None, packing: bool = False,
              summary: EmbedStats | None = None) -> np.ndarray | list[np.ndarray]:
        """One float32 vector per sequence, in order, as `biotf embed` computes it (`EmbedOptions` say what the
        options mean; `pool`, `max_length` and `long` not given: a sentence-transformers directory's own pooling,
        length and cut, else mean pooling over windows of the model's length): an (N, d_model) array, or
        (N, layers, d_model) with `layer="all"`; with `pool="none"` a list of (tokens, d_model) arrays, one row per
        content token ((layers, tokens, d_model) with `layer="all"`).
        `summary` counts what `biotf embed`'s summary line says (windows, chunked and truncated records, what the
        tokenizer's policies changed); every job takes one of its own kind."""
        _, pooling = embed_defaults(self.source, pool, max_length, long)
        options = EmbedOptions(**pooling, layer=layer, batch_tokens=batch_tokens, overlap=overlap, packing=packing)
        embedder = Embedder(self.network, self.tokenizer, options)
        single = layer != "all"
        vectors = [item.vectors[0] if single else item.vectors
                   for item in embedder.embed(as_records(sequences, ids), summary)]
        if options.pool == "none":
            return vectors
        width = (self.network.config.d_model,) if single else (len(embedder.layers), self.network.config.d_model)
        return np.stack(vectors) if vectors else np.zeros((0, *width), np.float32)

    @checked_arguments
    def score(self, sequences: str | Iterable[str | Record], *, ids: Sequence[str] | None = None,
              method: str = "auto", batch_tokens: int = 16384, max_length: int | None = None,
              overlap: int | None = None, packing: bool = False,
              summary: ScoreSummary | None = None) -> pandas.DataFrame:
        """Each sequence's (pseudo-)log-likelihood in nats, one row per sequence in order, with the columns of
        `biotf score`'s table (`biotf.scoring.score_job`): id, sequence, method, log_likelihood, mean_per_token,
        mean_per_residue, perplexity, tokens, scored_tokens, residues, windows. `method`: auto | causal | pll."""
        scorer = Scorer.of(self, ScoreOptions(batch_tokens, max_length, overlap, packing))
        method = scorer.resolve(method)
        summary = summary if summary is not None else ScoreSummary()
        summary.method, summary.packing = method, packing
        rows = sequence_rows(scorer, method, as_records(sequences, ids), summary)
        return _frame(rows, ("id", "sequence", "method", "precision", "log_likelihood"))

    @checked_arguments
    def score_assays(self, assays: str | Path | Sequence[str | Path], reference_file: str | Path, *,
                     method: str = "auto", reference_table: str | Path | None = None, published: Sequence[str] = (),
                     reference_metric: str = "Spearman", batch_tokens: int = 16384, max_length: int | None = None,
                     overlap: int | None = None, packing: bool = False, window: str = "centred",
                     summary: AssaySummary | None = None) -> pandas.DataFrame:
        """ProteinGym assays (a directory or files) scored as `biotf score proteingym` scores them: the same table,
        one row per assay (DMS_id, variants, multi_mutants, method, windows, window, Spearman, AUC, MCC, NDCG,
        Top_recall, and the `published` columns of `reference_table` beside biotf's); `summary` gets its lines
        (`biotf.scoring.assays`); `window`: `ScoreOptions.window`, ProteinGym's "centred" by default."""
        table = None if reference_table is None else PublishedTable(Path(reference_table), tuple(published),
                                                                      reference_metric)
        options = ScoreOptions(batch_tokens, max_length, overlap, packing, window)
        rows = assay_table(self, assays, reference_file, method, options, table, summary)
        return _frame(rows, ("DMS_id", "variants", "multi_mutants", "method", "precision", "windows", "window", *METRICS))

    @checked_arguments
    def predict(self, sequences: str | Iterable[str | Record], *, ids: Sequence[str] | None = None,
                batch_size: int = 32, packing: bool = False, max_length: int | None = None,
                summary: PredictionSummary | None = None) -> pandas.DataFrame:
        """A fine-tuned model's prediction for each sequence, with the columns of `biotf predict`'s table: id,
        prediction (the class name, the value, or one label a residue), p_<class> for classification. Sequences
        the model's long-sequence policy drops have no row (counted in `summary`); `max_length`: tokens a sequence
        is encoded to (default the run's; `biotf.inference.predict.record_length`)."""
        loaded = loaded_task_model(self)
        check_int("batch_size", batch_size)
        check_packable(packing, self.network.config)
        summary = summary if summary is not None else PredictionSummary(rows=0, records=0, task=loaded.task_info.task)
        header = prediction_header(loaded.task_info)
        rows = prediction_rows(loaded.task, loaded.tokenizer, loaded.task_info, as_records(sequences, ids), summary,
                               batch_size, packing, max_length=max_length)
        return _frame([dict(zip(header, row)) for row in rows], header)

    @checked_arguments
    def contacts(self, sequences: str | Iterable[str | Record], *, ids: Sequence[str] | None = None,
                 batch_pairs: int = ContactOptions.batch_pairs, max_length: int | None = None,
                 summary: ContactStats | None = None) -> list[np.ndarray]:
        """One (L, L) float32 map of contact probabilities per protein (L its residues), as `biotf contacts`
        predicts them, from a model with a contact head (ESM-2 checkpoints ship one; `biotf contacts fit` fits
        one); `max_length` as `ContactOptions` says."""
        check_contact_head(self.network, self.source)
        options = ContactOptions(batch_pairs, max_length)
        summary = summary if summary is not None else ContactStats()
        found = proteins(as_records(sequences, ids), self.tokenizer,
                         reading_length(self.network.config, options.max_length), summary.policies)
        pad_id = self.tokenizer.pad_id if self.tokenizer.pad_id is not None else 0
        return [probabilities for _, probabilities in contact_maps(self.network, found, pad_id, options, summary)]

    @checked_arguments
    def generate(self, prompts: str | Sequence[str], *, max_new_tokens: int | None = None,
                 temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                 repetition_penalty: float | None = None, seed: int | None = None, chat: bool = False,
                 system: str | None = None, truncate_prompt: bool = False) -> list[str]:
        """Each prompt's completion (special tokens left out) from a causal model, as `biotf generate` makes it:
        sampling options not given come from the checkpoint's generation_config.json (a biotf run's: greedy), a
        biotf run's prompt follows its `<eos>`, and generation stops at any eos id. `chat` renders each prompt with
        the tokenizer's chat template (after `system`, if given)."""
        texts = [prompts] if isinstance(prompts, str) else list(prompts)
        decoder, defaults = self.decoding()
        sampling = sampling_over(defaults, temperature=temperature, top_k=top_k, top_p=top_p,
                                 repetition_penalty=repetition_penalty)
        done = complete(decoder, self.tokenizer, defaults, texts, chat=chat, system=system,
                        max_new_tokens=max_new_tokens, sampling=sampling, seed=seed, truncate_prompt=truncate_prompt)
        return [self.tokenizer.decode(row, skip_special_tokens=True) for row in done.new]
