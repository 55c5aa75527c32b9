import sys

from rollscope.cli import main

sys.exit(main())
