import os
import sys

from devstack.commands import main
from devstack.paths import PRIVATE_UMASK

os.umask(PRIVATE_UMASK)
sys.exit(main())
