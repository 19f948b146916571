"""docs/OPS.md is the op table's reference page, kept in sync by this test."""

import re

import accy
from accy import ops_doc
from accy.ir.ops import DOC, Op


def test_ops_md_is_generated_from_the_op_table():
    text = ops_doc.markdown()
    current = ops_doc.PATH.read_text() if ops_doc.PATH.exists() else ""
    assert current == text, f"docs/OPS.md is stale: regenerate it with `{ops_doc.COMMAND}`"


def test_every_op_has_a_row_a_meaning_and_a_builder_spelling():
    text = ops_doc.markdown()
    for op in Op:
        assert DOC[op].strip() and ops_doc.BUILDER[op].strip()
        assert f"| `{op.value}` |" in text


def test_builder_spellings_name_real_top_level_functions():
    named = set()
    for spelling in ops_doc.BUILDER.values():
        named |= set(re.findall(r"accy\.(\w+)\(", spelling))
    assert named, "the spellings name accy functions"
    assert not [n for n in sorted(named) if not callable(getattr(accy, n, None))]


def test_check_flag_reports_a_stale_file(tmp_path, capsys):
    out = tmp_path / "OPS.md"
    out.write_text("old\n")
    assert ops_doc.main(["--check", "--out", str(out)]) == 1
    assert "python -m accy.ops_doc" in capsys.readouterr().err
    assert ops_doc.main(["--out", str(out)]) == 0
    assert ops_doc.main(["--check", "--out", str(out)]) == 0
    assert out.read_text() == ops_doc.markdown()
