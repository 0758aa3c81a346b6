import sys

from devstack.commands import main

sys.exit(main())
