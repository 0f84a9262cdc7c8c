# The time-limit warning must never kill the wrapper, which is the job step's
# task: catch it before anything else is imported (slurmpre's package __init__
# imports nothing), and hand the latch to the wrapper.
import signal
import sys

from slurmpre.signals import WARN_SIGNAL, Latch

warning = Latch()
signal.signal(WARN_SIGNAL, warning)

try:
    if sys.argv[1:2] == ["steps"]:  # the batch script's supervisor of steps
        from slurmpre.job.steps import main as steps

        code = steps()
    else:
        from slurmpre.job.run import main  # after the handler, on purpose

        code = main(warning=warning)
finally:
    # While Python exits it puts back the default action of every signal it handled:
    # a warning arriving then killed the task (exit 140, the job FAILED) just as the
    # training ended. Ignored, that action is left alone to the last instant.
    signal.signal(WARN_SIGNAL, signal.SIG_IGN)
raise SystemExit(code)
