"""`python -m broker.handlers --reference` prints docs/apis.md, the APIs and versions served."""

import sys

from broker.handlers import reference

if sys.argv[1:] != ["--reference"]:
    sys.exit("usage: python -m broker.handlers --reference  (prints docs/apis.md)")
sys.stdout.write(reference())
