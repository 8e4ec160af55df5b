"""BPETokenizer: parity with transformers on Qwen2.5, training on text / DNA / SMILES, save and reload."""

from __future__ import annotations

import json

import numpy as np
import pytest

from biotf.errors import ConfigError, InputError
from biotf.tokenizers import BPETokenizer, load_tokenizer


@pytest.fixture(scope="module")
def qwen(qwen_tokenizer_dir) -> BPETokenizer:
    return load_tokenizer(qwen_tokenizer_dir)


@pytest.fixture(scope="module")
def qwen_reference(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)


@pytest.fixture(scope="module")
def mixed_corpus(shared_data) -> list[str]:
    """English, Korean (reviews and the constitution), code, proteins, SMILES and chat markup."""
    text = shared_data / "text"
    english = (text / "tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")[:400]
    reviews = (text / "nsmc_raw_subset_10k.tsv").read_text(encoding="utf-8").splitlines()[1:400]
    constitution = (text / "ko_constitution_kolaw.txt").read_text(encoding="utf-8").split("\n\n")[:100]
    code = ["def f(x):\n    return x ** 2  # 제곱\n", "for (int i = 0; i < n; ++i) { s += a[i]; }\t\r\n",
            "SELECT * FROM t WHERE id=42;", "    \n\n  trailing   spaces   "]
    proteins = ["MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWUAOBZ"]
    smiles = ["CC(=O)Oc1ccccc1C(=O)O", "C[C@@H](Cl)c1ccc%10cc1Br>>CC.[Na+]"]
    chat = ["<|im_start|>user\n안녕하세요<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>é\u0301 ﬁ 🧬"]
    return english + reviews + constitution + code + proteins + smiles + chat


def test_qwen_facts(qwen):
    assert qwen.vocab_size == len(qwen) == 151_665
    assert qwen.encode(" am") == [1079]
    assert qwen.encode("<|im_end|>") == [151645]
    assert (qwen.pad_id, qwen.eos_id, qwen.bos_id, qwen.unk_id, qwen.mask_id) == (151643, 151645, None, None, None)
    assert qwen.special_ids == set(range(151643, 151665))  # the 22 added tokens tokenizer.json marks special


def test_qwen_ids_equal_transformers_on_mixed_corpus(qwen, qwen_reference, mixed_corpus):
    assert len(qwen_reference) == 151_665
    expected = qwen_reference(mixed_corpus)["input_ids"]
    assert [ids.tolist() for ids in qwen.encode_batch(mixed_corpus)] == expected
    assert [qwen.encode(t) for t in mixed_corpus[-20:]] == expected[-20:]
    for text, ids in zip(mixed_corpus[-30:], expected[-30:]):
        assert qwen.decode(ids, skip_special_tokens=False) == qwen_reference.decode(ids, skip_special_tokens=False)
        assert qwen.decode(ids) == qwen_reference.decode(ids, skip_special_tokens=True)


def test_qwen_chat_template_from_tokenizer_config(qwen, qwen_reference):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "안녕? MKTAYIAK"}]
    rendered = qwen.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == qwen_reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert qwen.apply_chat_template(messages) == qwen.encode(qwen.apply_chat_template(messages, tokenize=False))


def test_qwen_save_reload_and_transformers_loads_biotf_save(qwen, qwen_reference, mixed_corpus, tmp_path):
    from transformers import AutoTokenizer

    qwen.save(tmp_path)
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert isinstance(again, BPETokenizer) and again.fingerprint == qwen.fingerprint
    assert again.chat_template == qwen.chat_template
    assert AutoTokenizer.from_pretrained(tmp_path)(mixed_corpus[:50])["input_ids"] == \
        qwen_reference(mixed_corpus[:50])["input_ids"]
    rebuilt = BPETokenizer.from_config(json.loads(json.dumps(qwen.to_config())))
    assert rebuilt.fingerprint == qwen.fingerprint


def test_to_hf_equals(qwen, mixed_corpus):
    hf = qwen.to_hf()
    assert hf(mixed_corpus)["input_ids"] == [ids.tolist() for ids in qwen.encode_batch(mixed_corpus)]
    assert hf.pad_token_id == 151643 and hf.eos_token_id == 151645


def test_train_on_text_files(shared_data, tmp_path):
    tokenizer = BPETokenizer.train([shared_data / "text/tinyshakespeare_input.txt"], vocab_size=600)
    assert tokenizer.vocab_size == 600
    assert [tokenizer.get_vocab()[t] for t in ["<pad>", "<unk>", "<cls>", "<eos>", "<mask>"]] == [0, 1, 2, 3, 4]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.eos_id, tokenizer.mask_id) == (0, 1, 2, 3, 4)
    text = "To be, or not to be: 그것이 문제로다 🧬"
    ids = tokenizer.encode(text)
    assert ids[0] == 2 and ids[-1] == 3
    assert tokenizer.decode(ids) == text  # byte-level: nothing is unknown
    passage = (shared_data / "text/tinyshakespeare_input.txt").read_text(encoding="utf-8")[:2000]
    assert len(tokenizer.encode(passage, add_special_tokens=False)) < len(passage) / 2  # merges were learned
    tokenizer.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.fingerprint == tokenizer.fingerprint and again.encode(text) == ids
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path)(text)["input_ids"] == ids


def test_train_on_dna_and_smiles(genomes, moses):
    chunks = [genome[i:i + 1000] for genome in genomes.values() for i in range(0, len(genome), 1000)]
    dna = BPETokenizer.train_from_texts(chunks, vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                                                "[MASK]"])
    assert (dna.pad_id, dna.unk_id, dna.cls_id, dna.eos_id, dna.mask_id) == (0, 1, 2, 3, 4)
    genome = max(genomes.values(), key=len)
    ids = dna.encode(genome[:5000])
    assert len(ids) < 5000 / 3  # merges learned: several bases per token
    assert dna.decode(ids) == genome[:5000]
    smiles = BPETokenizer.train_from_texts(moses[:20000], vocab_size=500, special_tokens={"pad": "<pad>", "eos": "</s>"})
    assert smiles.encode(moses[0])[-1] == smiles.eos_id and smiles.cls_id is None
    assert smiles.encode(moses[0])[:-1] == smiles.encode(moses[0], add_special_tokens=False)
    assert [smiles.decode(i) for i in smiles.encode_batch(moses[:100])] == moses[:100]
    assert all(i.dtype == np.int32 for i in smiles.encode_batch(moses[:10]))


def test_bad_inputs(tmp_path):
    with pytest.raises(ConfigError, match="vocab_size"):
        BPETokenizer.train_from_texts(["abc"], vocab_size=10)
    with pytest.raises(InputError, match="does not exist"):
        BPETokenizer.train([tmp_path / "missing.txt"], vocab_size=300)
    with pytest.raises(ConfigError, match="special_tokens.*allowed"):
        BPETokenizer.train_from_texts(["abc"], vocab_size=300, special_tokens={"padding": "<pad>"})
    (tmp_path / "tokenizer.json").write_text('{"model": 3}')
    with pytest.raises(InputError, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path)
