"""`python -m stackpin`: the same CLI as the `stackpin` console script."""

from stackpin.cli.main import run

run()
