"""biotf.untrusted: files a user hands biotf become plain values of the expected shape, or one line naming the file
(the CLI-level cases are in tests/reliability: test_bad_files.py's crafted JSON, test_safe_loading.py)."""

from __future__ import annotations

import pickle

import pytest
import torch

from biotf.errors import CheckpointError, InputError
from biotf.untrusted import load_tensors, parse_json_object, read_json_object


@pytest.mark.parametrize("text, reason", [
    ("[" * 200_000, "nested too deeply"),  # RecursionError inside json
    ('{"a": ' * 5000 + "1" + "}" * 5000, "nested too deeply"),
    ("", "not valid JSON"),
    ('{"a": 1', "not valid JSON"),
    ("9" * 5000, "not valid JSON"),  # int() refuses more than 4300 digits: a ValueError that is no JSONDecodeError
    ("[1]", "expected a JSON object, found an array"),
    ('"text"', "expected a JSON object, found a string"),
    ("null", "expected a JSON object, found null"),
])
def test_what_is_no_json_object_is_one_line_naming_the_file(tmp_path, text, reason):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CheckpointError) as refused:
        read_json_object(path, "model config", CheckpointError)
    message = str(refused.value)
    assert message.startswith(f"cannot read model config {path}: {reason}") and "\n" not in message, message


def test_unreadable_and_non_utf8_files(tmp_path):
    with pytest.raises(InputError, match=f"cannot read tokenizer file {tmp_path / 'missing.json'}: No such file"):
        read_json_object(tmp_path / "missing.json", "tokenizer file")
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(InputError, match="latin1.json: not UTF-8 text .* at byte 13"):
        read_json_object(tmp_path / "latin1.json", "tokenizer file")


@pytest.mark.parametrize("value, expected, message", [
    (None, dict, "'field' is null, expected an object"),
    ([1], dict, "'field' is an array, expected an object"),
    (True, int, "'field' is true or false, expected an integer"),  # a bool is an int to Python, not to a config
    ("7", int, "'field' is a string, expected an integer"),
    (32.5, int, "'field' is 32.5, expected an integer"),
    (1.5, (str, type(None)), "'field' is a number, expected a string or null"),
])
def test_fields_of_the_wrong_type_are_named(value, expected, message):
    import json

    with pytest.raises(InputError, match=f"cannot read task file x.json: {message}$"):
        parse_json_object(json.dumps({"field": value}), "x.json", "task file", types={"field": expected})


def test_the_right_types_pass_and_required_keys_are_checked():
    text = '{"n": 3, "flag": true, "name": null}'
    assert parse_json_object(text, "x", "f", types={"n": int, "flag": bool, "name": (str, type(None)),
                                                    "absent": dict}) == {"n": 3, "flag": True, "name": None}
    with pytest.raises(InputError, match="no 'model', 'task'"):
        parse_json_object(text, "x", "f", required=["n", "model", "task"])


class Code:
    def __reduce__(self):
        return print, ("unpickled",)


@pytest.mark.parametrize("write", [
    lambda path: torch.save({"weights": Code()}, path),  # the zip format
    lambda path: path.write_bytes(pickle.dumps({"weights": Code()}, protocol=4)),  # a bare pickle, newer protocol
])
def test_a_pickle_with_code_is_refused_in_one_line(tmp_path, recwarn, capsys, write):
    path = tmp_path / "weights.bin"
    write(path)
    with pytest.raises(CheckpointError) as refused:
        load_tensors(path, "weights")
    message = str(refused.value)
    assert message.startswith(f"cannot read weights {path} as plain tensors and values (torch: Unsupported ")
    assert message.endswith("refused, since unpickling anything else could run code") and "\n" not in message
    assert "weights_only" not in message and "\x1b" not in message
    assert not [w for w in recwarn if "pickle protocol" in str(w.message)]  # torch's warning says nothing more
    assert "unpickled" not in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 4, b"hello\n"])
def test_a_file_that_is_no_torch_file_is_one_line(tmp_path, content):
    path = tmp_path / "model.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=f"^cannot read checkpoint {path}[^\n]+$"):
        load_tensors(path, "checkpoint")


def test_tensors_and_plain_values_load(tmp_path):
    torch.save({"w": torch.ones(2), "step": 3, "name": "x"}, tmp_path / "ok.pt")
    loaded = load_tensors(tmp_path / "ok.pt", "checkpoint", map_location="cpu")
    assert loaded["step"] == 3 and torch.equal(loaded["w"], torch.ones(2))


def test_finite_weights_whose_sum_overflows_pass_and_one_non_finite_element_is_refused():
    from biotf.untrusted import check_finite

    large = torch.full((64,), 60000.0, dtype=torch.float16)  # finite, but their float16 sum is an infinity
    assert torch.isinf(large.sum())
    check_finite([("large", large), ("empty", torch.empty(0))], "weights.safetensors")
    for value, kind in ((float("nan"), "NaN"), (float("inf"), "an infinity"), (float("-inf"), "an infinity")):
        damaged = torch.zeros(1000)
        damaged[517] = value
        with pytest.raises(CheckpointError, match=f"tensor damaged holds {kind}"):
            check_finite([("fine", torch.ones(3)), ("damaged", damaged)], "weights.safetensors")
