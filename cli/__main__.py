"""`python -m graphtrain.cli`: the same command as the `graphtrain` console script."""

from graphtrain.cli import main

main()
