"""`evalpipe report`: run directories → leaderboards, plots and run comparisons.

One job per module: `discover` finds run directories, `readers` reads their files without
failing on damage, `loading` turns runs into pandas frames (merging shards), `stats` holds the
numerics (CI, paired bootstrap, McNemar, Holm), `aggregate` and `compare` are pure frame → frame
steps, `plots` draws PNGs, `tables` and `html` render the outputs. pandas and matplotlib are
imported at module level here: only `evalpipe report`'s `run` imports this package.
"""
