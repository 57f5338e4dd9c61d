"""Order limits of the HEALPix morton grid, importable without mortie."""

#: mortie's deepest order, that of point words
MAX_ORDER = 29
