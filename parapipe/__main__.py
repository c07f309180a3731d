"""``python -m parapipe`` runs the CLI."""
from .cli import entry

entry()
