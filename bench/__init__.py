"""feedline's benchmarks: scripts run from a clone with the venv's python, never imported
by the package.

    python bench/decoders.py [--quick]   # JPEG decoders, full and region decode
    python bench/loaders.py [--quick]    # FeedLoader vs DataLoader + PIL, DALI CPU, the decode floor
    python bench/pack.py [--quick]       # feedline pack (in-process and the CLI end to end) vs tar

Each prints its tables and writes bench/results/local/NAME.json; --save writes the committed
bench/results/NAME.json, and --quick runs go to bench/results/quick/ (see `bench.common`).
Shared pieces: `common` (timing, tables, JSON), `machine` (what ran it), `chart`
(PNG), `data` (the realistic data set), `args` (the flags every script shares).
"""
