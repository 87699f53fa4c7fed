"""The decoders benchmark (feedline/benchmarks/decoders.py), as a script:

    python bench/decoders.py [DATA] [--quick] [--threads T] [--repeats R] [--out PATH] ...

The same as `feedline bench decoders`; results go to bench/results/decoders.json and .png.
"""
import sys

try:
    from . import common          # imported as bench.decoders
except ImportError:
    import common                 # run as python bench/decoders.py

if __name__ == "__main__":
    sys.exit(common.run_script("decoders"))
