"""``python -m thatch.cli``: the same entry point as the ``thatch`` script."""

from thatch.cli.entry import main

if __name__ == "__main__":
    main()
