"""The ``thatch`` console entry point.

Tool hooks (``buffer-batch``, ``buffer-tool``) run after every tool call of every agent
session, so they skip click and everything else: only the standard library and the
queue module are imported. Every other command goes through the click group.
"""

from __future__ import annotations

import sys

FAST_HOOKS = frozenset({"buffer-batch", "buffer-tool"})


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] in FAST_HOOKS and not {"-h", "--help"} & set(args[1:]):
        # --host only changes tool naming in printed nudges; tool hooks print nothing.
        from thatch.frontend.hook_runner import run_buffer_hook

        run_buffer_hook(args[0])
        sys.exit(0)
    from thatch.cli.main import main as click_main

    click_main()


if __name__ == "__main__":
    main()
