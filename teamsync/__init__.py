"""Team sync, the machine side (docs/team.md §sync-protocol): a linked store's outbox is
pushed to the hub and the hub's change feed applied to the local replica, by one process
per machine (``thatch team sync``). Above the frontend, below the CLI; never PostgreSQL."""

__all__: list[str] = []
