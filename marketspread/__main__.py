from marketspread.cli import main

raise SystemExit(main())
