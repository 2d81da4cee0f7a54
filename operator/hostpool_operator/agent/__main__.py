from .program import main

raise SystemExit(main())
