"""GPU benchmarks: run by .ci/gpu/check.sh on the lent H100/H200 machine; each also has a
tiny CPU mode (--cpu-smoke) so the tests here catch import errors and bad arguments."""
