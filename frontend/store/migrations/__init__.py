"""The migrations ``schema.MIGRATIONS`` applies in order, one module per group of tables.

``tables`` (m001-m003: the 14 tables of the earlier release and the columns later ones
added), ``changes`` (m004-m007: per-store counters and the ``entries`` change log),
``chat`` (m008, m011), ``lexical`` (m009, m017 and their backfill steps), ``duplicates`` (m010),
``engines`` (m012), ``branches`` (m013). Released migrations are never edited: a change
is a new one.
"""
