"""``python -m perseus ...`` runs the ``perseus`` command."""
from perseus._cli import main

main()
