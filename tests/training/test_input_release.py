"""The training iterator is gone before the run's end phase (final evaluation, export), not left for the garbage collector."""

import weakref

import pytest

from tests.support import SMALL_RUN


@pytest.mark.slow  # 4 s alone (a 3-update CLI run in this process); 16 s on 2 loaded cores
def test_the_training_iterator_is_deleted_right_after_the_last_update(cli, write_config, monkeypatch):
    # Deleting an idle tf.data iterator waits out its autotuning thread's sleep (up to a
    # minute, the interpreter held): deleted at once, it never idles (loop.Session.end_input).
    from opt_train.training import loop

    seen = {}
    run_loop, finish = loop.Session.loop, loop.Session.finish

    def watched_loop(self, *args, **kwargs):
        seen["iterator"] = weakref.ref(self.iterator)
        return run_loop(self, *args, **kwargs)

    def watched_finish(self):
        seen["alive at finish"] = seen["iterator"]() is not None
        return finish(self)

    monkeypatch.setattr(loop.Session, "loop", watched_loop)
    monkeypatch.setattr(loop.Session, "finish", watched_finish)
    result = cli("train", "--config", write_config({**SMALL_RUN, "max_steps": 3, "export": False}))
    assert result.exit_code == 0, result.output
    assert seen == {"iterator": seen["iterator"], "alive at finish": False}


def test_closing_a_session_driven_in_pieces_deletes_its_iterator(write_config):
    # The benchmark harness and tests drive a Session through loop(until=...) and close(); an
    # iterator left to the garbage collector stopped whichever test came next for 5-24 s.
    from opt_train.config.loader import load_config
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.loop import Session

    session = Session(build_run(load_config([write_config({**SMALL_RUN, "export": False})]), get_backend()))
    session.start(resume=False)
    session.loop(until=2)
    iterator = weakref.ref(session.iterator)
    session.close()
    assert session.step == 2 and iterator() is None
