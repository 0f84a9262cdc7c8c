import sys

import pytest
from slurmpre.cmd import run
from slurmpre.errors import CommandError, SlurmError


def test_run_returns_output() -> None:
    res = run([sys.executable, "-c", "print('hi')"])
    assert res.returncode == 0 and res.stdout == "hi\n"


def test_failure_names_command_exit_code_and_stderr() -> None:
    with pytest.raises(SlurmError) as info:
        run(
            [sys.executable, "-c", "import sys; sys.stderr.write('boom\\nbang\\n'); sys.exit(4)"],
            error=SlurmError,
        )
    msg = str(info.value)
    assert msg.startswith("command failed (exit 4): ")
    assert "\n    boom\n    bang" in msg


def test_missing_executable_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="no-such-tool-xyz: command not found"):
        run(["no-such-tool-xyz"])


def test_timeout() -> None:
    with pytest.raises(CommandError, match=r"timed out after 0\.2 s"):
        run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)


def test_check_false_returns_failure() -> None:
    res = run([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
    assert res.returncode == 3


def test_a_command_survives_the_time_limit_warning_sent_to_the_whole_step() -> None:
    """Slurm sends SIGUSR2 to every process of the job step (process group or cgroup): an
    scontrol the wrapper runs at that instant must not die of it (it once turned node 0's
    address query into a failure, and the rendezvous went to an unresolvable name)."""
    import signal as sig

    from slurmpre.signals import WARN_SIGNAL

    res = run(["sh", "-c", f"kill -{WARN_SIGNAL.name.removeprefix('SIG')} $$; echo alive"])
    assert res.returncode == 0 and res.stdout == "alive\n"
    # ... and the caller's own mask is what it was: the warning still reaches the wrapper.
    assert WARN_SIGNAL not in sig.pthread_sigmask(sig.SIG_BLOCK, set())


def test_a_logging_module_another_thread_is_importing_breaks_no_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wrapper's tier thread imports logging while the main thread runs git: the
    half-made module in sys.modules ("partially initialized module 'logging'") once ended
    an attempt at its start. A debug line is skipped instead."""
    import types

    monkeypatch.setitem(sys.modules, "logging", types.ModuleType("logging"))
    assert run(["true"]).returncode == 0
