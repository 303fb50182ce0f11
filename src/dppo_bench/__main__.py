import sys

from dppo_bench.cli import main

sys.exit(main())
