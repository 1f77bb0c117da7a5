"""The click group every thatch group uses: an unknown subcommand names the close ones."""

from __future__ import annotations

import click

__all__ = ["SuggestingGroup"]


class SuggestingGroup(click.Group):
    group_class = type  # a group made with @group.group suggests too

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0])
        # Completion parses resiliently: click's own lookup then answers without failing.
        unknown = self.get_command(ctx, name) is None and not name.startswith("-")
        if unknown and not ctx.resilient_parsing:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)
