"""Generation ▸ Rank drafts: the ranking of `specdec rank-drafts`, measured in the app for the loaded verifier."""

from __future__ import annotations


def test_rank_dialog_ranks_the_loaded_verifiers_drafts_and_frees_the_window(make_window, qtbot, tiny_models_dir,
                                                                           tmp_path):
    w = make_window()
    w.rank_drafts()
    dialog = w.rank_dialog
    dialog.drafts.setText(f"{tiny_models_dir['llama-draft']} {tmp_path / 'no-such-draft'}")
    dialog.gammas.setText("2")
    dialog.max_tokens.setValue(8)
    with qtbot.waitSignal(dialog.ranked, timeout=120_000) as blocker:
        dialog.run_button.click()
        assert w.busy == "rank" and not w.send_button.isEnabled()
    ranking = blocker.args[0]["ranking"]
    # prompt lookup, the tiny draft alone and as a hybrid with prompt lookup, and one that cannot load
    assert dialog.table.rowCount() == 4
    assert {row["draft"] for row in ranking} >= {"prompt lookup"}
    assert {row["kind"] for row in ranking if "speedup" in row} == {"prompt-lookup", "model", "hybrid"}
    measured = [row for row in ranking if "speedup" in row]
    assert len(measured) == 3 and [r["speedup"] for r in measured] == sorted((r["speedup"] for r in measured),
                                                                            reverse=True)
    assert any("could not load" in row["verdict"] for row in ranking)
    assert dialog.table.item(0, 0).text() == "1" and dialog.table.item(3, 0).text() == "–"
    assert "Fastest here" in dialog.status.text()
    qtbot.waitUntil(lambda: w.busy == "", timeout=5000)
    assert w.send_button.isEnabled()


def test_rank_dialog_says_what_to_do_without_a_loaded_verifier(make_window):
    w = make_window(load=False)
    w.rank_drafts()
    w.rank_dialog.run_button.click()
    assert "Load a verifier first" in w.rank_dialog.status.text()
