"""python -m stackpin.demo DEST PROFILE_OR_DIR...: build the demo mirror of stand-ins."""

import sys

from stackpin.demo.mirror import main

sys.exit(main(sys.argv[1:]))
