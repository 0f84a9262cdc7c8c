from slurmpre.console import main

raise SystemExit(main())
