# `python -m slurmpre.job steps|run ...`: see slurmpre.job.start.entry, which installs the
# time-limit latch before it imports anything else.
import sys

from slurmpre.job.start.entry import main

raise SystemExit(main(sys.argv[1:]))
