"""The loaders benchmark (feedline/benchmarks/loaders.py), as a script:

    python bench/loaders.py [DATA] [--quick] [--threads T] [--repeats R] [--out PATH] ...

The same as `feedline bench loaders`; results go to bench/results/loaders.json and .png.
"""
import sys

try:
    from . import common          # imported as bench.loaders
except ImportError:
    import common                 # run as python bench/loaders.py

if __name__ == "__main__":
    sys.exit(common.run_script("loaders"))
