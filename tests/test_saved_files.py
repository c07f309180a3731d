"""Files as other programs and people write them: YAML 1.1 surprises in SoC profiles,
duplicate and merge keys; CSVs with a byte-order mark and CRLF line ends."""
from __future__ import annotations

import re

import numpy as np
import pytest

from parapipe._paths import data_dir
from parapipe.cli import main
from parapipe.cost.blocktable import read_block_table
from parapipe.errors import InputError
from parapipe.profiledb.importer import read_long_csv
from parapipe.soc import load_soc

A311D = (data_dir("soc_profiles") / "amlogic_a311d.yaml").read_text()


def _profile(tmp_path, old: str, new: str, count: int = 1) -> str:
    assert A311D.count(old) >= count, old
    path = tmp_path / "soc.yaml"
    path.write_text(A311D.replace(old, new, count))
    return str(path)


@pytest.mark.parametrize("old, new, message", [
    ("    cores: 4\n", "    cores: 010\n",
     "pus.big.cores: '010' has a leading zero (YAML 1.1 reads it as octal 8); write 10 without the leading zero"),
    ("{cpus: [2, 3, 4, 5], threads: 4}", "{cpus: [06, 07, 010], threads: 4}",
     "pus.big.execution.cpus.0: '06' has a leading zero (YAML 1.1 reads it as octal 6); write 6 without"),
    ("{cpus: [2, 3, 4, 5], threads: 4}", "{cpus: [2, 3, 4, 5], threads: 1:30}",
     "pus.big.execution.threads: '1:30' is not a plain decimal number (YAML 1.1 reads it in base 60); write the "
     "number in decimal digits"),
    ("      symmetric: true\n", "      symmetric: yes\n",
     "transfers.pairs.0.symmetric: 'yes' is not true or false (YAML 1.1 would read it as true); write true or false"),
    ("      symmetric: true\n", "      symmetric: off\n", "transfers.pairs.0.symmetric: 'off' is not true or false"),
    ("    cores: 4\n", "    cores: 0x4\n", "pus.big.cores: '0x4' is not a plain decimal integer"),
])
def test_yaml11_numbers_and_booleans_are_refused_naming_the_field(tmp_path, old, new, message):
    path = _profile(tmp_path, old, new)
    with pytest.raises(InputError) as err:
        load_soc(path)
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)


def test_plain_values_still_load_and_strings_keep_their_text(tmp_path):
    path = tmp_path / "soc.yaml"
    path.write_text(re.sub(r"description: >-\n(  .*\n)+", "description: on\n", A311D, count=1))
    soc = load_soc(str(path))
    assert soc.description == "on" and soc.pus["big"].cores == 4 and soc.pus["big"].execution.cpus == (2, 3, 4, 5)


def test_duplicate_key_names_both_lines_and_the_field_path(tmp_path):
    lines = A311D.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line == "    cores: 4\n")
    lines.insert(at + 1, "    cores: 8\n")
    path = tmp_path / "dup.yaml"
    path.write_text("".join(lines))
    with pytest.raises(InputError) as err:
        load_soc(str(path))
    assert str(err.value) == (f"{path}: pus.big.cores: duplicate key 'cores' (lines {at + 1} and {at + 2}); "
                              "keep one of them")


def test_merge_keys_load(tmp_path):
    text = A311D.replace("  little:\n    kind: cpu\n    cores: 2\n", "  little:\n    <<: *big\n    cores: 2\n")
    text = text.replace("  big:\n", "  big: &big\n", 1)
    assert text != A311D
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    soc, plain = load_soc(str(path)), load_soc("amlogic_a311d")
    assert soc.pus["little"].kind == "cpu" and soc.pus["little"].cores == 2
    assert soc.pus["little"].frequency_hz == plain.pus["little"].frequency_hz  # explicit keys win


# ------------------------------------------------------------------------------------ CSVs from spreadsheets
def _excel(text: str) -> bytes:
    return b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()


def test_block_table_with_bom_and_crlf(tmp_path):
    soc = load_soc("amlogic_a311d")
    text = "block,deps,out_bytes,t_big,t_gpu\nconv1,,802816,0.0121,0.0093\nfc,conv1,4000,0.002,\n"
    plain, saved = tmp_path / "plain.csv", tmp_path / "excel.csv"
    plain.write_text(text)
    saved.write_bytes(_excel(text))
    a, b = read_block_table(plain, soc), read_block_table(saved, soc)
    assert a.block_names == b.block_names == ["conv1", "fc"] and a.preds == b.preds
    assert np.array_equal(a.time_s, b.time_s) and a.edge_nbytes == b.edge_nbytes == {(0, 1): 802816.0}


def test_import_csv_with_bom_and_crlf(tmp_path):
    soc = load_soc("amlogic_a311d")
    text = "graph,pu,block,time_ms,deps\ng,big,a,10,\ng,gpu,a,8,\ng,big,b,4,a\n"
    saved = tmp_path / "long.csv"
    saved.write_bytes(_excel(text))
    (graph,) = read_long_csv(saved, soc)
    assert graph.problem.block_names == ["a", "b"] and graph.problem.preds == [(), (0,)]
    assert graph.problem.time_s[0, graph.problem.pu_names.index("gpu")] == pytest.approx(0.008)


def test_mapping_list_file_with_bom_and_crlf(tmp_path, capsys):
    blocks = tmp_path / "t.csv"
    blocks.write_bytes(_excel("block,deps,out_bytes,t_big,t_gpu\na,,100,0.01,0.02\nb,a,100,0.01,0.005\n"))
    runs = tmp_path / "runs.txt"
    runs.write_bytes(_excel("big,big\nbig,gpu\n"))
    assert main(["evaluate", "--blocks", str(blocks), "--soc", "amlogic_a311d", "--mapping", str(runs),
                 "--json"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(rows) == 2 and '"mapping": "big,gpu"' in rows[1]
