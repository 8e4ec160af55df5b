"""Hugging Face checkpoints <-> biotf: one explicit weight-mapping function per direction and family.

Families (one module per recipe, registered in `families.FAMILIES` by config.json's `model_type`):
- `qwen2`, `llama`, `mistral` (`llama.py`, one recipe): `Qwen2ForCausalLM`, `LlamaForCausalLM`, `MistralForCausalLM`,
  read and written;
- `gpt2`: `GPT2LMHeadModel`, read and written;
- `bloom`: `BloomForCausalLM`, read and written;
- `esm`: `EsmForMaskedLM` (ESM-2 rotary, ESM-1b absolute positions) and the ESM encoders without LM head, read;
  `EsmForMaskedLM` / `EsmModel` written;
- `esmc`: `EsmcForMaskedLM` (ESM C) and its encoders without LM head, read; `EsmcForMaskedLM` / `EsmcModel` written;
- `bert`, `roberta` (`bert.py`, one mapping with a layout parameter): the masked LMs and the encoders without LM head,
  read; `BertForMaskedLM` / `BertModel`, `RobertaForMaskedLM` / `RobertaModel` written. The tensor names the three
  encoder families share are one table (`encoder.py`).
- `t5`: the encoder of `T5EncoderModel` / `T5ForConditionalGeneration` (ProtT5, Ankh), read; `T5EncoderModel` written;
- `albert`: `AlbertForMaskedLM` and the ALBERT encoders without LM head, read only.
Other model types are refused with a `CheckpointError`; a model with a convolutional stem (`stem: conv`) is refused
for writing with a `ConfigError` naming model.stem (no family has one). A model is read from a `transformers` model object or from a
directory of config.json + model.safetensors (or shards listed in model.safetensors.index.json, or a
pytorch_model.bin read with `torch.load(weights_only=True)`): `weights`; or from a fair-esm `.pt` file, read as the
ESM family (`fair_esm`). The tests compare logits with `transformers` (fair-esm's files: with fair-esm) for each
family.
"""

from biotf.model.hf.convert import Materialise, check_hf_writable, hf_model_config, load_hf, save_hf
from biotf.model.hf.esm import ESM_ARCHITECTURES
from biotf.model.hf.families import FAMILIES
from biotf.model.hf.family import Family
from biotf.model.hf.weights import CONFIG_FILE, WEIGHTS_FILE, read_hf_config, read_weights

__all__ = ["CONFIG_FILE", "ESM_ARCHITECTURES", "FAMILIES", "WEIGHTS_FILE", "Family", "Materialise", "check_hf_writable",
           "hf_model_config", "load_hf",
           "read_hf_config", "read_weights", "save_hf"]
