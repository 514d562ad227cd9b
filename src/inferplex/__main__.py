from inferplex.cli import main

raise SystemExit(main())
