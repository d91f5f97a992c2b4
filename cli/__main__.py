"""`python -m cli ...`: how `gpuprov dev` starts the worker, and how tests run the command."""

from cli import main

main()
