from slurmpre.job.run import main

raise SystemExit(main())
