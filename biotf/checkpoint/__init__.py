"""Checkpoints: every on-disk format of a model, its checksums, and loading any of them.

Below training, fine-tuning, inference and export (which all import it) and above `model/` and `tokenizers/`:
- `format`: what `checkpoint["biotf"]` and an exported config.json hold; `ensure_same_tokenizer`, the
  one fingerprint comparison;
- `digest`: the CRC-32 of a checkpoint's content;
- `store`: `save_checkpoint` / `read_checkpoint` (Lightning .ckpt) and `save_pretrained` / `read_exported`
  (`save_hf_pretrained`: a Hugging Face directory of a model family);
- `sharded`: an FSDP run's sharded checkpoint directory (every rank's shard, each file's CRC-32), checked, and
  consolidated into the single file a DDP run writes;
- `task_export`: a fine-tuned export's files beside the trunk (head, adapter, task.json), each with its CRC-32;
- `task_model`: a fine-tuned model (the exported trunk with its head), written and read as one;
- `hf_directory`: a Hugging Face checkpoint directory (Qwen2, ESM) as model and tokenizer, and its generation
  settings;
- `stored_model`: a biotf checkpoint's or export's files as a model, the config checked against the weights;
- `loading`: the one table of model sources (`MODEL_SOURCES`), each loaded into a `LoadedModel`: what
  `biotf.Model.load` and every job given a path read a model with.
Writes are all-or-nothing (`biotf.io.atomic`).
"""

from biotf.checkpoint.digest import DIGEST_KEY, content_crc32
from biotf.checkpoint.format import (CHECKPOINT_DIR, CHECKPOINT_KEY, FINETUNED_MODEL_DIR, FORMAT_VERSION,
                                     STATE_PREFIX, TASK_FILE, WEIGHTS_FILE, checkpoint_payload, ensure_same_tokenizer,
                                     payload_fingerprint, tokenizer_from_payload, tokenizer_payload)
from biotf.checkpoint.store import (CONFIG_FILE, read_checkpoint, read_exported, save_checkpoint, save_hf_pretrained,
                                    save_pretrained)

__all__ = ["CHECKPOINT_DIR", "CHECKPOINT_KEY", "CONFIG_FILE", "DIGEST_KEY", "FINETUNED_MODEL_DIR", "FORMAT_VERSION",
           "STATE_PREFIX", "TASK_FILE", "WEIGHTS_FILE", "checkpoint_payload", "content_crc32", "ensure_same_tokenizer",
           "payload_fingerprint", "read_checkpoint", "read_exported", "save_checkpoint",
           "save_hf_pretrained", "save_pretrained", "tokenizer_from_payload", "tokenizer_payload"]
