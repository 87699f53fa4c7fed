"""``python -m feedline.train``, also under ``torchrun --nproc_per_node=N -m feedline.train``."""
from .command import main

raise SystemExit(main())
