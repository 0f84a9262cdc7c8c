# The time-limit warning must never kill the wrapper, which is the job step's
# task: catch it before anything else is imported (slurmpre's package __init__
# imports nothing), and hand the latch to the wrapper.
import signal

from slurmpre.signals import WARN_SIGNAL, Latch

warning = Latch()
signal.signal(WARN_SIGNAL, warning)

from slurmpre.job.run import main  # noqa: E402 - after the handler, on purpose

raise SystemExit(main(warning=warning))
