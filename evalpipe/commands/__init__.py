"""One module per CLI subcommand (see evalpipe/cli.py for the contract)."""
