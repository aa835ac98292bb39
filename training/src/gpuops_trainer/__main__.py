from .train import cli

cli()
