"""Checkpoints: the payload format, atomic writes, the content checksum, and reading / writing them.

Below training, inference and export (which all import it) and above `model/` and `tokenizers/`:
- `format`: what `checkpoint["biotf"]` and an exported config.json hold; `ensure_same_tokenizer`, the
  one fingerprint comparison;
- `files`: all-or-nothing file and directory writes with the user's umask;
- `digest`: the CRC-32 of a checkpoint's content;
- `store`: `save_checkpoint` / `read_checkpoint` (Lightning .ckpt) and `save_pretrained` / `read_exported`;
- `task_export`: a fine-tuned export's files beside the trunk (head, adapter, task.json), each with its CRC-32
  (imported by its module name: it needs `biotf.model.tasks`).
"""

from biotf.checkpoint.digest import DIGEST_KEY, content_crc32
from biotf.checkpoint.files import atomic_directory, atomic_write, atomic_write_text
from biotf.checkpoint.format import (CHECKPOINT_DIR, CHECKPOINT_KEY, CONFIG_FILE, FINETUNED_MODEL_DIR, FORMAT_VERSION,
                                     STATE_PREFIX, TASK_FILE, WEIGHTS_FILE, checkpoint_payload, ensure_same_tokenizer,
                                     payload_fingerprint, tokenizer_from_payload, tokenizer_payload)
from biotf.checkpoint.store import read_checkpoint, read_exported, read_payload, save_checkpoint, save_pretrained

__all__ = ["CHECKPOINT_DIR", "CHECKPOINT_KEY", "CONFIG_FILE", "DIGEST_KEY", "FINETUNED_MODEL_DIR", "FORMAT_VERSION",
           "STATE_PREFIX", "TASK_FILE", "WEIGHTS_FILE", "atomic_directory", "atomic_write", "atomic_write_text",
           "checkpoint_payload", "content_crc32", "ensure_same_tokenizer", "payload_fingerprint", "read_checkpoint",
           "read_exported", "read_payload", "save_checkpoint", "save_pretrained", "tokenizer_from_payload",
           "tokenizer_payload"]
