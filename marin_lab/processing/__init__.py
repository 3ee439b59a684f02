"""Data steps: download, extract, dedup, quality filter, tokenize.

Each step is a plain function taking one frozen config; it never sees the executor. Steps read
and write shards (`marin_lab.io.documents`) and fan out over shards with
`marin_lab.processing.shards.map_shards`. Import the step modules directly
(`from marin_lab.processing.tokenize import tokenize, TokenizeConfig`): this package imports
nothing heavy on its own.
"""
