"""``python -m feedline.train``, also under ``torchrun --nproc_per_node=N -m feedline.train``."""
from ..cli.train import main

raise SystemExit(main())
