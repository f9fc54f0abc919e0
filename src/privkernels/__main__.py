"""``python -m privkernels``: the ``privkernels`` command (`privkernels.cli.main`)."""

from privkernels.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
