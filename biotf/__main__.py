import sys

from biotf.cli import main

sys.exit(main())
