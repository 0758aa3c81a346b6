import os
import sys

from devstack.base import PRIVATE_UMASK
from devstack.commands import main

os.umask(PRIVATE_UMASK)
sys.exit(main())
