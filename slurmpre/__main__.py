from slurmpre.cli import main

raise SystemExit(main())
