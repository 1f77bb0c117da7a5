"""Code anchors (docs/tools.md §code-anchors): a memory names the code it is about, and a
recall says when that code changed since the memory was saved."""
