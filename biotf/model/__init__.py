"""The model: one configurable transformer (torch only; nothing from Lightning or Hydra).

    from biotf.model import Transformer, TransformerConfig
    model = Transformer(TransformerConfig.preset("protein-small", vocab_size=tokenizer.vocab_size))
    out = model(input_ids, attention_mask=mask, labels=labels, output_hidden_states=True)

Modules: config (TransformerConfig; its presets are conf/model/*.yaml), positions, norms, attention, mlp,
block, transformer, kv_cache (KVCache), loss (plain and fused LM loss), heads (the heads on the trunk: the masked-LM
head transform, the contact head applied to attention maps by `Transformer.predict_contacts`, and the
classification / regression / per-token heads of fine-tuning),
hf (weight mappings of Hugging Face families: Qwen2, Llama, Mistral, GPT-2, BLOOM both ways, ESM into biotf),
lora (low-rank adapters), modes (fine-tuning modes full | frozen | lora: which weights train, a registry),
stem (the convolutional stem: tokens into bins and back), precision (inference in bf16 or int8, behind a fidelity
gate against fp32).
"""

from biotf.model.kv_cache import KVCache
from biotf.model.config import TransformerConfig
from biotf.conventions import IGNORE_INDEX  # re-exported: the label convention the loss follows
from biotf.model.transformer import Transformer, TransformerOutput, TrunkOutput

__all__ = ["IGNORE_INDEX", "KVCache", "Transformer", "TransformerConfig", "TransformerOutput", "TrunkOutput"]
