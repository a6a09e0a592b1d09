"""benchmarks/auto.py --merge: the note of the auto section says in one sentence which rows
were re-measured alone, and when, however many merges came before."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

import auto  # noqa: E402

BASE = "Zero-search schedules against the peers. Load average 1.2 at the end of the run."


def test_first_merge_adds_one_sentence():
    note = auto._merged_note(BASE, ["dense 128×1024→4096"], "2026-11-24")
    assert note == (BASE + " Re-measured alone (`--merge`, the same rounds and peers): "
                    "dense 128×1024→4096 on 2026-11-24. The other rows are from the full run.")


def test_merges_accumulate_and_a_row_measured_again_moves_to_its_new_date():
    note = auto._merged_note(BASE, ["dense 128×1024→4096"], "2026-11-24")
    note = auto._merged_note(note, ["GEMM 1024", "GEMM 1000"], "2026-11-25")
    note = auto._merged_note(note, ["dense 128×1024→4096"], "2026-11-26")
    assert note.count("Re-measured alone") == 1
    assert note.count("The other rows are from the full run.") == 1
    assert note.endswith("GEMM 1024 on 2026-11-25; GEMM 1000 on 2026-11-25; "
                         "dense 128×1024→4096 on 2026-11-26. The other rows are from the "
                         "full run.")


def test_sentences_of_the_older_form_are_folded_in():
    old = (BASE + " Rows of conv2d 1×256×14×14 1×1→512 re-measured on 2026-11-23 (`--merge`, "
           "the same rounds and peers); the other rows are from the full run.")
    note = auto._merged_note(old, ["dense 128×1024→4096"], "2026-11-24")
    assert "Rows of" not in note
    assert note == (BASE + " Re-measured alone (`--merge`, the same rounds and peers): "
                    "conv2d 1×256×14×14 1×1→512 on 2026-11-23; dense 128×1024→4096 on "
                    "2026-11-24. The other rows are from the full run.")
