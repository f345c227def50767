"""Importers: each source format on small hand-made files (JSONL and parquet)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trajval_ops.pools.answers import extract_answer
from trajval_ops.pools.identity import PROMPT_HASH, TASK_ID, prompt_hash
from trajval_ops.pools.importers import import_pool
from trajval_ops.pools.io import read_rows
from trajval_ops.errors import TrajvalInputError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import import_pool as import_pool_cli  # noqa: E402


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def dapo_rows(problems: int = 3, copies: int = 4) -> list:
    """DAPO-Math-17k style: each problem repeated, each copy with its own uuid."""
    rows = []
    for copy in range(copies):
        for k in range(problems):
            rows.append({
                "data_source": "math_dapo",
                "prompt": [{"role": "user", "content": f"Solve the following math problem: {k} + 40 = ?\n\nAnswer: $Answer"}],
                "ability": "MATH",
                "reward_model": {"ground_truth": str(k + 40), "style": "rule-lighteval/MATH_v2"},
                "extra_info": {"index": f"uuid-{k}-{copy}"},
            })
    return rows


def run_import(tmp_path: Path, rows_or_file, name="in.jsonl", **kwargs):
    source = rows_or_file if isinstance(rows_or_file, Path) else write_jsonl(tmp_path / name, rows_or_file)
    out = tmp_path / "out.jsonl"
    report = import_pool(str(source), str(out), progress=False, **kwargs)
    return list(read_rows(out)), report


def test_dapo_duplicates_removed_first_copy_kept_and_counted(tmp_path):
    rows, report = run_import(tmp_path, dapo_rows(3, 4))
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["40", "41", "42"]
    assert [r[TASK_ID] for r in rows] == ["uuid-0-0", "uuid-1-0", "uuid-2-0"]
    assert (report.rows_read, report.rows_written, report.duplicates_removed) == (12, 3, 9)
    assert report.max_copies_of_one_prompt == 4
    # originals kept untouched
    assert rows[0]["extra_info"] == {"index": "uuid-0-0"}
    assert rows[0]["reward_model"]["style"] == "rule-lighteval/MATH_v2"
    assert rows[0]["ability"] == "MATH"
    assert rows[0][PROMPT_HASH] == prompt_hash(rows[0]["prompt"])
    saved = json.loads((tmp_path / "out.jsonl.report.json").read_text())
    assert saved["duplicates_removed"] == 9


def test_parquet_gives_the_same_pool_as_jsonl(tmp_path):
    from_jsonl, _ = run_import(tmp_path, dapo_rows(3, 2))
    parquet = write_parquet(tmp_path / "dapo.parquet", dapo_rows(3, 2))
    from_parquet, report = run_import(tmp_path, parquet)
    assert report.format["name"] == "verl"
    assert from_parquet == from_jsonl


def test_guru_json_string_fields_and_dict_ground_truth(tmp_path):
    zebra = {"header": ["House", "Name"], "rows": [["1", "Eric"], ["2", "Arnold"]]}
    source = [
        {"data_source": "zebra_puzzle", "prompt": [{"role": "user", "content": "Who lives in house 1?"}],
         "ability": "logic", "reward_model": json.dumps({"style": "rule", "ground_truth": zebra}),
         "extra_info": json.dumps({"id": "zebra-7", "split": "train"})},
        {"data_source": "ordering_puzzle", "prompt": [{"role": "user", "content": "Order them."}],
         "ability": "logic", "reward_model": json.dumps({"style": "rule", "ground_truth": "['a', 'b']"}),
         "extra_info": json.dumps({"id": "order-3"})},
    ]
    rows, report = run_import(tmp_path, write_parquet(tmp_path / "guru.parquet", source), format_name="guru")
    assert [r[TASK_ID] for r in rows] == ["zebra-7", "order-3"]
    # reward_model decoded to a dict; a non-string ground truth becomes compact sorted JSON
    assert json.loads(rows[0]["reward_model"]["ground_truth"]) == zebra
    assert rows[1]["reward_model"] == {"style": "rule", "ground_truth": "['a', 'b']"}
    # extra_info is kept as it was (a JSON string)
    assert rows[0]["extra_info"] == source[0]["extra_info"]
    assert report.ids_from_field == 2


def test_openrlhf_string_prompt_hash_ids_and_position_fallback(tmp_path):
    source = [{"input": "What is 2+3?", "label": "5", "datasource": "toy"},
              {"input": "What is 2+4?", "label": "6", "datasource": "toy"},
              {"input": "What is 2+3?", "label": "5", "datasource": "toy"}]
    rows, report = run_import(tmp_path, source)
    assert report.format["name"] == "openrlhf"
    assert len(rows) == 2 and report.duplicates_removed == 1
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is 2+3?"}]
    assert rows[0]["input"] == "What is 2+3?" and rows[0]["label"] == "5"
    assert rows[0]["reward_model"]["ground_truth"] == "5"
    assert rows[0]["data_source"] == "toy"
    # no id field: the content hash, the same one a chat-list copy of the prompt gets
    assert rows[0][TASK_ID] == prompt_hash([{"role": "user", "content": "What is 2+3?"}])
    assert rows[0]["extra_info"] == {"index": rows[0][TASK_ID]}
    positional, _ = run_import(tmp_path, source, id_fallback="position")
    assert [r[TASK_ID] for r in positional] == ["row-0", "row-1"]


def test_gsm8k_final_answer_marker(tmp_path):
    source = [{"question": "Natalia sold 48 clips...", "answer": "48 + 24 = 72\n#### 72"},
              {"question": "A farm has many cows...", "answer": "so\n#### 1,234"}]
    rows, _ = run_import(tmp_path, source, format_name="gsm8k")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["72", "1234"]
    assert rows[0]["answer"] == "48 + 24 = 72\n#### 72"  # original kept


@pytest.mark.parametrize("answer,truth", [
    ("1,234,567", "1234567"), ("-1,200", "-1200"), ("12,345.5", "12345.5"), ("72", "72"), ("1000", "1000"),
    ("(2, 3)", "(2, 3)"), ("2,3", "2,3"), ("1,23", "1,23"), ("1,2345", "1,2345"), ("x, y", "x, y"),
])
def test_gsm8k_removes_only_thousands_commas(answer, truth):
    assert extract_answer(f"work\n#### {answer}", "gsm8k") == truth


def test_gsm8k_answer_without_marker_names_row_and_field(tmp_path):
    source = [{"question": "q0", "answer": "#### 1"}, {"question": "q1", "answer": "the answer is 3"}]
    with pytest.raises(TrajvalInputError, match=r"row 1.*'answer'.*####"):
        run_import(tmp_path, source, format_name="gsm8k")


def test_open_r1_prefers_answer_and_boxes_solutions(tmp_path):
    source = [{"problem": "Half of one?", "solution": "We get \\boxed{\\frac{1}{2}}.", "uuid": "u1"},
              {"problem": "Two squared?", "solution": "so \\boxed{4}", "answer": "4", "uuid": "u2"}]
    rows, report = run_import(tmp_path, source)
    assert report.format["name"] == "open-r1"
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["\\frac{1}{2}", "4"]
    assert [r[TASK_ID] for r in rows] == ["u1", "u2"]


def test_open_r1_solution_marking_no_answer_is_refused_not_taken_whole(tmp_path):
    """A worked solution with neither `####` nor a box was the whole ground truth, and the verifier
    read some number of the working as the answer (12 here, where 5 is right)."""
    source = [{"problem": "Half of one?", "solution": "so \\boxed{\\frac{1}{2}}", "uuid": "u1"},
              {"problem": "Apples?", "solution": "2+3=5 apples, 7 fewer than Ann's 12.", "uuid": "u2"}]
    with pytest.raises(TrajvalInputError, match=r"row 1: ground-truth field 'solution' is a worked "
                                                r"solution that marks no final answer"):
        run_import(tmp_path, source)
    assert not (tmp_path / "out.jsonl").exists()
    source[1]["answer"] = "5"  # a short answer is taken as it is
    rows, _ = run_import(tmp_path, source)
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["\\frac{1}{2}", "5"]


def test_a_rows_own_source_field_wins_over_data_source(tmp_path):
    """`--data-source` is for rows that have none: a mixed pool's own labels pick verl's reward
    function, and were overwritten by it before 2026-11-27."""
    source = [{"input": "What is 2+2?", "label": "4", "datasource": "gsm8k"},
              {"input": "What is 3+3?", "label": "6"}]
    rows, _ = run_import(tmp_path, source, data_source="fallback")
    assert [r["data_source"] for r in rows] == ["gsm8k", "fallback"]


def test_a_format_name_is_no_data_source(tmp_path, capsys):
    """verl picks a row's reward by data_source: Polaris rows (problem, answer, difficulty) were
    labelled 'open-r1', the name of the format that reads them, which names no reward verl has.
    A row's own is kept, --data-source sets the others', and rows left without one are counted."""
    polaris = [{"problem": "What is 2+3?", "answer": "5", "difficulty": "7/8"},
               {"problem": "What is 2+4?", "answer": "6", "difficulty": "3/8", "data_source": "mine"}]
    rows, report = run_import(tmp_path, polaris)
    assert report.format["name"] == "open-r1"
    assert [r.get("data_source") for r in rows] == [None, "mine"] and report.rows_without_data_source == 1
    rows, report = run_import(tmp_path, polaris, data_source="math_dapo")
    assert [r["data_source"] for r in rows] == ["math_dapo", "mine"] and report.rows_without_data_source == 0
    path = write_jsonl(tmp_path / "polaris.jsonl", polaris)
    argv = [str(path), str(tmp_path / "cli.jsonl"), "--data-source", "math_dapo", "--no-progress"]
    assert import_pool_cli.main(argv) == 0, capsys.readouterr().err
    assert [r["data_source"] for r in read_rows(tmp_path / "cli.jsonl")] == ["math_dapo", "mine"]


def test_a_null_role_hashes_as_a_missing_one_so_parquet_and_jsonl_agree(tmp_path):
    """Parquet stores a role that some messages lack as null; it hashed as the role 'None'."""
    assert prompt_hash([{"content": "q3"}]) == prompt_hash([{"role": None, "content": "q3"}]) == \
        prompt_hash("q3")
    source = [{"prompt": [{"role": "user", "content": "q1"}], "reward_model": {"ground_truth": "1"}},
              {"prompt": [{"content": "q3"}], "reward_model": {"ground_truth": "3"}}]
    from_jsonl, _ = run_import(tmp_path, source)
    from_parquet, _ = run_import(tmp_path, write_parquet(tmp_path / "in.parquet", source))
    assert [r[PROMPT_HASH] for r in from_parquet] == [r[PROMPT_HASH] for r in from_jsonl]


def test_nested_dotted_keys_with_json_string_levels(tmp_path):
    source = [{"meta": {"q": "Capital of France?", "uid": 17}, "target": json.dumps({"value": "Paris"})},
              {"meta": {"q": "Capital of Italy?", "uid": 18}, "target": json.dumps({"value": "Rome"})}]
    rows, _ = run_import(tmp_path, source, format_name="openrlhf", prompt_key="meta.q",
                         answer_key="target.value", id_keys=["meta.uid"])
    assert [r[TASK_ID] for r in rows] == ["17", "18"]
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["Paris", "Rome"]
    assert rows[1]["prompt"][0]["content"] == "Capital of Italy?"


def test_both_keys_need_no_detectable_format(tmp_path, capsys):
    """The documented `--prompt-key meta.question --answer-key meta.final --id-key meta.uid` was
    refused before 2026-11-28: the format was detected (from ['meta']) before the keys applied."""
    source = [{"meta": {"question": "What is 2 + 3?", "final": "5", "uid": "q1"}},
              {"meta": json.dumps({"question": "What is 7 * 6?", "final": 42, "uid": "q2"})}]
    path = write_jsonl(tmp_path / "mine.jsonl", source)
    out = tmp_path / "pools" / "mine.jsonl"
    argv = [str(path), str(out), "--prompt-key", "meta.question", "--answer-key", "meta.final",
            "--id-key", "meta.uid", "--no-progress"]
    assert import_pool_cli.main(argv) == 0, capsys.readouterr().err
    rows = list(read_rows(out))
    assert [r[TASK_ID] for r in rows] == ["q1", "q2"]
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["5", "42"]
    assert rows[1]["prompt"] == [{"role": "user", "content": "What is 7 * 6?"}]
    assert [r.get("data_source") for r in rows] == [None, None]  # none given: none made up
    assert json.loads((tmp_path / "pools" / "mine.jsonl.report.json").read_text())["format"]["name"] == "custom"
    # rows a preset fits keep it with the keys given: GSM8K's answer extraction and name
    gsm8k = [{"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}]
    rows, _ = run_import(tmp_path, gsm8k, prompt_key="question", answer_key="answer")
    assert "data_source" not in rows[0] and rows[0]["reward_model"]["ground_truth"] == "5"


def test_one_key_alone_still_needs_a_detectable_format(tmp_path):
    with pytest.raises(TrajvalInputError, match="both --prompt-key and --answer-key"):
        run_import(tmp_path, [{"meta": {"question": "q", "final": "1"}}], prompt_key="meta.question")


@pytest.mark.parametrize("bad", [{}, {"ground_truth": None}, {"ground_truth": "   "}])
def test_missing_ground_truth_names_row_and_field_and_writes_nothing(tmp_path, bad):
    source = dapo_rows(2, 1)
    source[1]["reward_model"] = bad
    with pytest.raises(TrajvalInputError, match=r"row 1 \(extra_info.index='uuid-1-0'\).*reward_model.ground_truth"):
        run_import(tmp_path, source)
    assert not (tmp_path / "out.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl"]  # no temp file left behind


def test_cli_exit_code_and_message_on_missing_ground_truth(tmp_path, capsys):
    source = [{"input": "q0", "label": "1"}, {"input": "q1"}]
    path = write_jsonl(tmp_path / "in.jsonl", source)
    code = import_pool_cli.main([str(path), str(tmp_path / "out.jsonl"), "--no-progress"])
    assert code == 2
    assert "row 1" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_imports_and_reports(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", dapo_rows(2, 3))
    assert import_pool_cli.main([str(path), str(tmp_path / "o.jsonl"), "--no-progress"]) == 0
    assert "written 2, duplicates removed 4" in capsys.readouterr().out


def test_duplicate_prompt_with_other_ground_truth(tmp_path):
    source = dapo_rows(2, 2)
    source[3]["reward_model"]["ground_truth"] = "999"
    with pytest.raises(TrajvalInputError, match=r"row 3.*same prompt as row 1.*'999'"):
        run_import(tmp_path, source)
    rows, report = run_import(tmp_path, source, on_conflict="keep-first")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["40", "41"]
    assert report.duplicate_ground_truth_conflicts == 1


def test_one_id_on_two_different_prompts_is_an_error(tmp_path):
    source = [{"input": "q0", "label": "1", "id": "same"}, {"input": "q1", "label": "2", "id": "same"}]
    with pytest.raises(TrajvalInputError, match=r"row 1.*'same'.*row 0"):
        run_import(tmp_path, source)
    rows, _ = run_import(tmp_path, source, id_keys=())
    assert len({r[TASK_ID] for r in rows}) == 2


def test_a_dropped_copys_id_on_another_prompt_is_an_error(tmp_path, capsys):
    """P/id 1, P/id 2, Q/id 2: the dropped copy's id 2 names P (the duplicates file says it became
    id 1), so Q under id 2 is one id on two different prompts, in either order."""
    def row(prompt, truth, index):
        return {"prompt": prompt, "reward_model": {"ground_truth": truth}, "extra_info": {"index": index}}

    source = [row("P", "1", "1"), row("P", "1", "2"), row("Q", "9", "2")]
    with pytest.raises(TrajvalInputError, match=r"row 2 \(extra_info.index='2'\): task id '2' already belongs to "
                                                r"the different prompt of row 1"):
        run_import(tmp_path, source)
    with pytest.raises(TrajvalInputError, match=r"row 2 \(extra_info.index='2'\): task id '2' already belongs to "
                                                r"the different prompt of row 0"):
        run_import(tmp_path, [source[2], source[0], source[1]])
    path = write_jsonl(tmp_path / "in.jsonl", source)
    assert import_pool_cli.main([str(path), str(tmp_path / "o.jsonl"), "--no-progress"]) == 2
    assert "task id '2' already belongs" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def test_malformed_jsonl_line_and_empty_pool(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": "q", "label": "1"}\n{"input": \n', encoding="utf-8")
    with pytest.raises(TrajvalInputError, match=r"line 2 \(row 1\)"):
        run_import(tmp_path, path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(TrajvalInputError, match="empty"):
        run_import(tmp_path, empty)


def test_prompt_hash_ignores_container_and_outer_whitespace():
    chat = [{"role": "user", "content": "What is 1+1?"}]
    assert prompt_hash("  What is 1+1?\n") == prompt_hash(chat) == prompt_hash(json.dumps(chat))
    assert prompt_hash("What is 1+2?") != prompt_hash(chat)
    assert prompt_hash([{"role": "system", "content": "x"}, *chat]) != prompt_hash(chat)
    with pytest.raises(ValueError):
        prompt_hash("")


def test_a_string_prompt_that_is_a_json_array_of_non_messages_is_text(tmp_path):
    """OpenRLHF {"input": "[3, 1, 2]"} is a question, not a chat list; JSON-string chats still decode."""
    rows, _ = run_import(tmp_path, [{"input": "[3, 1, 2]", "label": "[1, 2, 3]"}, {"input": " [] ", "label": "0"},
                                    {"input": '["a", {"role": "user"}]', "label": "1"}])
    assert [r["prompt"] for r in rows] == [[{"role": "user", "content": "[3, 1, 2]"}], [{"role": "user", "content": "[]"}],
                                           [{"role": "user", "content": '["a", {"role": "user"}]'}]]
    assert rows[0][PROMPT_HASH] == prompt_hash([{"role": "user", "content": "[3, 1, 2]"}])
    chat = [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Q1"}]
    # a chat list as a JSON string: the hash it always had (pinned), the chat list's
    assert prompt_hash(json.dumps(chat)) == prompt_hash(chat) == "2b1ecc2f9fec9e6a4159215018f9eea3"
    with pytest.raises(ValueError, match="no string 'content'"):
        prompt_hash('[{"role": "user"}]')  # a chat list with a broken message is still refused


def test_a_string_prompt_that_is_a_json_array_of_plain_objects_is_imported_as_text(tmp_path):
    """docs/pools.md: only an array of message objects is a chat; before, this row was refused."""
    text = '[{"name": "Ann", "age": 3}]'
    rows, _ = run_import(tmp_path, [{"input": text, "label": "3"}])
    assert rows[0]["prompt"] == [{"role": "user", "content": text}]
    assert rows[0][PROMPT_HASH] == prompt_hash(text)


def test_extract_answer_boxed_nesting():
    assert extract_answer("a \\boxed{1} then \\boxed{\\frac{a}{b}}", "boxed") == "\\frac{a}{b}"
    with pytest.raises(ValueError):
        extract_answer("\\boxed{1", "boxed")


def test_pool_modules_do_not_import_data_juicer():
    import subprocess

    code = ("import sys, trajval_ops.pools.importers, trajval_ops.pools.transfer, trajval_ops.pools.generate; "
            "sys.exit('data_juicer' in sys.modules or 'reasoning_gym' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1]).returncode == 0


def test_collapsed_ids_are_listed_in_a_side_file(tmp_path):
    rows, report = run_import(tmp_path, dapo_rows(2, 3))
    assert report.ids_collapsed == 4
    side = [json.loads(line) for line in (tmp_path / "out.jsonl.duplicates.jsonl").read_text().splitlines()]
    assert side[0] == {"dropped_row": 2, "dropped_id": "uuid-0-1", "kept_row": 0, "kept_id": "uuid-0-0",
                       "prompt_hash": rows[0][PROMPT_HASH]}
    assert {r["dropped_id"] for r in side} == {"uuid-0-1", "uuid-1-1", "uuid-0-2", "uuid-1-2"}


def test_on_duplicate_error_names_both_rows(tmp_path):
    with pytest.raises(TrajvalInputError, match=r"row 2 \(.*'uuid-0-1'\): same prompt as row 0 \(task id 'uuid-0-0'\) "
                                                 r"under another id 'uuid-0-1'"):
        run_import(tmp_path, dapo_rows(2, 2), on_duplicate="error")
    assert not (tmp_path / "out.jsonl").exists()


def test_identical_copies_under_one_id_are_no_collapse(tmp_path):
    row = dapo_rows(1, 1)[0]
    _, report = run_import(tmp_path, [row, row])
    assert report.duplicates_removed == 1 and report.ids_collapsed == 0


@pytest.mark.parametrize("content,message", [
    (b'{"prompt": "1+1?", "reward_model": {"ground_truth": "2"}}\n{"prompt": "\xe9t\xe9"}\n',
     "line 2 (row 1) is not valid UTF-8: byte 12 of the line (byte offset 70 in the file)"),
    (b'{"prompt": "1+1?", "reward_model": {"ground_truth": "2"}}\nnull\n', "line 2 (row 1) is null, not a JSON object"),
])
def test_cli_names_file_line_and_byte_of_bad_input(tmp_path, capsys, content, message):
    source = tmp_path / "bad.jsonl"
    source.write_bytes(content)
    assert import_pool_cli.main([str(source), str(tmp_path / "out.jsonl"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{source}: {message}" in err and "Traceback" not in err


def test_a_pool_with_a_byte_order_mark_imports_as_it_would_without(tmp_path):
    """import-pool refused a UTF-8 JSONL beginning with a byte-order mark (line 1 "is not valid
    JSON: Unexpected UTF-8 BOM"), whether it sniffed the format or was told it."""
    plain = write_jsonl(tmp_path / "plain.jsonl", dapo_rows())
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    expected, _ = run_import(tmp_path / "a", plain)
    assert run_import(tmp_path / "b", marked)[0] == expected
    assert import_pool_cli.main([str(marked), str(tmp_path / "cli.jsonl"), "--format", "dapo", "--no-progress"]) == 0
    assert list(read_rows(tmp_path / "cli.jsonl")) == expected
