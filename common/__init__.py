"""thatch.common: the base every other package may use; it imports no other thatch package.

Standard library only: the tool hooks import from here on every tool call.
"""
