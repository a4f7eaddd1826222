"""Replies decoded in a forked child process (app/host.py): the same events as in the app's own process, the
window's cancel and speculation switch reach the child, errors arrive as errors, and a dead child is said."""

from __future__ import annotations

import os
import signal
import struct
import sys

import pytest

from app.host import HostKeeper, ReplyHost, run_here, why_not
from app.runs import race_events
from app.session import LoadRequest, PromptInfo, load_session, reply_events
from specdec_core.config import GenerationConfig
from specdec_core.defaults import MODEL
from specdec_core.engine import Controls
from specdec_core.errors import SpecdecError
from specdec_core.events import Finished, RoundVerified, StopReason

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the host forks: Linux only")
MESSAGES = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def one_thread():
    """PyTorch at one thread per pass, as the app runs on a 2-core CPU (the host's condition)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def session(tiny_models_dir, one_thread):
    request = LoadRequest(verifier=str(tiny_models_dir["llama-verifier"]), draft=str(tiny_models_dir["llama-draft"]),
                          drafter=MODEL, device="cpu", dtype="float32", calibrate=False)
    return load_session(request, lambda step: None, lambda: False)


@pytest.fixture
def host(session):
    host = ReplyHost(session)
    assert host.start(), host.failure
    yield host
    host.close()


def _reply(events) -> tuple[list, Finished]:
    evs = list(events)
    assert isinstance(evs[-1], Finished)
    return evs, evs[-1]


def test_a_hosted_greedy_reply_is_the_reply_decoded_in_the_app(session, host):
    config = GenerationConfig(max_new_tokens=16, gamma=3, tree_nodes=0)
    here, here_end = _reply(reply_events(session, MESSAGES, None, config, Controls()))
    there, there_end = _reply(host.run(reply_events, (MESSAGES, None, config), Controls()))
    assert isinstance(there[0], PromptInfo) and there[0] == here[0]
    assert there_end.token_ids == here_end.token_ids and there_end.text == here_end.text
    assert any(isinstance(ev, RoundVerified) and ev.drafted for ev in there)  # it speculated there too
    assert host.last_reply is not None and 0 < host.last_reply.cpu_s <= host.last_reply.wall_s * 1.5


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"),
                    reason="needs /proc/PID/task/PID/children")
def test_the_child_renders_chat_templates_with_the_apps_renderer_and_starts_no_process_of_its_own(
        session, host, monkeypatch):
    import app.host as host_module

    asked = []
    answer = host_module._render_for
    monkeypatch.setattr(host_module, "_render_for", lambda conn, request, *a: (asked.append(request), answer(
        conn, request, *a))[1])
    config = GenerationConfig(max_new_tokens=8, gamma=3, tree_nodes=0)
    here, _ = _reply(reply_events(session, MESSAGES, None, config, Controls()))
    there, _ = _reply(host.run(reply_events, (MESSAGES, None, config), Controls()))
    assert there[0] == here[0]  # the same prompt, rendered by the app for the child
    assert len(asked) == 1 and _children(host._process.pid) == []


def test_the_windows_cancel_and_speculation_switch_reach_the_child(host):
    config = GenerationConfig(max_new_tokens=40, gamma=3, tree_nodes=0)
    off = Controls(speculate=False)
    evs, end = _reply(host.run(reply_events, (MESSAGES, None, config), off))
    assert all(not ev.drafted for ev in evs if isinstance(ev, RoundVerified))

    controls = Controls()
    controls.cancel()  # the window's Stop (a tiny model would finish before a cancel sent midway arrived)
    _evs, end = _reply(host.run(reply_events, (MESSAGES, None, config), controls))
    assert end.stop_reason is StopReason.CANCELLED and len(end.token_ids) < 40
    _evs, end = _reply(host.run(reply_events, (MESSAGES, None, config), Controls()))  # the next reply runs in full
    assert end.stop_reason is not StopReason.CANCELLED


def test_a_reply_left_midway_does_not_leak_into_the_next(host):
    config = GenerationConfig(max_new_tokens=30, gamma=3, tree_nodes=0)
    events = host.run(reply_events, (MESSAGES, None, config), Controls())
    next(events), next(events)
    events.close()  # its consumer stopped reading
    evs, end = _reply(host.run(reply_events, (MESSAGES, None, config), Controls()))
    assert isinstance(evs[0], PromptInfo) and end.stop_reason is not StopReason.CANCELLED


def test_an_error_in_the_child_arrives_as_the_same_error(session, host):
    config = GenerationConfig(max_new_tokens=4, stop_strings=("x",))
    huge = [{"role": "user", "content": "word " * 5000}]  # longer than the tiny verifier's context
    with pytest.raises(SpecdecError) as here:
        list(reply_events(session, huge, None, config, Controls()))
    with pytest.raises(SpecdecError) as there:
        list(host.run(reply_events, (huge, None, config), Controls()))
    assert type(there.value) is type(here.value) and str(there.value) == str(here.value)
    _evs, end = _reply(host.run(reply_events, (MESSAGES, None, GenerationConfig(max_new_tokens=4)), Controls()))
    assert end.stop_reason is not StopReason.ERROR


def test_a_child_that_died_is_said_and_the_keeper_decodes_in_the_app_from_then_on(session):
    keeper = HostKeeper()
    try:
        run = keeper.runner(session)
        host = keeper.host
        assert host is not None and run == host.run
        os.kill(host._process.pid, signal.SIGKILL)
        host._process.join(5)
        args = (MESSAGES, None, GenerationConfig(max_new_tokens=4))
        with pytest.raises(SpecdecError, match="decoding process"):
            list(run(reply_events, args, Controls()))
        again = keeper.runner(session)
        assert keeper.host is None and "app's process" in keeper.note
        _evs, end = _reply(again(reply_events, args, Controls()))
        assert end.stop_reason is not StopReason.ERROR
    finally:
        keeper.close()


def test_the_keeper_forks_again_for_another_session_or_head_and_never_while_the_head_adapts(session):
    keeper = HostKeeper()
    try:
        keeper.runner(session)
        first = keeper.host
        keeper.runner(session)
        assert keeper.host is first  # the same session and head: the same child
        keeper.runner(session, head_version=5)
        assert keeper.host is not first and keeper.host is not None and not first.alive
        keeper.runner(session, head_version=5, adapting=True)
        assert keeper.host is None and "adapts" in keeper.note
    finally:
        keeper.close()


def test_where_a_child_cannot_be_forked_safely_the_reason_is_given(session, monkeypatch):
    import torch

    assert why_not(session) is None
    monkeypatch.setenv("SPECDEC_HOST", "0")
    assert "SPECDEC_HOST=0" in why_not(session)
    monkeypatch.delenv("SPECDEC_HOST")
    monkeypatch.setattr(session.verifier, "device", torch.device("meta"))
    assert "meta" in why_not(session)


def test_a_child_runs_the_apps_threads_per_pass_though_the_app_ran_parallel_products_before(session):
    """An OpenMP pool does not survive a fork: forked by a thread that ran parallel regions, the child would hang
    at its first one. The host forks from a fresh thread, so this thread's pool does not matter."""
    import torch

    torch.set_num_threads(2)
    for _ in range(3):
        torch.ones(256, 256) @ torch.ones(256, 256)  # this thread now owns a pool of 2
        torch.ones(1 << 18).add_(1)
    config = GenerationConfig(max_new_tokens=12, gamma=3, tree_nodes=0)
    _evs, here = _reply(reply_events(session, MESSAGES, None, config, Controls()))
    host = ReplyHost(session)
    try:
        assert host.start(), host.failure
        assert host.threads == 2
        _evs, there = _reply(host.run(reply_events, (MESSAGES, None, config), Controls()))
        assert there.token_ids == here.token_ids and there.stop_reason is here.stop_reason
    finally:
        host.close()
        torch.set_num_threads(1)


def test_a_race_decoded_by_the_host_runs_the_same_lanes_as_in_the_app(session, host):
    from app.runs import LaneEvent

    args = (MESSAGES, None, GenerationConfig(max_new_tokens=10, gamma=3, tree_nodes=0), 2)

    def lanes(events) -> dict[str, tuple]:
        evs = list(events)
        assert isinstance(evs[0], PromptInfo) and all(isinstance(e, LaneEvent) for e in evs[1:])
        return {e.lane: e.event.token_ids for e in evs[1:] if isinstance(e.event, Finished)}

    here = lanes(run_here(session, race_events, args, Controls()))
    there = lanes(host.run(race_events, args, Controls()))
    assert there == here and list(there) == ["off", "on", "on 2", "off 2"]  # each pair in turn the other way
    assert len(set(there.values())) == 1  # greedy: every lane writes the same reply


def test_the_window_streams_a_reply_its_host_decodes_and_stops_it_on_close(make_window, send_and_wait, one_thread):
    w = make_window()
    here = send_and_wait(w, "hello there")
    host = w.hosts.host
    assert host is not None and host.alive and "process of their own" in w.hosts.note
    assert host.last_reply is not None and here.tokens and here.stop_reason in ("eos", "max_tokens")
    assert w.chat.bubbles[-1].body.toPlainText().strip()  # what the child decoded reached the chat
    w.new_chat()
    again = send_and_wait(w, "hello there")
    assert w.hosts.host is host and [t.token_id for t in again.tokens] == [t.token_id for t in here.tokens]
    assert "Replies and races decode in a process of their own (1 PyTorch thread)." in w.model_label.toolTip()
    w.close()
    assert w.hosts.host is None and not host.alive


def test_a_hosted_reply_compares_with_runs_the_window_did_not_slow_either(make_window, send_and_wait, one_thread):
    w = make_window(max_new_tokens=12)
    w.spec_button.setChecked(False)
    send_and_wait(w, "hello there")  # speculation off: one more verifier-alone run, decoded by the host
    assert w.hosts.host is not None and w.baselines.samples[-1].graphs_live is False
    w.spec_button.setChecked(True)
    w.new_chat()
    on = send_and_wait(w, "hello there")
    assert "process apart from the window" in on.baseline_source and on.baseline_note.startswith("like for like")


def test_the_windows_race_and_talks_race_decode_in_the_same_child_as_the_replies(make_window, qtbot, one_thread):
    w = make_window(max_new_tokens=12)
    w.composer.setPlainText("Race me")
    with qtbot.waitSignal(w.race_finished, timeout=120_000) as done:
        w.racer.race()
    host = w.hosts.host
    assert host is not None and host.alive and "identical" in done.args[0]  # forked for the race, which ran there
    off, on = w.graphs.race.traces["off"], w.graphs.race.traces["on"]
    assert off.text == on.text and on.speculative and not off.error
    before = host.last_reply
    w.composer.setPlainText("Race me")
    dlg = w.talk.open_race()
    view = dlg.view
    with qtbot.waitSignal(view.finished, timeout=120_000):
        pass
    assert w.hosts.host is host and host.last_reply is not before  # the same child ran it: no second fork
    assert view.result is not None and view.result.spread is not None
    dlg.close()


# ---- a child that stops answering (issue 56) ----------------------------------------------------------


@pytest.fixture
def child_stops_itself(monkeypatch):
    """Replies whose decoding child sends itself SIGSTOP after a few tokens, as a debugger or a suspended
    machine would stop it (the app's process, where replies may also decode, never stops)."""
    import app.session as session_module
    from specdec_core.events import TokenCommitted

    app_pid, real = os.getpid(), session_module.reply_events

    def stopping(*args):
        committed = 0
        for ev in real(*args):
            yield ev
            committed += isinstance(ev, TokenCommitted)
            if committed == 3 and os.getpid() != app_pid:
                os.kill(os.getpid(), signal.SIGSTOP)

    monkeypatch.setattr(session_module, "reply_events", stopping)


def _events_until_stop(run, controls: Controls, config: GenerationConfig) -> list:
    """The reply's events, pressing Stop once three tokens have arrived; the error it ends with is raised."""
    from specdec_core.events import TokenCommitted

    seen = []
    for ev in run(reply_events, (MESSAGES, None, config), controls):
        seen.append(ev)
        if sum(isinstance(e, TokenCommitted) for e in seen) == 3:
            controls.cancel()
    return seen


def test_a_stopped_child_is_ended_after_stop_and_the_next_reply_forks_a_fresh_one(session, child_stops_itself):
    from app.host import Unresponsive

    keeper = HostKeeper()
    try:
        run = keeper.runner(session)
        stuck = keeper.host
        config = GenerationConfig(max_new_tokens=200, gamma=3, tree_nodes=0)
        with pytest.raises(Unresponsive, match="stopped answering .* the reply so far is kept"):
            _events_until_stop(run, Controls(), config)
        assert not stuck.alive and stuck._process is None  # ended: nothing is left stopped behind
        again = keeper.runner(session)
        assert keeper.host is not None and keeper.host is not stuck and keeper.host.alive
        assert "process of their own" in keeper.note
        controls = Controls()
        controls.cancel()
        _evs, end = _reply(again(reply_events, (MESSAGES, None, GenerationConfig(max_new_tokens=4)), controls))
        assert end.stop_reason is StopReason.CANCELLED
    finally:
        keeper.close()


def test_a_child_silent_past_the_limit_is_ended_without_a_stop(session, host, monkeypatch):
    import app.host as host_module

    monkeypatch.setattr(host_module, "SILENT_S", 0.5)
    os.kill(host._process.pid, signal.SIGSTOP)
    with pytest.raises(host_module.Unresponsive, match="no sign of life"):
        list(host.run(reply_events, (MESSAGES, None, GenerationConfig(max_new_tokens=4)), Controls()))
    assert not host.alive and host.unresponsive


def test_a_reply_stopped_while_its_child_is_stopped_keeps_its_text_and_says_so(
        make_window, send_and_wait, qtbot, one_thread, child_stops_itself):
    """Issue 56: after SIGSTOP on the decoding child, Stop left the window "Stopping…" for minutes."""
    from specdec_core.events import TokenCommitted

    w = make_window(max_new_tokens=200)
    committed = []

    def stop_at_the_third_token(ev) -> None:  # the child stops itself once it has sent it
        committed.extend([ev] * isinstance(ev, TokenCommitted))
        if len(committed) == 3:
            w.stop()

    w.generation_event.connect(stop_at_the_third_token)
    with qtbot.waitSignal(w.error_shown, timeout=60_000) as shown:
        w.composer.setPlainText("hello there")
        w.send_from_composer()
    assert "stopped answering" in shown.args[0] and "fresh process" in shown.args[0]
    qtbot.waitUntil(lambda: w.busy == "", timeout=10_000)
    reply = w.conv.messages[-1]
    assert reply.role == "assistant" and reply.content and reply.content == reply.trace.text
    stuck = w.hosts.host
    assert stuck is None or not stuck.alive
    w.generation_event.disconnect()
    w.new_chat()
    w.settings.max_new_tokens = 2  # stops before the third token: this child is not stopped
    send_and_wait(w, "hello again")
    assert w.hosts.host is not None and w.hosts.host is not stuck and w.hosts.host.alive


@pytest.fixture
def child_stops_mid_message(monkeypatch):
    """Replies whose decoding child, after the first event, writes the first 8 KB of a 1 MiB message and sends
    itself SIGSTOP: the app's read of that message would wait for the rest. Ask for it before the host forks."""
    import app.session as session_module
    from specdec_core.text import chat

    app_pid, real = os.getpid(), session_module.reply_events

    def stopping(*args):
        events = real(*args)
        yield next(events)
        if os.getpid() != app_pid:
            pipe = chat._renderer._conn  # the child's end of the pipe (app.host._AppRenderer holds it)
            os.write(pipe.fileno(), struct.pack("!i", 1 << 20) + bytes(8192))  # the framing's length, then part
            os.kill(os.getpid(), signal.SIGSTOP)
        yield from events

    monkeypatch.setattr(session_module, "reply_events", stopping)


def test_a_child_stopped_halfway_through_a_message_is_ended_after_stop(session, child_stops_mid_message, host):
    from app.host import Unresponsive

    controls, seen = Controls(), []
    with pytest.raises(Unresponsive, match="stopped answering .* the reply so far is kept"):
        for ev in host.run(reply_events, (MESSAGES, None, GenerationConfig(max_new_tokens=200)), controls):
            seen.append(ev)
            controls.cancel()  # Stop, pressed once the first event is in
    assert len(seen) == 1 and not host.alive and host.unresponsive
